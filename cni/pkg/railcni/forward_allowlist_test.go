package railcni

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"
)

// The node's forwarding allow-list, as a NAD author would try to get around it: an address
// outside every CIDR, and a broken or missing file (which must fail, never open everything).

const allowListJSON = `{"rails": [{"interface": "nzbr0", "cidrs": ["10.101.0.0/24", "fd00:101::/64"]},
                                 {"interface": "nzbr1", "cidrs": ["10.102.0.0/24"]}]}`

func ipConfig(t *testing.T, cidr string) *current.IPConfig {
	t.Helper()
	ip, n, err := net.ParseCIDR(cidr)
	if err != nil {
		t.Fatal(err)
	}
	n.IP = ip
	return &current.IPConfig{Address: *n}
}

func TestForwardRulesMatchTheAllowListsInterface(t *testing.T) {
	allow, err := parseForwardAllowList("allow.json", []byte(allowListJSON))
	if err != nil {
		t.Fatal(err)
	}
	fw, err := forwardRulesFor("rail", "c1", "nz0", []*current.IPConfig{ipConfig(t, "10.102.0.7/24"), ipConfig(t, "fd00:101::7/64")}, allow)
	if err != nil {
		t.Fatal(err)
	}
	got := [][]string{}
	for i := range fw.prefixes {
		got = append(got, fw.specs(i)...)
	}
	want := []string{
		"-s 10.102.0.7/32 -i nzbr1 -m comment --comment nezha-rail:rail:c1:nz0 -j ACCEPT",
		"-d 10.102.0.7/32 -o nzbr1 -m comment --comment nezha-rail:rail:c1:nz0 -j ACCEPT",
		"-s fd00:101::7/128 -i nzbr0 -m comment --comment nezha-rail:rail:c1:nz0 -j ACCEPT",
		"-d fd00:101::7/128 -o nzbr0 -m comment --comment nezha-rail:rail:c1:nz0 -j ACCEPT",
	}
	for i, spec := range got {
		if strings.Join(spec, " ") != want[i] {
			t.Errorf("rule %d: %q, want %q", i, strings.Join(spec, " "), want[i])
		}
	}
}

func TestForwardRulesRefuseAnAddressOutsideTheAllowList(t *testing.T) {
	allow, err := parseForwardAllowList("/etc/allow.json", []byte(allowListJSON))
	if err != nil {
		t.Fatal(err)
	}
	// A NAD author asking for rules on a database's address (or anyone else's) gets none.
	_, err = forwardRulesFor("rail", "c1", "nz0", []*current.IPConfig{ipConfig(t, "10.101.0.5/24"), ipConfig(t, "192.168.7.10/24")}, allow)
	if err == nil || !strings.Contains(err.Error(), "192.168.7.10 is in no CIDR of the node's allow-list /etc/allow.json") ||
		!strings.Contains(err.Error(), `"forwardAccept"`) {
		t.Fatalf("address outside the allow-list: %v", err)
	}
}

func TestForwardAllowListErrorsNameTheFileAndField(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{`{"rails": [`, "f.json: unexpected end"},
		{`{"rails": []}`, `field "rails" is empty`},
		{`{"rails": [{"interface": "../x", "cidrs": ["10.0.0.0/8"]}]}`, `field "rails[0].interface"`},
		{`{"rails": [{"interface": "a-name-longer-than-15", "cidrs": ["10.0.0.0/8"]}]}`, `field "rails[0].interface"`},
		{`{"rails": [{"interface": "br0"}]}`, `field "rails[0].cidrs" is empty`},
		{`{"rails": [{"interface": "br0", "cidrs": ["10.0.0.0/8", "10.0.0.1"]}]}`, `field "rails[0].cidrs[1]"`},
	} {
		_, err := parseForwardAllowList("f.json", []byte(tc.raw))
		if err == nil || !strings.Contains(err.Error(), "forward allow-list f.json") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming f.json and %s", tc.raw, err, tc.want)
		}
	}
}

func TestForwardAcceptWithoutTheNodesAllowListFails(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none.json")
	t.Setenv(EnvForwardAllowList, missing)
	_, err := loadForwardAllowList()
	if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), EnvForwardAllowList) {
		t.Fatalf("missing allow-list: %v", err)
	}
	t.Setenv(EnvForwardAllowList, "")
	if forwardAllowListPath() != DefaultForwardAllowList {
		t.Fatalf("without %s the path is %s", EnvForwardAllowList, forwardAllowListPath())
	}
	ok := filepath.Join(t.TempDir(), "allow.json")
	if err := os.WriteFile(ok, []byte(allowListJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvForwardAllowList, ok)
	if l, err := loadForwardAllowList(); err != nil || len(l.entries) != 2 {
		t.Fatalf("allow-list %s: %v", ok, err)
	}
}

// Rules written before the allow-list (no interface match) still parse, so DEL and GC remove them.
func TestRuleLineParsesRulesWithAndWithoutTheInterfaceMatch(t *testing.T) {
	for line, matches := range map[string]string{
		`-A NEZHA-RAIL-FWD -s 10.0.0.2/32 -i nzbr0 -m comment --comment "nezha-rail:rail:c1:nz0" -j ACCEPT`: "-s 10.0.0.2/32 -i nzbr0",
		`-A NEZHA-RAIL-FWD -d 10.0.0.2/32 -o nzbr0 -m comment --comment nezha-rail:rail:c1:nz0 -j ACCEPT`:   "-d 10.0.0.2/32 -o nzbr0",
		`-A NEZHA-RAIL-FWD -s 10.0.0.2/32 -m comment --comment "nezha-rail:rail:c1:nz0" -j ACCEPT`:          "-s 10.0.0.2/32",
	} {
		m := ruleLine.FindStringSubmatch(line)
		if m == nil || m[1] != matches || m[2] != "rail" || m[3] != "c1" || m[4] != "nz0" {
			t.Errorf("%s: parsed %q", line, m)
		}
	}
}

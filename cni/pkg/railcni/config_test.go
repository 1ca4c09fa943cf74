package railcni

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseConfigRejectsBadFields(t *testing.T) {
	for _, tc := range []struct {
		name, json, wantErr string
	}{
		{"main table", `{"table": 254}`, `config field "table": 254 is a reserved kernel table`},
		{"table zero", `{"table": 0}`, `config field "table": 0 is not a routing table`},
		{"negative table", `{"table": -1}`, `parse network configuration`},
		{"priority of main", `{"rulePriority": 32766}`, `config field "rulePriority": 32766 is outside 1..32765`},
		{"priority of local", `{"rulePriority": 0}`, `config field "rulePriority": 0 is outside`},
		{"tiny mtu", `{"mtu": 67}`, `config field "mtu": 67 is outside 68..65535`},
		{"not json", `{`, `parse network configuration`},
		{"bad prevResult", `{"prevResult": {"ips": [{"address": "nonsense"}]}}`, `config field "prevResult"`},
		// dataDir comes from a NAD that namespace users can write; the plugin runs as root.
		{"dataDir escapes", `{"dataDir": "/var/lib/cni/../../etc"}`, `config field "dataDir": "/var/lib/cni/../../etc" must be an absolute, clean path`},
		{"dataDir elsewhere", `{"dataDir": "/etc/cron.d"}`, `config field "dataDir": "/etc/cron.d" is outside the allowed directories`},
		{"dataDir relative", `{"dataDir": "state"}`, `must be an absolute, clean path`},
		{"dataDir prefix trick", `{"dataDir": "/var/lib/cnix"}`, `is outside the allowed directories`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := strings.Replace(tc.json, "{", `{"cniVersion":"1.0.0","name":"rail0","type":"nezha-rail",`, 1)
			if tc.json == `{` {
				raw = tc.json
			}
			_, err := ParseConfig([]byte(raw))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ParseConfig(%s): error %v, want one containing %q", raw, err, tc.wantErr)
			}
		})
	}
}

func TestParseConfigDefaults(t *testing.T) {
	c, err := ParseConfig([]byte(`{"cniVersion":"1.0.0","name":"rail0","type":"nezha-rail"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Priority(); got != DefaultRulePriority {
		t.Errorf("Priority() = %d, want %d", got, DefaultRulePriority)
	}
	if got := c.StateDir(); got != DefaultDataDir {
		t.Errorf("StateDir() = %q, want %q", got, DefaultDataDir)
	}
	if got, want := c.TableFor("nz3"), DerivedTable("nz3"); got != want {
		t.Errorf("TableFor(nz3) = %d, want derived %d", got, want)
	}
	c, err = ParseConfig([]byte(`{"cniVersion":"1.0.0","name":"rail0","type":"nezha-rail","table":1000,"rulePriority":200}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.TableFor("nz3") != 1000 || c.Priority() != 200 {
		t.Errorf("explicit table/priority ignored: table %d priority %d", c.TableFor("nz3"), c.Priority())
	}
}

func TestParseConfigConvertsOldPrevResult(t *testing.T) {
	raw := `{"cniVersion":"0.3.1","name":"rail0","type":"nezha-rail","prevResult":{"cniVersion":"0.3.1",
	  "interfaces":[{"name":"nz0","sandbox":"/run/netns/x"}],
	  "ips":[{"version":"4","interface":0,"address":"10.100.0.10/24","gateway":"10.100.0.1"}]}}`
	c, err := ParseConfig([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := railIPConfigs(c.prev, "nz0")
	if err != nil || len(addrs) != 1 || addrs[0].Address.String() != "10.100.0.10/24" {
		t.Fatalf("railIPConfigs = %v, %v", addrs, err)
	}
	if _, err := railIPConfigs(c.prev, "nz1"); err == nil || !strings.Contains(err.Error(), `no IP address for interface "nz1"`) {
		t.Errorf("railIPConfigs(nz1): %v", err)
	}
}

// Derived tables must not collide for the interface names Nezha (nz0..nz15) and Multus (net1..)
// hand out, and must stay in the documented block away from the reserved tables.
func TestDerivedTablesAreDistinctForCommonNames(t *testing.T) {
	seen := map[uint32]string{}
	var names []string
	for i := 0; i < 16; i++ {
		names = append(names, fmt.Sprintf("nz%d", i), fmt.Sprintf("net%d", i+1), fmt.Sprintf("eth%d", i))
	}
	for _, n := range names {
		tbl := DerivedTable(n)
		if tbl&^derivedTableMask != derivedTableBase {
			t.Errorf("DerivedTable(%s) = %#x, outside 0x4E5A0000-0x4E5AFFFF", n, tbl)
		}
		if other, dup := seen[tbl]; dup {
			t.Errorf("DerivedTable(%s) = DerivedTable(%s) = %#x", n, other, tbl)
		}
		seen[tbl] = n
		if err := validateTable(tbl); err != nil {
			t.Errorf("DerivedTable(%s) invalid: %v", n, err)
		}
	}
}

func TestDataDirUnderAllowedRoots(t *testing.T) {
	for _, dir := range []string{"/var/lib/cni", "/var/lib/cni/nezha-rail", "/run/cni/x"} {
		raw := `{"cniVersion":"1.0.0","name":"rail0","type":"nezha-rail","dataDir":"` + dir + `"}`
		if _, err := ParseConfig([]byte(raw)); err != nil {
			t.Errorf("dataDir %s: %v", dir, err)
		}
	}
	t.Setenv(EnvDataRoots, "/srv/cni:/opt/state")
	raw := `{"cniVersion":"1.0.0","name":"rail0","type":"nezha-rail","dataDir":"/opt/state/rails"}`
	if _, err := ParseConfig([]byte(raw)); err != nil {
		t.Errorf("dataDir under a configured root: %v", err)
	}
	raw = `{"cniVersion":"1.0.0","name":"rail0","type":"nezha-rail","dataDir":"/var/lib/cni/x"}`
	if _, err := ParseConfig([]byte(raw)); err == nil {
		t.Error("dataDir under a default root accepted although NEZHA_RAIL_DATA_ROOTS replaces them")
	}
}

// FuzzParseConfig: any stdin gives a config or an error naming the plugin, never a panic; an
// accepted dataDir is always under an allowed root.
func FuzzParseConfig(f *testing.F) {
	for _, seed := range []string{
		`{"cniVersion":"1.0.0","name":"rail0","type":"nezha-rail","table":1000,"rulePriority":10000,"mtu":9000}`,
		`{"cniVersion":"1.0.0","name":"r","type":"nezha-rail","dataDir":"/var/lib/cni/a"}`,
		`{"cniVersion":"0.4.0","name":"r","type":"nezha-rail","prevResult":{"cniVersion":"0.4.0","interfaces":[{"name":"net1"}],"ips":[{"version":"4","address":"10.0.0.2/24","interface":0}]}}`,
		`{`, `[]`, `{"table":-1}`, `{"dataDir":"/var/lib/cni/../x"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, stdin []byte) {
		conf, err := ParseConfig(stdin)
		if err != nil {
			if !strings.HasPrefix(err.Error(), PluginName+": ") {
				t.Fatalf("error without the plugin's name: %v", err)
			}
			return
		}
		if conf.DataDir != "" && confined(conf.DataDir, DefaultDataRoots) != nil {
			t.Fatalf("accepted dataDir %q outside the roots", conf.DataDir)
		}
	})
}

package railcni

import (
	"encoding/json"
	"fmt"
	"net"
	"os"

	"github.com/containernetworking/cni/pkg/utils"
)

// The node's forwarding allow-list. "forwardAccept" comes from a NetworkAttachmentDefinition,
// which a tenant may author, while its rules open the host's FORWARD chain, which is the node
// administrator's: so the addresses a rule may name, and the host interface it is bound to, come
// from a file on the node that only the administrator writes (docs/security.md "Tenant model").
//
//	{"rails": [{"interface": "nzbr0", "cidrs": ["10.101.0.0/16", "fd00:101::/64"]}]}
//
// A rail address is accepted only when an entry's CIDR holds it; its rules then match that
// entry's interface (`-i` for traffic from the address, `-o` for traffic to it), the host bridge
// the rail's pods hang off, so they cannot open forwarding between other interfaces.

const (
	// DefaultForwardAllowList is where the node's allow-list lives.
	DefaultForwardAllowList = "/etc/nezha/rail-forward-allowlist.json"
	// EnvForwardAllowList moves it (set in the container runtime's environment, like
	// EnvDataRoots; not under a NAD's control).
	EnvForwardAllowList = "NEZHA_RAIL_FORWARD_ALLOWLIST"
)

// forwardAllowList is the parsed file.
type forwardAllowList struct {
	path    string
	entries []forwardAllowEntry
}

type forwardAllowEntry struct {
	iface string
	cidrs []*net.IPNet
}

type forwardAllowFile struct {
	Rails []struct {
		Interface string   `json:"interface"`
		CIDRs     []string `json:"cidrs"`
	} `json:"rails"`
}

func forwardAllowListPath() string {
	if p := os.Getenv(EnvForwardAllowList); p != "" {
		return p
	}
	return DefaultForwardAllowList
}

// loadForwardAllowList reads and validates the node's allow-list; every error names the file
// and, for a bad entry, the field.
func loadForwardAllowList() (*forwardAllowList, error) {
	path := forwardAllowListPath()
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config field \"forwardAccept\" needs the node's allow-list %s (%s; written by the node's administrator): %w",
			path, EnvForwardAllowList, err)
	}
	return parseForwardAllowList(path, raw)
}

func parseForwardAllowList(path string, raw []byte) (*forwardAllowList, error) {
	var f forwardAllowFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("forward allow-list %s: %w", path, err)
	}
	if len(f.Rails) == 0 {
		return nil, fmt.Errorf("forward allow-list %s: field \"rails\" is empty", path)
	}
	l := &forwardAllowList{path: path}
	for i, r := range f.Rails {
		if err := utils.ValidateInterfaceName(r.Interface); err != nil {
			return nil, fmt.Errorf("forward allow-list %s: field \"rails[%d].interface\": %w", path, i, err)
		}
		if len(r.CIDRs) == 0 {
			return nil, fmt.Errorf("forward allow-list %s: field \"rails[%d].cidrs\" is empty", path, i)
		}
		e := forwardAllowEntry{iface: r.Interface}
		for j, c := range r.CIDRs {
			_, n, err := net.ParseCIDR(c)
			if err != nil {
				return nil, fmt.Errorf("forward allow-list %s: field \"rails[%d].cidrs[%d]\": %w", path, i, j, err)
			}
			e.cidrs = append(e.cidrs, n)
		}
		l.entries = append(l.entries, e)
	}
	return l, nil
}

// interfaceFor is the host interface of the first entry whose CIDRs hold ip.
func (l *forwardAllowList) interfaceFor(ip net.IP) (string, error) {
	for _, e := range l.entries {
		for _, n := range e.cidrs {
			if n.Contains(ip) {
				return e.iface, nil
			}
		}
	}
	return "", fmt.Errorf("config field \"forwardAccept\": rail address %s is in no CIDR of the node's allow-list %s; "+
		"the node's administrator decides which addresses may be forwarded", ip, l.path)
}

package railcni

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"syscall"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Policy routing of one rail interface, all in the calling thread's network namespace (callers
// run these inside ns.WithNetNSPath):
//
//	ip rule add from <rail-ip>/32 lookup <table> priority <prio>
//	ip route replace <rail-subnet> dev <rail-if> src <rail-ip> scope link table <table>
//	ip route replace default via <rail-gw> dev <rail-if> table <table>      (when a gateway is known)
//	ip route replace <dst> via <gw> dev <rail-if> table <table>            (prevResult routes via the rail)
//
// The main table, and with it the pod's default route on its primary interface, is not touched:
// only traffic whose source is a rail address is steered.

// routingPlan is the desired policy routing of one rail interface.
type routingPlan struct {
	link     netlink.Link
	table    int
	priority int
	addrs    []*current.IPConfig
	routes   []*types.Route // prevResult routes whose gateway lies in a rail subnet
}

// railIPConfigs returns the prevResult addresses of interface ifname. An address without an
// interface index is taken to belong to it, as a single-interface plugin such as host-device
// reports it.
func railIPConfigs(prev *current.Result, ifname string) ([]*current.IPConfig, error) {
	var out []*current.IPConfig
	for _, ipc := range prev.IPs {
		if ipc.Interface != nil {
			i := *ipc.Interface
			if i < 0 || i >= len(prev.Interfaces) {
				return nil, fmt.Errorf("prevResult: ips entry %s names interface index %d, but there are %d interfaces", ipc.Address.String(), i, len(prev.Interfaces))
			}
			if prev.Interfaces[i].Name != ifname {
				continue
			}
		}
		out = append(out, ipc)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("prevResult has no IP address for interface %q: the previous plugin needs IPAM so the rail has an address to route from", ifname)
	}
	return out, nil
}

// railRoutes picks the prevResult routes that go through a gateway in one of the rail subnets.
func railRoutes(prev *current.Result, addrs []*current.IPConfig) []*types.Route {
	var out []*types.Route
	for _, r := range prev.Routes {
		if r.GW == nil {
			continue
		}
		for _, a := range addrs {
			if a.Address.Contains(r.GW) {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

func hostPrefix(ip net.IP) *net.IPNet {
	if ip4 := ip.To4(); ip4 != nil {
		return &net.IPNet{IP: ip4, Mask: net.CIDRMask(32, 32)}
	}
	return &net.IPNet{IP: ip, Mask: net.CIDRMask(128, 128)}
}

func defaultPrefix(ip net.IP) *net.IPNet {
	if ip.To4() != nil {
		return &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
	}
	return &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
}

func subnetOf(a net.IPNet) *net.IPNet {
	ip := a.IP.Mask(a.Mask)
	return &net.IPNet{IP: ip, Mask: a.Mask}
}

// desiredRoutes lists the routes the rail's table must hold.
func (p *routingPlan) desiredRoutes() []netlink.Route {
	idx := p.link.Attrs().Index
	var out []netlink.Route
	for _, a := range p.addrs {
		subnet := netlink.Route{LinkIndex: idx, Dst: subnetOf(a.Address), Scope: netlink.SCOPE_LINK, Table: p.table}
		if a.Address.IP.To4() != nil {
			// The preferred source makes unbound sockets that land in this table speak from the
			// rail address. IPv6 refuses a preferred source that is still tentative (DAD runs
			// during ADD); its source selection picks the on-link address anyway.
			subnet.Src = a.Address.IP
		}
		out = append(out, subnet)
		if a.Gateway != nil {
			out = append(out, netlink.Route{
				LinkIndex: idx, Dst: defaultPrefix(a.Address.IP), Gw: a.Gateway,
				Scope: netlink.SCOPE_UNIVERSE, Table: p.table,
			})
		}
	}
	for _, r := range p.routes {
		dst := r.Dst
		out = append(out, netlink.Route{
			LinkIndex: idx, Dst: &dst, Gw: r.GW,
			Scope: netlink.SCOPE_UNIVERSE, Table: p.table,
		})
	}
	return out
}

// desiredRules lists the source rules of the rail.
func (p *routingPlan) desiredRules() []*netlink.Rule {
	var out []*netlink.Rule
	for _, a := range p.addrs {
		r := netlink.NewRule()
		r.Src = hostPrefix(a.Address.IP)
		r.Table = p.table
		r.Priority = p.priority
		if a.Address.IP.To4() == nil {
			r.Family = unix.AF_INET6
		} else {
			r.Family = unix.AF_INET
		}
		out = append(out, r)
	}
	return out
}

// checkTableFree fails when the table already routes through another link, or holds rules for
// sources that are not this rail's: two rails sharing one table would route each other's traffic.
func (p *routingPlan) checkTableFree() error {
	routes, err := tableRoutes(p.table)
	if err != nil {
		return err
	}
	for _, r := range routes {
		if r.LinkIndex != 0 && r.LinkIndex != p.link.Attrs().Index {
			return fmt.Errorf("routing table %d already routes via another interface (index %d): give each rail its own config field \"table\"", p.table, r.LinkIndex)
		}
	}
	rules, err := tableRules(p.table)
	if err != nil {
		return err
	}
	for _, r := range rules {
		if !slices.ContainsFunc(p.desiredRules(), func(d *netlink.Rule) bool { return sameRuleSrc(d, &r) }) {
			return fmt.Errorf("routing table %d is already used by rule %q for another source: give each rail its own config field \"table\"", p.table, r.String())
		}
	}
	return nil
}

// apply installs the routes and rules; every write is idempotent so a repeated ADD is harmless.
func (p *routingPlan) apply() error {
	for _, r := range p.desiredRoutes() {
		if err := netlink.RouteReplace(&r); err != nil {
			return fmt.Errorf("replace route %s in table %d: %w", r.String(), p.table, err)
		}
	}
	existing, err := tableRules(p.table)
	if err != nil {
		return err
	}
	for _, want := range p.desiredRules() {
		if slices.ContainsFunc(existing, func(r netlink.Rule) bool { return sameRule(want, &r) }) {
			continue
		}
		// Rules have no replace; a concurrent identical add shows up as EEXIST and is fine.
		if err := netlink.RuleAdd(want); err != nil && !errors.Is(err, syscall.EEXIST) {
			return fmt.Errorf("add rule from %s lookup %d priority %d: %w", want.Src, p.table, p.priority, err)
		}
	}
	return nil
}

// check re-reads rules and routes from the kernel and reports the first thing missing.
func (p *routingPlan) check() error {
	rules, err := tableRules(p.table)
	if err != nil {
		return err
	}
	for _, want := range p.desiredRules() {
		if !slices.ContainsFunc(rules, func(r netlink.Rule) bool { return sameRule(want, &r) }) {
			return fmt.Errorf("rule \"from %s lookup %d priority %d\" is missing", want.Src, p.table, p.priority)
		}
	}
	routes, err := tableRoutes(p.table)
	if err != nil {
		return err
	}
	for _, want := range p.desiredRoutes() {
		if !slices.ContainsFunc(routes, func(r netlink.Route) bool { return sameRoute(&want, &r) }) {
			return fmt.Errorf("route %q in table %d is missing", describeRoute(&want, p.link.Attrs().Name), p.table)
		}
	}
	return nil
}

// cleanup says which rules and routes of a table belong to one attachment.
type cleanup struct {
	table int
	// sources of the attachment's rules (CIDR strings); nil removes every rule of the table,
	// which is only right for a table derived from the interface name.
	sources []string
	// linkIndex of the attachment's interface; 0 removes every route of the table.
	linkIndex int
}

// remove deletes the attachment's rules and routes. It works without the interface: rules
// outlive a deleted interface and must still go.
func (c cleanup) remove() error {
	var errs []error
	rules, err := tableRules(c.table)
	if err != nil {
		return err
	}
	for _, r := range rules {
		if c.sources != nil && (r.Src == nil || !slices.Contains(c.sources, r.Src.String())) {
			continue
		}
		if err := netlink.RuleDel(&r); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("delete rule %s: %w", r.String(), err))
		}
	}
	routes, err := tableRoutes(c.table)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, r := range routes {
		if c.linkIndex != 0 && r.LinkIndex != c.linkIndex {
			continue
		}
		if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, syscall.ESRCH) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("delete route %s from table %d: %w", r.String(), c.table, err))
		}
	}
	return errors.Join(errs...)
}

// ruleSources are the "from" prefixes of the plan's rules, as recorded in the state file.
func (p *routingPlan) ruleSources() []string {
	var out []string
	for _, r := range p.desiredRules() {
		out = append(out, r.Src.String())
	}
	return out
}

func tableRules(table int) ([]netlink.Rule, error) {
	rules, err := netlinksafe.RuleListFiltered(netlink.FAMILY_ALL, &netlink.Rule{Table: table}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("list rules of table %d: %w", table, err)
	}
	return rules, nil
}

func tableRoutes(table int) ([]netlink.Route, error) {
	routes, err := netlinksafe.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("list routes of table %d: %w", table, err)
	}
	return routes, nil
}

func sameRuleSrc(a, b *netlink.Rule) bool {
	return a.Src != nil && b.Src != nil && a.Src.String() == b.Src.String()
}

func sameRule(want, got *netlink.Rule) bool {
	return sameRuleSrc(want, got) && want.Table == got.Table && want.Priority == got.Priority
}

// sameRoute compares what matters for forwarding: destination, gateway and interface. The kernel
// may report a default route with a nil Dst; treat it as 0.0.0.0/0 (or ::/0).
func sameRoute(want, got *netlink.Route) bool {
	gotDst := got.Dst
	if gotDst == nil {
		gotDst = defaultPrefix(want.Dst.IP)
	}
	return gotDst.String() == want.Dst.String() &&
		got.LinkIndex == want.LinkIndex &&
		got.Gw.Equal(want.Gw)
}

func describeRoute(r *netlink.Route, ifname string) string {
	if r.Gw != nil {
		return fmt.Sprintf("%s via %s dev %s", r.Dst, r.Gw, ifname)
	}
	if r.Src != nil {
		return fmt.Sprintf("%s dev %s src %s", r.Dst, ifname, r.Src)
	}
	return fmt.Sprintf("%s dev %s", r.Dst, ifname)
}

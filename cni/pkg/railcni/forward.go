package railcni

import (
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"syscall"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/coreos/go-iptables/iptables"
)

// Host forwarding rules ("forwardAccept": true).
//
// A rail whose pods hang off a Linux bridge on the host (the bridge plugin, a veth into a
// bridge) is forwarded by the host: with br_netfilter loaded, even bridged frames pass the
// iptables FORWARD chain. Docker, and many host firewalls, set that chain's policy to DROP, and
// then every rail packet between two pods is dropped: the job's ranks never meet. Like the
// reference firewall plugin, nezha-rail can add explicit ACCEPT rules for the rail's addresses
// in the HOST namespace (the one the runtime runs the plugin in): a chain of its own, jumped to
// from the top of FORWARD, holding per attachment
//
//	-s <rail-ip>/32 -i <bridge> -m comment --comment nezha-rail:<network>:<containerID>:<ifname> -j ACCEPT
//	-d <rail-ip>/32 -o <bridge> -m comment --comment nezha-rail:<network>:<containerID>:<ifname> -j ACCEPT
//
// (ip6tables for IPv6 addresses). The address must lie in a CIDR of the node's allow-list and
// <bridge> is that entry's interface (forward_allowlist.go): the NAD that asks for the rules is
// a tenant's, the host's FORWARD chain is not. Unlike the firewall plugin, traffic TO the rail
// address is accepted for new connections too: peers on other nodes connect to a rank's rail
// address. DEL removes exactly the attachment's rules (found by their comment, so a changed
// allow-list cannot strand them) and GC those of attachments the runtime no longer knows; the
// chain and its jump stay (empty), as the firewall plugin's CNI-FORWARD does, because another
// ADD may be adding to them concurrently. Rails on macvlan, ipvlan, SR-IOV or
// host-device never pass the host's FORWARD chain and do not need this.

// ForwardChain is the filter-table chain holding the rails' ACCEPT rules.
const ForwardChain = "NEZHA-RAIL-FWD"

const filterTable = "filter"

// forwardRules is the set of ACCEPT rules of one attachment.
type forwardRules struct {
	comment  string
	prefixes []*net.IPNet // host prefixes (/32, /128) of the rail's addresses
	ifaces   []string     // per prefix: the host interface the allow-list gives it
}

func forwardComment(network, containerID, ifname string) string {
	return fmt.Sprintf("%s:%s:%s:%s", PluginName, network, containerID, ifname)
}

// forwardRulesFor builds the rules of an attachment from the rail's IP configs; an address the
// node's allow-list does not hold is refused.
func forwardRulesFor(network, containerID, ifname string, addrs []*current.IPConfig, allow *forwardAllowList) (*forwardRules, error) {
	r := &forwardRules{comment: forwardComment(network, containerID, ifname)}
	for _, a := range addrs {
		iface, err := allow.interfaceFor(a.Address.IP)
		if err != nil {
			return nil, err
		}
		r.prefixes = append(r.prefixes, hostPrefix(a.Address.IP))
		r.ifaces = append(r.ifaces, iface)
	}
	return r, nil
}

func protoOf(p *net.IPNet) iptables.Protocol {
	if p.IP.To4() != nil {
		return iptables.ProtocolIPv4
	}
	return iptables.ProtocolIPv6
}

// specs are prefix i's two rules, in the order `iptables -S` prints their matches.
func (r *forwardRules) specs(i int) [][]string {
	p, iface := r.prefixes[i].String(), r.ifaces[i]
	return [][]string{
		{"-s", p, "-i", iface, "-m", "comment", "--comment", r.comment, "-j", "ACCEPT"},
		{"-d", p, "-o", iface, "-m", "comment", "--comment", r.comment, "-j", "ACCEPT"},
	}
}

// iptablesFor caches one handle per protocol (each New runs `iptables --version`).
type iptablesFor map[iptables.Protocol]*iptables.IPTables

func (h iptablesFor) get(proto iptables.Protocol) (*iptables.IPTables, error) {
	if ipt, ok := h[proto]; ok {
		return ipt, nil
	}
	ipt, err := iptables.NewWithProtocol(proto)
	if err != nil {
		return nil, fmt.Errorf("config field \"forwardAccept\": host iptables for %s: %w", protoName(proto), err)
	}
	h[proto] = ipt
	return ipt, nil
}

func protoName(p iptables.Protocol) string {
	if p == iptables.ProtocolIPv6 {
		return "IPv6 (ip6tables)"
	}
	return "IPv4 (iptables)"
}

// forwardLockPath serialises ensureChain across concurrent plugin processes on the host: iptables'
// own lock (-w) covers one command, not the look-up-then-insert of the jump, and two first ADDs
// at once inserted the jump twice. A variable so tests in a private mount namespace may move it.
var forwardLockPath = "/run/nezha-rail-forward.lock"

// ensureChain creates ForwardChain and puts the jump to it first in FORWARD, once, under
// forwardLockPath.
func ensureChain(ipt *iptables.IPTables) error {
	unlock, err := lockFile(forwardLockPath)
	if err != nil {
		return fmt.Errorf("config field \"forwardAccept\": %w", err)
	}
	defer unlock()
	exists, err := ipt.ChainExists(filterTable, ForwardChain)
	if err != nil {
		return fmt.Errorf("look up chain %s: %w", ForwardChain, err)
	}
	if !exists {
		// Another ADD may create it between the check and here: that error is benign.
		if err := ipt.NewChain(filterTable, ForwardChain); err != nil {
			if ok, _ := ipt.ChainExists(filterTable, ForwardChain); !ok {
				return fmt.Errorf("create chain %s: %w", ForwardChain, err)
			}
		}
	}
	jump := []string{"-m", "comment", "--comment", PluginName + " rails", "-j", ForwardChain}
	ok, err := ipt.Exists(filterTable, "FORWARD", jump...)
	if err != nil {
		return fmt.Errorf("look up the FORWARD jump to %s: %w", ForwardChain, err)
	}
	if !ok {
		if err := ipt.Insert(filterTable, "FORWARD", 1, jump...); err != nil {
			return fmt.Errorf("insert the FORWARD jump to %s: %w", ForwardChain, err)
		}
	}
	return nil
}

// add installs the rules (idempotent).
func (r *forwardRules) add(h iptablesFor) error {
	for i, p := range r.prefixes {
		ipt, err := h.get(protoOf(p))
		if err != nil {
			return err
		}
		if err := ensureChain(ipt); err != nil {
			return err
		}
		for _, spec := range r.specs(i) {
			if err := ipt.AppendUnique(filterTable, ForwardChain, spec...); err != nil {
				return fmt.Errorf("add forward rule for %s: %w", p, err)
			}
		}
	}
	return nil
}

// removeForward deletes every rule of the attachment whose comment is given, whatever its
// addresses and interfaces (also those of an earlier release, without an interface match);
// absent rules and an absent chain are not errors.
func removeForward(h iptablesFor, comment string) error {
	return deleteForwardRules(h, func(m forwardRuleLine) bool { return m.comment == comment })
}

// check names the first rule that is missing.
func (r *forwardRules) check(h iptablesFor) error {
	for i, p := range r.prefixes {
		ipt, err := h.get(protoOf(p))
		if err != nil {
			return err
		}
		jump := []string{"-m", "comment", "--comment", PluginName + " rails", "-j", ForwardChain}
		if ok, err := ipt.Exists(filterTable, "FORWARD", jump...); err != nil || !ok {
			return fmt.Errorf("host FORWARD chain has no jump to %s (config field \"forwardAccept\")", ForwardChain)
		}
		for _, spec := range r.specs(i) {
			ok, err := ipt.Exists(filterTable, ForwardChain, spec...)
			if err != nil {
				return fmt.Errorf("look up forward rule for %s: %w", p, err)
			}
			if !ok {
				return fmt.Errorf("host chain %s lacks the rule %v (config field \"forwardAccept\")", ForwardChain, spec)
			}
		}
	}
	return nil
}

// ruleLine matches the rules this plugin writes, as `iptables -S` prints them (the interface
// match is absent from rules of releases before the node's allow-list).
var ruleLine = regexp.MustCompile(`^-A ` + ForwardChain + ` (-[sd] \S+(?: -[io] \S+)?) -m comment --comment "?` +
	regexp.QuoteMeta(PluginName) + `:([^:"]*):([^:"]*):([^:" ]*)"? -j ACCEPT$`)

// forwardRuleLine is one parsed rule of ForwardChain.
type forwardRuleLine struct {
	matches                      []string // "-s", "<prefix>" [, "-i", "<iface>"]
	network, containerID, ifname string
	comment                      string
}

// gcForward deletes the rules of this network's attachments that keep does not hold (keyed by
// stateFileName(containerID, ifname)).
func gcForward(h iptablesFor, network string, keep map[string]bool) error {
	return deleteForwardRules(h, func(m forwardRuleLine) bool {
		return m.network == network && !keep[stateFileName(m.containerID, m.ifname)]
	})
}

// deleteForwardRules deletes, in both protocols' ForwardChain, the plugin's rules that doomed
// selects.
func deleteForwardRules(h iptablesFor, doomed func(forwardRuleLine) bool) error {
	var errs []error
	for _, proto := range []iptables.Protocol{iptables.ProtocolIPv4, iptables.ProtocolIPv6} {
		ipt, err := h.get(proto)
		if err != nil {
			continue // no ip6tables on this host: ADD never wrote IPv6 rules either
		}
		if ok, err := ipt.ChainExists(filterTable, ForwardChain); err != nil || !ok {
			if err != nil {
				errs = append(errs, fmt.Errorf("look up chain %s: %w", ForwardChain, err))
			}
			continue
		}
		lines, err := ipt.List(filterTable, ForwardChain)
		if err != nil {
			errs = append(errs, fmt.Errorf("list chain %s: %w", ForwardChain, err))
			continue
		}
		for _, l := range lines {
			m := ruleLine.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			rule := forwardRuleLine{matches: strings.Fields(m[1]), network: m[2], containerID: m[3], ifname: m[4],
				comment: forwardComment(m[2], m[3], m[4])}
			if !doomed(rule) {
				continue
			}
			spec := append(rule.matches, "-m", "comment", "--comment", rule.comment, "-j", "ACCEPT")
			if err := ipt.DeleteIfExists(filterTable, ForwardChain, spec...); err != nil {
				errs = append(errs, fmt.Errorf("delete forward rule %v: %w", spec, err))
			}
		}
	}
	return errors.Join(errs...)
}

// lockFile takes an exclusive flock on path (created if needed) and returns its release.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { _ = f.Close() }, nil // closing the file releases the lock
}

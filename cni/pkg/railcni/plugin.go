package railcni

import (
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// Funcs are the plugin's CNI commands, for skel.PluginMainFuncs.
var Funcs = skel.CNIFuncs{Add: CmdAdd, Del: CmdDel, Check: CmdCheck, GC: CmdGC, Status: CmdStatus}

// CmdAdd sets up policy routing for the rail interface args.IfName and passes prevResult on.
func CmdAdd(args *skel.CmdArgs) error {
	if err := validateArgs(args); err != nil {
		return err
	}
	conf, err := ParseConfig(args.StdinData)
	if err != nil {
		return err
	}
	if conf.prev == nil {
		return ErrNoPrevResult
	}
	addrs, err := railIPConfigs(conf.prev, args.IfName)
	if err != nil {
		return fmt.Errorf("%s ADD: %w", PluginName, err)
	}
	// The node's allow-list is consulted before anything changes: an address it does not hold
	// fails the ADD with nothing to undo.
	var fw *forwardRules
	if conf.ForwardAccept {
		if fw, err = forwardRulesOf(conf, args, addrs); err != nil {
			return fmt.Errorf("%s ADD %s: %w", PluginName, args.IfName, err)
		}
	}
	store, err := newStateStore(conf.StateDir(), conf.Name)
	if err != nil {
		return err
	}
	err = ns.WithNetNSPath(args.Netns, func(_ ns.NetNS) error {
		link, err := netlinksafe.LinkByName(args.IfName)
		if err != nil {
			return fmt.Errorf("rail interface %q from prevResult: %w", args.IfName, err)
		}
		plan := &routingPlan{
			link: link, table: int(conf.TableFor(args.IfName)), priority: conf.Priority(),
			addrs: addrs, routes: railRoutes(conf.prev, addrs),
		}
		if err := plan.checkTableFree(); err != nil {
			return err
		}
		if err := recordState(store, args, conf, plan); err != nil {
			return err
		}
		if conf.MTU != 0 && link.Attrs().MTU != conf.MTU {
			if err := netlink.LinkSetMTU(link, conf.MTU); err != nil {
				return fmt.Errorf("config field \"mtu\": set MTU %d on %q: %w", conf.MTU, args.IfName, err)
			}
		}
		for _, s := range railSysctls {
			if err := writeIfSysctl(args.IfName, s.key, s.value); err != nil {
				return err
			}
		}
		return plan.apply()
	})
	if err != nil {
		return fmt.Errorf("%s ADD %s: %w", PluginName, args.IfName, err)
	}
	if fw != nil {
		// In the host namespace, where the runtime runs the plugin.
		if err := fw.add(iptablesFor{}); err != nil {
			return fmt.Errorf("%s ADD %s: %w", PluginName, args.IfName, err)
		}
	}
	return types.PrintResult(conf.PrevResult, conf.CNIVersion)
}

// recordState saves what ADD is about to change. A repeated ADD keeps the first record: the
// sysctls and MTU it would read now are ADD's own.
func recordState(store *stateStore, args *skel.CmdArgs, conf *NetConf, plan *routingPlan) error {
	old, err := store.load(args.ContainerID, args.IfName)
	if err != nil {
		return err
	}
	if old != nil {
		return nil
	}
	sysctls, err := readRailSysctls(args.IfName)
	if err != nil {
		return err
	}
	st := &attachmentState{
		ContainerID: args.ContainerID, IfName: args.IfName,
		Table: uint32(plan.table), RuleSources: plan.ruleSources(),
		OriginalSysctls: sysctls,
	}
	if conf.MTU != 0 {
		st.OriginalMTU = plan.link.Attrs().MTU
	}
	return store.save(st)
}

// CmdDel removes the rail's rules and routes and restores its sysctls and MTU. It succeeds when
// the namespace or the interface is already gone, and when run twice.
func CmdDel(args *skel.CmdArgs) error {
	if err := validateArgs(args); err != nil {
		return err
	}
	conf, err := ParseConfig(args.StdinData)
	if err != nil {
		return err
	}
	store, err := newStateStore(conf.StateDir(), conf.Name)
	if err != nil {
		return err
	}
	st, err := store.load(args.ContainerID, args.IfName)
	if err != nil {
		return fmt.Errorf("%s DEL %s: %w", PluginName, args.IfName, err)
	}
	if args.Netns != "" {
		err = ns.WithNetNSPath(args.Netns, func(_ ns.NetNS) error {
			c, err := cleanupFor(conf, args.IfName, st)
			if err != nil {
				return err
			}
			return errors.Join(c.remove(), restoreOriginals(args.IfName, st))
		})
		var gone ns.NSPathNotExistErr
		if errors.As(err, &gone) {
			err = nil // the pod is gone and its rules and routes with it
		}
		if err != nil {
			return fmt.Errorf("%s DEL %s: %w", PluginName, args.IfName, err)
		}
	}
	if conf.ForwardAccept {
		if err := removeForward(iptablesFor{}, forwardComment(conf.Name, args.ContainerID, args.IfName)); err != nil {
			return fmt.Errorf("%s DEL %s: %w", PluginName, args.IfName, err)
		}
	}
	if err := store.remove(args.ContainerID, args.IfName); err != nil {
		return fmt.Errorf("%s DEL %s: %w", PluginName, args.IfName, err)
	}
	return nil
}

// forwardRulesOf builds the attachment's host forwarding rules under the node's allow-list.
func forwardRulesOf(conf *NetConf, args *skel.CmdArgs, addrs []*current.IPConfig) (*forwardRules, error) {
	allow, err := loadForwardAllowList()
	if err != nil {
		return nil, err
	}
	return forwardRulesFor(conf.Name, args.ContainerID, args.IfName, addrs, allow)
}

// cleanupFor works out what DEL removes, from the best record available: the state file written
// by ADD, else the prevResult addresses (libcni passes the cached ADD result), else, for a table
// derived from the interface name (which nothing else uses), the whole table. With none of these
// ADD cannot have changed anything: it records state before its first change.
func cleanupFor(conf *NetConf, ifname string, st *attachmentState) (*cleanup, error) {
	c := &cleanup{table: int(conf.TableFor(ifname))}
	link, err := netlinksafe.LinkByName(ifname)
	var notFound netlink.LinkNotFoundError
	switch {
	case err == nil:
		c.linkIndex = link.Attrs().Index
	case !errors.As(err, &notFound):
		return nil, fmt.Errorf("find %q: %w", ifname, err)
	}
	switch {
	case st != nil:
		c.table = int(st.Table)
		c.sources = st.RuleSources
	case conf.prev != nil:
		addrs, err := railIPConfigs(conf.prev, ifname)
		if err != nil {
			return nil, err
		}
		c.sources = (&routingPlan{addrs: addrs, table: c.table, priority: conf.Priority()}).ruleSources()
	case conf.Table == nil:
		c.sources = nil // derived table: all of it is ours
	default:
		c.sources = []string{} // nothing recorded, so nothing was changed
	}
	if c.sources != nil && c.linkIndex == 0 {
		// The interface is gone and the kernel removed its routes with it; routes through other
		// links of a shared table are not ours.
		c.linkIndex = -1
	}
	return c, nil
}

// restoreOriginals puts back what recordState saved, if the interface is still in the pod
// (host-device moves it back to the host on DEL, and a later owner must not inherit our settings).
func restoreOriginals(ifname string, st *attachmentState) error {
	if st == nil {
		return nil
	}
	link, err := netlinksafe.LinkByName(ifname)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return nil
		}
		return fmt.Errorf("find %q to restore its settings: %w", ifname, err)
	}
	var errs []error
	for _, s := range railSysctls {
		if v, ok := st.OriginalSysctls[s.key]; ok {
			errs = append(errs, writeIfSysctl(ifname, s.key, v))
		}
	}
	if st.OriginalMTU != 0 && link.Attrs().MTU != st.OriginalMTU {
		if err := netlink.LinkSetMTU(link, st.OriginalMTU); err != nil {
			errs = append(errs, fmt.Errorf("restore MTU %d on %q: %w", st.OriginalMTU, ifname, err))
		}
	}
	return errors.Join(errs...)
}

// CmdCheck re-reads the kernel state and fails when a rule, route, sysctl or the MTU ADD set is
// no longer in place.
func CmdCheck(args *skel.CmdArgs) error {
	if err := validateArgs(args); err != nil {
		return err
	}
	conf, err := ParseConfig(args.StdinData)
	if err != nil {
		return err
	}
	if conf.prev == nil {
		return ErrNoPrevResult
	}
	addrs, err := railIPConfigs(conf.prev, args.IfName)
	if err != nil {
		return fmt.Errorf("%s CHECK: %w", PluginName, err)
	}
	err = ns.WithNetNSPath(args.Netns, func(_ ns.NetNS) error {
		link, err := netlinksafe.LinkByName(args.IfName)
		if err != nil {
			return fmt.Errorf("rail interface %q: %w", args.IfName, err)
		}
		if conf.MTU != 0 && link.Attrs().MTU != conf.MTU {
			return fmt.Errorf("MTU of %q is %d, config field \"mtu\" wants %d", args.IfName, link.Attrs().MTU, conf.MTU)
		}
		for _, s := range railSysctls {
			v, err := readIfSysctl(args.IfName, s.key)
			if err != nil {
				return err
			}
			if v != s.value {
				return fmt.Errorf("net.ipv4.conf.%s.%s is %s, want %s", args.IfName, s.key, v, s.value)
			}
		}
		plan := &routingPlan{
			link: link, table: int(conf.TableFor(args.IfName)), priority: conf.Priority(),
			addrs: addrs, routes: railRoutes(conf.prev, addrs),
		}
		return plan.check()
	})
	if err == nil && conf.ForwardAccept {
		var fw *forwardRules
		if fw, err = forwardRulesOf(conf, args, addrs); err == nil {
			err = fw.check(iptablesFor{})
		}
	}
	if err != nil {
		return fmt.Errorf("%s CHECK %s: %w", PluginName, args.IfName, err)
	}
	return nil
}

// CmdGC drops the state of attachments the runtime no longer knows. Their namespaces, and the
// rules and routes in them, are already gone; only the state files would leak.
func CmdGC(args *skel.CmdArgs) error {
	conf, err := ParseConfig(args.StdinData)
	if err != nil {
		return err
	}
	store, err := newStateStore(conf.StateDir(), conf.Name)
	if err != nil {
		return err
	}
	keep := make(map[string]bool, len(conf.ValidAttachments))
	for _, a := range conf.ValidAttachments {
		keep[stateFileName(a.ContainerID, a.IfName)] = true
		// A record of an earlier release stays until its own DEL (load checks it is the one).
		keep[legacyStateFileName(a.ContainerID, a.IfName)] = true
	}
	if _, err := store.gc(keep); err != nil {
		return fmt.Errorf("%s GC: %w", PluginName, err)
	}
	if conf.ForwardAccept {
		if err := gcForward(iptablesFor{}, conf.Name, keep); err != nil {
			return fmt.Errorf("%s GC: %w", PluginName, err)
		}
	}
	return nil
}

// CmdStatus reports whether the plugin can serve ADD: its state directory must be writable.
func CmdStatus(args *skel.CmdArgs) error {
	conf, err := ParseConfig(args.StdinData)
	if err != nil {
		return err
	}
	store, err := newStateStore(conf.StateDir(), conf.Name)
	if err != nil {
		return err
	}
	if err := store.checkWritable(); err != nil {
		// 50 is the spec's "plugin not available" for STATUS.
		return types.NewError(50, "nezha-rail is not available", err.Error())
	}
	return nil
}

// SupportedVersions are the CNI spec versions the plugin speaks (CHECK needs 0.4.0, GC and
// STATUS 1.1.0).
var SupportedVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

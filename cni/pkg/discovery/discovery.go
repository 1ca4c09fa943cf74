// Package discovery finds which host interface backs each rail on this node, from the cluster's
// RailClasses: by interface name, by PCI address (through /sys/class/net/*/device) or by a
// per-node map. It is re-run whenever links appear, disappear or are renamed, and whenever the
// RailClasses change, so late or renamed interfaces are picked up.
package discovery

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// DefaultSysClassNet is where the kernel lists network interfaces.
const DefaultSysClassNet = "/sys/class/net"

// SysFS reads interface facts from a /sys/class/net-like directory (a fake one in tests).
type SysFS struct {
	Root string
}

// pciAddr matches domain:bus:device.function.
var pciAddr = regexp.MustCompile(`^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`)

// PCIAddress is the PCI address of interface ifname, or "" for interfaces that are not PCI
// functions (veth, bridges, USB NICs).
func (s SysFS) PCIAddress(ifname string) string {
	target, err := os.Readlink(filepath.Join(s.Root, ifname, "device"))
	if err != nil {
		return ""
	}
	base := filepath.Base(target)
	if !pciAddr.MatchString(base) {
		return ""
	}
	return strings.ToLower(base)
}

// InterfacesByPCI maps lower-case PCI addresses to interface names for every interface listed.
func (s SysFS) InterfacesByPCI() (map[string]string, error) {
	entries, err := os.ReadDir(s.Root)
	if err != nil {
		return nil, fmt.Errorf("list interfaces in %s: %w", s.Root, err)
	}
	out := map[string]string{}
	for _, e := range entries {
		if addr := s.PCIAddress(e.Name()); addr != "" {
			out[addr] = e.Name()
		}
	}
	return out, nil
}

// Rail is one rail's host interface on this node, as resolved from its RailClass.
type Rail struct {
	// Name is the RailClass name.
	Name string
	// Interface is the host interface name; "" when the selector matched nothing.
	Interface string
	// PCIAddress is the NIC's PCI address when known.
	PCIAddress string
	// Problem says why Interface is empty.
	Problem string
}

// Resolve returns the rails present on node, sorted by name. A rail whose perNode map lacks the
// node is not on this node and is left out; a rail whose name or PCI address matches nothing is
// kept with a Problem (the interface may appear later: the caller resolves again on link events).
// links is the set of interface names that exist now.
func Resolve(classes []nezhav1.RailClass, node string, links map[string]bool, fs SysFS) []Rail {
	var byPCI map[string]string
	var pciErr error
	var out []Rail
	for i := range classes {
		rc := &classes[i]
		sel := rc.Spec.HostInterface
		r := Rail{Name: rc.Name}
		switch {
		case sel.Name != "":
			r.Interface = sel.Name
		case sel.PCIAddress != "":
			if byPCI == nil && pciErr == nil {
				byPCI, pciErr = fs.InterfacesByPCI()
			}
			want := strings.ToLower(sel.PCIAddress)
			r.PCIAddress = want
			if pciErr != nil {
				r.Problem = fmt.Sprintf("cannot resolve pciAddress %s: %v", want, pciErr)
			} else if ifname, ok := byPCI[want]; ok {
				r.Interface = ifname
			} else {
				r.Problem = fmt.Sprintf("no interface matches pciAddress %s", want)
			}
		case len(sel.PerNode) > 0:
			ifname, ok := sel.PerNode[node]
			if !ok {
				continue // this node has no interface on the rail
			}
			r.Interface = ifname
		default:
			r.Problem = "spec.hostInterface sets none of name, pciAddress, perNode"
		}
		if r.Interface != "" {
			if !links[r.Interface] {
				r.Problem = fmt.Sprintf("interface %q does not exist", r.Interface)
				r.Interface = ""
			} else if r.PCIAddress == "" {
				r.PCIAddress = fs.PCIAddress(r.Interface)
			}
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Rail) int { return strings.Compare(a.Name, b.Name) })
	return out
}

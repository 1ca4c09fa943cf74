package discovery

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// fakeSysFS builds a /sys/class/net lookalike: every interface is a directory, PCI functions get
// a device symlink ending in their address, as the kernel makes them.
func fakeSysFS(t *testing.T, devices map[string]string) SysFS {
	t.Helper()
	root := t.TempDir()
	for ifname, dev := range devices {
		dir := filepath.Join(root, ifname)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if dev != "" {
			if err := os.Symlink(filepath.Join("../../../devices/pci0000:3a", dev), filepath.Join(dir, "device")); err != nil {
				t.Fatal(err)
			}
		}
	}
	return SysFS{Root: root}
}

func railClass(name string, sel nezhav1.HostInterfaceSelector) nezhav1.RailClass {
	return nezhav1.RailClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: nezhav1.RailClassSpec{HostInterface: sel}}
}

func TestResolve(t *testing.T) {
	fs := fakeSysFS(t, map[string]string{
		"ens1f0": "0000:3b:00.0",
		"ens1f1": "0000:3B:00.1", // upper-case hex as some tools print it
		"veth0":  "",
		"usb0":   "1-1:1.0", // not a PCI function
	})
	links := map[string]bool{"ens1f0": true, "ens1f1": true, "veth0": true, "usb0": true}
	classes := []nezhav1.RailClass{
		railClass("by-name", nezhav1.HostInterfaceSelector{Name: "ens1f0"}),
		railClass("by-pci", nezhav1.HostInterfaceSelector{PCIAddress: "0000:3b:00.1"}),
		railClass("by-pci-missing", nezhav1.HostInterfaceSelector{PCIAddress: "0000:af:00.0"}),
		railClass("per-node", nezhav1.HostInterfaceSelector{PerNode: map[string]string{"node-a": "veth0", "node-b": "eth9"}}),
		railClass("per-node-other", nezhav1.HostInterfaceSelector{PerNode: map[string]string{"node-b": "eth9"}}),
		railClass("name-missing", nezhav1.HostInterfaceSelector{Name: "ens9"}),
		railClass("empty-selector", nezhav1.HostInterfaceSelector{}),
	}
	got := Resolve(classes, "node-a", links, fs)
	want := []Rail{
		{Name: "by-name", Interface: "ens1f0", PCIAddress: "0000:3b:00.0"},
		{Name: "by-pci", Interface: "ens1f1", PCIAddress: "0000:3b:00.1"},
		{Name: "by-pci-missing", PCIAddress: "0000:af:00.0", Problem: "no interface matches pciAddress 0000:af:00.0"},
		{Name: "empty-selector", Problem: "spec.hostInterface sets none of name, pciAddress, perNode"},
		{Name: "name-missing", Problem: `interface "ens9" does not exist`},
		{Name: "per-node", Interface: "veth0"},
		// per-node-other: node-a is not in its map, so the rail is not on this node at all.
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Resolve mismatch (-want +got):\n%s", diff)
	}
}

// A renamed or late interface is found on the next Resolve: nothing is cached between calls.
func TestResolveFollowsRenames(t *testing.T) {
	classes := []nezhav1.RailClass{railClass("rail0", nezhav1.HostInterfaceSelector{PCIAddress: "0000:3b:00.0"})}
	before := Resolve(classes, "n", map[string]bool{"eth0": true}, fakeSysFS(t, map[string]string{"eth0": "0000:3b:00.0"}))
	after := Resolve(classes, "n", map[string]bool{"ens1f0": true}, fakeSysFS(t, map[string]string{"ens1f0": "0000:3b:00.0"}))
	if before[0].Interface != "eth0" || after[0].Interface != "ens1f0" {
		t.Errorf("rename not followed: before %+v, after %+v", before[0], after[0])
	}
}

func TestResolveUnreadableSysFS(t *testing.T) {
	classes := []nezhav1.RailClass{railClass("rail0", nezhav1.HostInterfaceSelector{PCIAddress: "0000:3b:00.0"})}
	got := Resolve(classes, "n", nil, SysFS{Root: filepath.Join(t.TempDir(), "missing")})
	if got[0].Interface != "" || got[0].Problem == "" {
		t.Errorf("want a problem for an unreadable sysfs, got %+v", got[0])
	}
}

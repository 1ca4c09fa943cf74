package railcni_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/nezha-project/nezha/cni/internal/nstest"
	"github.com/nezha-project/nezha/cni/pkg/railcni"
)

// Addresses of the two pods on the two rails, all in railSubnet.
const (
	podARail0, podARail1 = "10.100.0.10", "10.100.0.11"
	podBRail0, podBRail1 = "10.100.0.20", "10.100.0.21"
	railGateway          = "10.100.0.1"
)

func conf(version string, rail int, ip string, withPlugin bool) railConf {
	return railConf{version: version, rail: rail, address: ip + "/24", withPlugin: withPlugin}
}

// TestSameSubnetRailsLeaveThroughTheirOwnInterface is the reason the plugin exists. Two pods,
// each with two rails in one subnet, send from their rail-1 address to the other's rail-1
// address. With nezha-rail the bytes leave through nz1; without it (same topology, same plugins
// minus nezha-rail) the main table's first same-subnet route wins and rail 1's traffic silently
// rides rail 0.
func TestSameSubnetRailsLeaveThroughTheirOwnInterface(t *testing.T) {
	const payload = 4 << 20
	for _, tc := range []struct {
		name       string
		withPlugin bool
		wantDev    string
		idleDev    string
	}{
		{name: "with nezha-rail", withPlugin: true, wantDev: "nz1", idleDev: "nz0"},
		{name: "without nezha-rail (control)", withPlugin: false, wantDev: "nz0", idleDev: "nz1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBed(t)
			podA, podB := nstest.New(t, "pa"), nstest.New(t, "pb")
			for _, p := range []struct {
				pod      nstest.NS
				ip0, ip1 string
			}{{podA, podARail0, podARail1}, {podB, podBRail0, podBRail1}} {
				// Distros and runtimes often make reverse-path filtering strict for every
				// interface; the plugin must keep rails working under it.
				p.pod.MustIP(t, "netns", "exec", p.pod.Name, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=1")
				b.mustAdd(p.pod, conf("1.0.0", 0, p.ip0, tc.withPlugin))
				b.mustAdd(p.pod, conf("1.0.0", 1, p.ip1, tc.withPlugin))
			}

			if got := routeDev(t, podA, podARail1, podBRail1); got != tc.wantDev {
				t.Errorf("ip route get %s from %s: dev %s, want %s", podBRail1, podARail1, got, tc.wantDev)
			}
			tx := sendTCP(t, podA, podARail1, podB, podBRail1, payload)
			t.Logf("%s: %d bytes from %s: nz0 sent %d bytes, nz1 sent %d bytes", tc.name, payload, podARail1, tx["nz0"], tx["nz1"])
			if tx[tc.wantDev] < payload {
				t.Errorf("%s sent %d bytes, want at least the %d-byte payload", tc.wantDev, tx[tc.wantDev], payload)
			}
			if tx[tc.idleDev] > payload/10 {
				t.Errorf("%s sent %d bytes, want (almost) none of the %d-byte payload", tc.idleDev, tx[tc.idleDev], payload)
			}
			// Rail 0's own traffic stays on rail 0 either way.
			tx0 := sendTCP(t, podA, podARail0, podB, podBRail0, payload)
			if tx0["nz0"] < payload || tx0["nz1"] > payload/10 {
				t.Errorf("rail 0 traffic: nz0 sent %d, nz1 sent %d bytes of %d", tx0["nz0"], tx0["nz1"], payload)
			}
		})
	}
}

// TestAddCheckDel runs the life cycle for every CNI version, reading back rules, routes and
// sysctls from the kernel after each step: Debian's reference plugins for 0.3.1-1.0.0, the pinned
// module's for 1.1.0 (where libcni also sends STATUS and GC).
func TestAddCheckDel(t *testing.T) {
	for _, version := range []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run(version, func(t *testing.T) {
			b := newBed(t)
			if version == "1.1.0" {
				b = newBedWith(t, moduleRefDir)
			}
			pod := nstest.New(t, "p")
			c0 := conf(version, 0, podARail0, true)
			c1 := conf(version, 1, podARail1, true)
			c1.gateway = railGateway
			c1.extra = map[string]any{"mtu": 1400}

			res := b.mustAdd(pod, c0)
			if res.Version() != version {
				t.Errorf("ADD result version %s, want %s (prevResult must pass through)", res.Version(), version)
			}
			b.mustAdd(pod, c1)

			for _, c := range []railConf{c0, c1} {
				ip := strings.TrimSuffix(c.address, "/24")
				table := tableOf(t, pod, ip)
				if want := int(railcni.DerivedTable(c.ifname())); table != want {
					t.Fatalf("rule from %s: table %d, want derived table %d", ip, table, want)
				}
				wantRoutes := []string{railSubnet + " dev " + c.ifname()}
				if c.gateway != "" {
					wantRoutes = append(wantRoutes, "default dev "+c.ifname()+" via "+c.gateway)
				}
				got := routesIn(t, pod, table)
				slices.Sort(got)
				slices.Sort(wantRoutes)
				if !slices.Equal(got, wantRoutes) {
					t.Errorf("table %d of %s: routes %q, want %q", table, c.ifname(), got, wantRoutes)
				}
				for key, want := range map[string]string{"rp_filter": "2", "arp_ignore": "1", "arp_announce": "2"} {
					if got := sysctlIn(t, pod, c.ifname(), key); got != want {
						t.Errorf("%s %s = %s, want %s", c.ifname(), key, got, want)
					}
				}
			}
			if got := mtuIn(t, pod, "nz1"); got != 1400 {
				t.Errorf("nz1 MTU %d, want 1400 from config", got)
			}
			// The pod's main table is untouched: no default route appeared there.
			if got := routesIn(t, pod, 254); slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "default") }) {
				t.Errorf("main table got a default route: %q", got)
			}

			if version != "0.3.1" { // CHECK exists from 0.4.0 on
				for _, c := range []railConf{c0, c1} {
					if err := b.check(pod, c); err != nil {
						t.Errorf("CHECK %s after ADD: %v", c.ifname(), err)
					}
				}
			}
			if version == "1.1.0" {
				for _, c := range []railConf{c0, c1} {
					err := b.inNode(func(ctx context.Context) error { return b.cni.GetStatusNetworkList(ctx, b.list(c)) })
					if err != nil {
						t.Errorf("STATUS %s: %v", c.ifname(), err)
					}
					// GC with the attachment still valid keeps it working.
					err = b.inNode(func(ctx context.Context) error {
						return b.cni.GCNetworkList(ctx, b.list(c), &libcni.GCArgs{ValidAttachments: []types.GCAttachment{{ContainerID: pod.Name, IfName: c.ifname()}}})
					})
					if err != nil {
						t.Errorf("GC %s: %v", c.ifname(), err)
					}
					if err := b.check(pod, c); err != nil {
						t.Errorf("CHECK %s after GC that keeps it: %v", c.ifname(), err)
					}
				}
			}

			for _, c := range []railConf{c1, c0} {
				ip := strings.TrimSuffix(c.address, "/24")
				table := int(railcni.DerivedTable(c.ifname()))
				if err := b.del(pod, c); err != nil {
					t.Fatalf("DEL %s: %v", c.ifname(), err)
				}
				if got := tableOf(t, pod, ip); got != 0 {
					t.Errorf("after DEL %s: rule from %s still points at table %d", c.ifname(), ip, got)
				}
				if got := routesIn(t, pod, table); len(got) != 0 {
					t.Errorf("after DEL %s: table %d still holds %q", c.ifname(), table, got)
				}
				if err := b.del(pod, c); err != nil {
					t.Errorf("second DEL %s: %v", c.ifname(), err)
				}
			}
			assertNoState(t, b.dataDir)
		})
	}
}

// TestCheckDetectsDrift breaks one piece of ADD's work behind the plugin's back and expects CHECK
// to name it.
func TestCheckDetectsDrift(t *testing.T) {
	table := int(railcni.DerivedTable("nz1"))
	for _, tc := range []struct {
		name    string
		breakIt func(t *testing.T, pod nstest.NS)
		wantErr string
	}{
		{
			name: "deleted rule",
			breakIt: func(t *testing.T, pod nstest.NS) {
				pod.MustIP(t, "rule", "del", "from", podARail1, "lookup", fmt.Sprint(table))
			},
			wantErr: "rule \"from " + podARail1 + "/32",
		},
		{
			name: "deleted route",
			breakIt: func(t *testing.T, pod nstest.NS) {
				pod.MustIP(t, "route", "del", railSubnet, "dev", "nz1", "table", fmt.Sprint(table))
			},
			wantErr: "route \"" + railSubnet + " dev nz1",
		},
		{
			name: "strict rp_filter",
			breakIt: func(t *testing.T, pod nstest.NS) {
				pod.MustIP(t, "netns", "exec", pod.Name, "sysctl", "-qw", "net.ipv4.conf.nz1.rp_filter=1")
			},
			wantErr: "net.ipv4.conf.nz1.rp_filter is 1, want 2",
		},
		{
			name: "changed MTU",
			breakIt: func(t *testing.T, pod nstest.NS) {
				pod.MustIP(t, "link", "set", "nz1", "mtu", "1300")
			},
			wantErr: "MTU of \"nz1\" is 1300",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBed(t)
			pod := nstest.New(t, "p")
			c := conf("1.0.0", 1, podARail1, true)
			c.extra = map[string]any{"mtu": 1400}
			b.mustAdd(pod, c)
			if err := b.check(pod, c); err != nil {
				t.Fatalf("CHECK before the change: %v", err)
			}
			tc.breakIt(t, pod)
			err := b.check(pod, c)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("CHECK after %s: error %v, want one containing %q", tc.name, err, tc.wantErr)
			}
			if err := b.del(pod, c); err != nil {
				t.Fatalf("DEL: %v", err)
			}
		})
	}
}

// TestDelOfPluginRestoresInterface removes only nezha-rail's part (as for host-device, whose
// interface outlives the attachment): the interface must get back its MTU and sysctls.
func TestDelOfPluginRestoresInterface(t *testing.T) {
	b := newBed(t)
	pod := nstest.New(t, "p")
	c := conf("1.0.0", 1, podARail1, true)
	c.extra = map[string]any{"mtu": 1400}

	// What the interface looks like before nezha-rail: macvlan alone.
	probe := nstest.New(t, "probe")
	b.mustAdd(probe, conf("1.0.0", 1, podARail1, false))
	before := map[string]string{}
	for _, k := range []string{"rp_filter", "arp_ignore", "arp_announce"} {
		before[k] = sysctlIn(t, probe, "nz1", k)
	}
	beforeMTU := mtuIn(t, probe, "nz1")

	b.mustAdd(pod, c)
	err := b.inNode(func(ctx context.Context) error {
		return b.cni.DelNetworkList(ctx, b.pluginOnly(c), rt(pod, "nz1"))
	})
	if err != nil {
		t.Fatalf("DEL of nezha-rail: %v", err)
	}
	for k, want := range before {
		if got := sysctlIn(t, pod, "nz1", k); got != want {
			t.Errorf("after DEL: nz1 %s = %s, want the original %s", k, got, want)
		}
	}
	if got := mtuIn(t, pod, "nz1"); got != beforeMTU {
		t.Errorf("after DEL: nz1 MTU %d, want the original %d", got, beforeMTU)
	}
	if got := tableOf(t, pod, podARail1); got != 0 {
		t.Errorf("after DEL: rule from %s still points at table %d", podARail1, got)
	}
	assertNoState(t, b.dataDir)
}

// TestDelIsIdempotent covers the DELs a runtime may send: after a failed ADD, with the namespace
// already gone, and without any cached result.
func TestDelIsIdempotent(t *testing.T) {
	t.Run("after failed ADD (table shared with another rail)", func(t *testing.T) {
		b := newBed(t)
		pod := nstest.New(t, "p")
		c0 := conf("1.0.0", 0, podARail0, true)
		c0.extra = map[string]any{"table": 1000}
		c1 := conf("1.0.0", 1, podARail1, true)
		c1.extra = map[string]any{"table": 1000}
		b.mustAdd(pod, c0)
		_, err := b.add(pod, c1)
		if err == nil || !strings.Contains(err.Error(), "\"table\"") {
			t.Fatalf("ADD of a second rail into table 1000: error %v, want one naming field \"table\"", err)
		}
		if err := b.del(pod, c1); err != nil {
			t.Fatalf("DEL after failed ADD: %v", err)
		}
		// The failed rail's DEL must not tear down the healthy rail that owns the table.
		if err := b.check(pod, c0); err != nil {
			t.Errorf("rail 0 broken by the DEL of the failed rail 1: %v", err)
		}
		if err := b.del(pod, c0); err != nil {
			t.Fatalf("DEL rail 0: %v", err)
		}
		if got := routesIn(t, pod, 1000); len(got) != 0 {
			t.Errorf("table 1000 still holds %q", got)
		}
	})
	t.Run("namespace gone", func(t *testing.T) {
		b := newBed(t)
		pod := nstest.New(t, "p")
		c := conf("1.0.0", 1, podARail1, true)
		b.mustAdd(pod, c)
		pod.Delete()
		if err := b.del(pod, c); err != nil {
			t.Fatalf("DEL with the namespace gone: %v", err)
		}
		if err := b.del(pod, c); err != nil {
			t.Fatalf("second DEL with the namespace gone: %v", err)
		}
		assertNoState(t, b.dataDir)
	})
	t.Run("never added", func(t *testing.T) {
		b := newBed(t)
		pod := nstest.New(t, "p")
		if err := b.del(pod, conf("1.0.0", 1, podARail1, true)); err != nil {
			t.Fatalf("DEL of an attachment never added: %v", err)
		}
	})
}

// TestAddRequiresPrevResult runs nezha-rail unchained.
func TestAddRequiresPrevResult(t *testing.T) {
	b := newBed(t)
	pod := nstest.New(t, "p")
	pod.MustIP(t, "link", "add", "nz0", "type", "veth", "peer", "name", "nz0x")
	l := b.listOf("1.0.0", "alone", []map[string]any{{"type": "nezha-rail", "dataDir": b.dataDir}})
	err := b.inNode(func(ctx context.Context) error {
		_, err := b.cni.AddNetworkList(ctx, l, rt(pod, "nz0"))
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "prevResult is missing") {
		t.Fatalf("unchained ADD: error %v, want prevResult is missing", err)
	}
}

// TestGCAndStatus uses CNI 1.1.0, which the Debian plugins predate, so the list holds
// nezha-rail alone.
func TestGCAndStatus(t *testing.T) {
	b := newBed(t)
	l := b.listOf("1.1.0", "rail1", []map[string]any{{"type": "nezha-rail", "dataDir": b.dataDir}})
	stateDir := filepath.Join(b.dataDir, "rail1")
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"live_nz1.json", "gone_nz1.json", "live_nz0.json"} {
		if err := os.WriteFile(filepath.Join(stateDir, f), []byte(`{}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	err := b.inNode(func(ctx context.Context) error {
		return b.cni.GCNetworkList(ctx, l, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{
			{ContainerID: "live", IfName: "nz1"}, {ContainerID: "live", IfName: "nz0"},
		}})
	})
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	entries, _ := os.ReadDir(stateDir)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := []string{"live_nz0.json", "live_nz1.json"}; !slices.Equal(left, want) {
		t.Errorf("after GC: state files %q, want %q", left, want)
	}

	if err := b.inNode(func(ctx context.Context) error { return b.cni.GetStatusNetworkList(ctx, l) }); err != nil {
		t.Errorf("STATUS with a writable data dir: %v", err)
	}
	blocker := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	bad := b.listOf("1.1.0", "rail1", []map[string]any{{"type": "nezha-rail", "dataDir": blocker}})
	err = b.inNode(func(ctx context.Context) error { return b.cni.GetStatusNetworkList(ctx, bad) })
	var cniErr *types.Error
	if !errors.As(err, &cniErr) || cniErr.Code != 50 {
		t.Errorf("STATUS with an unusable data dir: error %v, want CNI error code 50", err)
	}
}

func assertNoState(t *testing.T, dataDir string) {
	t.Helper()
	_ = filepath.WalkDir(dataDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			t.Errorf("state file left behind: %s", p)
		}
		return nil
	})
}

// TestGCRemovesStaleAttachment: with CNI 1.1.0, a GC that no longer lists an attachment makes
// libcni DEL it through the whole chain and nezha-rail drop its state.
func TestGCRemovesStaleAttachment(t *testing.T) {
	b := newBedWith(t, moduleRefDir)
	pod := nstest.New(t, "p")
	c := conf("1.1.0", 1, podARail1, true)
	b.mustAdd(pod, c)
	err := b.inNode(func(ctx context.Context) error {
		return b.cni.GCNetworkList(ctx, b.list(c), &libcni.GCArgs{ValidAttachments: nil})
	})
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	if got := tableOf(t, pod, podARail1); got != 0 {
		t.Errorf("after GC: rule from %s still points at table %d", podARail1, got)
	}
	if _, err := pod.IP("link", "show", "nz1"); err == nil {
		t.Errorf("after GC: nz1 still exists")
	}
	assertNoState(t, b.dataDir)
}

// TestDualStackRail gives a rail an IPv4 and an IPv6 address: each gets its own source rule into
// the rail's table, and the table routes both subnets through the rail.
func TestDualStackRail(t *testing.T) {
	b := newBed(t)
	pod := nstest.New(t, "p")
	// DAD stays on, as in a real pod: the IPv6 address is still tentative during ADD.
	c := conf("1.0.0", 1, podARail1, true)
	c.address6 = "fd00:100::11/64"
	b.mustAdd(pod, c)
	table := int(railcni.DerivedTable("nz1"))
	if got := tableOf6(t, pod, "fd00:100::11"); got != table {
		t.Errorf("IPv6 rule from fd00:100::11: table %d, want %d", got, table)
	}
	if got := tableOf(t, pod, podARail1); got != table {
		t.Errorf("IPv4 rule from %s: table %d, want %d", podARail1, got, table)
	}
	got := routesIn(t, pod, table)
	for _, want := range []string{railSubnet + " dev nz1", "fd00:100::/64 dev nz1"} {
		if !slices.Contains(got, want) {
			t.Errorf("table %d routes %q lack %q", table, got, want)
		}
	}
	if err := b.check(pod, c); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	pod.MustIP(t, "-6", "rule", "del", "from", "fd00:100::11", "lookup", fmt.Sprint(table))
	if err := b.check(pod, c); err == nil || !strings.Contains(err.Error(), "fd00:100::11/128") {
		t.Errorf("CHECK after deleting the IPv6 rule: %v", err)
	}
	if err := b.del(pod, c); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if got := tableOf(t, pod, podARail1); got != 0 {
		t.Errorf("after DEL: IPv4 rule still points at table %d", got)
	}
	assertNoState(t, b.dataDir)
}

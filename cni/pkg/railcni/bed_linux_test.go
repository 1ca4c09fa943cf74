package railcni_test

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/nezha-project/nezha/internal/prereq"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"

	"github.com/nezha-project/nezha/cni/internal/nstest"
	"github.com/nezha-project/nezha/cni/pkg/railcni"
)

// The test bed: a "node" namespace holding two rails, each a veth pair whose first end is the
// master of the pods' macvlan interfaces (rail K's master is rK). Both rails use ONE subnet,
// 10.100.0.0/24, the case where routing by destination alone cannot pick the right rail. Pods are
// namespaces of their own. libcni runs from inside the node namespace, so the real macvlan and
// static plugins from Debian (/usr/lib/cni) find their masters there and nothing is added to the
// root namespace.

const (
	debianCNIDir = "/usr/lib/cni"
	railSubnet   = "10.100.0.0/24"
)

// pluginBinDir holds the nezha-rail binary built by TestMain (empty when not root), and
// moduleRefDir the macvlan and static reference plugins built from the pinned
// containernetworking/plugins module: Debian's 1.1.1 predate CNI 1.1.0 (GC, STATUS).
var pluginBinDir, moduleRefDir string

func TestMain(m *testing.M) {
	code := func() int {
		if os.Geteuid() == 0 {
			nstest.SweepStale()
			dir, err := os.MkdirTemp("", "nzc-cni-bin-")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer os.RemoveAll(dir)
			// Build the real binary: libcni execs it exactly as a container runtime would.
			out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "nezha-rail"),
				"github.com/nezha-project/nezha/cni/cmd/nezha-rail").CombinedOutput()
			if err != nil {
				fmt.Fprintf(os.Stderr, "build nezha-rail: %v\n%s", err, out)
				return 1
			}
			ref := filepath.Join(dir, "ref")
			out, err = exec.Command("go", "build", "-o", ref+"/",
				"github.com/containernetworking/plugins/plugins/main/macvlan",
				"github.com/containernetworking/plugins/plugins/ipam/static").CombinedOutput()
			if err != nil {
				fmt.Fprintf(os.Stderr, "build reference plugins: %v\n%s", err, out)
				return 1
			}
			pluginBinDir, moduleRefDir = dir, ref
		}
		return m.Run()
	}()
	os.Exit(code)
}

type bed struct {
	t       *testing.T
	node    nstest.NS
	cni     *libcni.CNIConfig
	dataDir string
}

// newBed uses Debian's reference plugins.
func newBed(t *testing.T) *bed { return newBedWith(t, debianCNIDir) }

// newBedWith uses the macvlan and static plugins in refDir.
func newBedWith(t *testing.T, refDir string) *bed {
	t.Helper()
	nstest.RequireRoot(t)
	for _, p := range []string{"macvlan", "static"} {
		if _, err := os.Stat(filepath.Join(refDir, p)); err != nil {
			prereq.Missing(t, "needs the reference CNI plugins in %s (Debian containernetworking-plugins): %v", refDir, err)
		}
	}
	b := &bed{t: t, node: nstest.New(t, "node"), dataDir: t.TempDir()}
	// The plugin (run by libcni with this environment) keeps state only under allowed roots.
	t.Setenv(railcni.EnvDataRoots, os.TempDir())
	for _, rail := range []string{"r0", "r1"} {
		b.node.MustIP(t, "link", "add", rail, "type", "veth", "peer", "name", rail+"x")
		b.node.MustIP(t, "link", "set", rail, "up")
		b.node.MustIP(t, "link", "set", rail+"x", "up")
	}
	b.cni = libcni.NewCNIConfigWithCacheDir([]string{pluginBinDir, refDir}, t.TempDir(), nil)
	return b
}

// railConf describes one rail attachment of one pod.
type railConf struct {
	version    string
	rail       int    // 0 or 1: master rK, network "rail<K>", interface nz<K>
	address    string // CIDR
	address6   string // optional second (IPv6) CIDR for dual-stack
	gateway    string // optional
	withPlugin bool   // chain nezha-rail after macvlan
	extra      map[string]any
}

func (c railConf) ifname() string { return fmt.Sprintf("nz%d", c.rail) }

func (b *bed) list(c railConf) *libcni.NetworkConfigList {
	b.t.Helper()
	addr := map[string]any{"address": c.address}
	if c.gateway != "" {
		addr["gateway"] = c.gateway
	}
	addrs := []any{addr}
	if c.address6 != "" {
		addrs = append(addrs, map[string]any{"address": c.address6})
	}
	plugins := []map[string]any{{
		"type": "macvlan", "master": fmt.Sprintf("r%d", c.rail), "mode": "bridge",
		"ipam": map[string]any{"type": "static", "addresses": addrs},
	}}
	if c.withPlugin {
		p := map[string]any{"type": "nezha-rail", "dataDir": b.dataDir}
		for k, v := range c.extra {
			p[k] = v
		}
		plugins = append(plugins, p)
	}
	return b.listOf(c.version, fmt.Sprintf("rail%d", c.rail), plugins)
}

func (b *bed) listOf(version, name string, plugins []map[string]any) *libcni.NetworkConfigList {
	b.t.Helper()
	raw, err := json.Marshal(map[string]any{"cniVersion": version, "name": name, "plugins": plugins})
	if err != nil {
		b.t.Fatal(err)
	}
	l, err := libcni.ConfListFromBytes(raw)
	if err != nil {
		b.t.Fatalf("conflist %s: %v", raw, err)
	}
	return l
}

func rt(pod nstest.NS, ifname string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: pod.Name, NetNS: pod.Path, IfName: ifname}
}

// inNode runs a libcni call from the node namespace (plugins inherit it from the locked thread).
func (b *bed) inNode(f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return b.node.Do(func() error { return f(ctx) })
}

func (b *bed) add(pod nstest.NS, c railConf) (types.Result, error) {
	var res types.Result
	err := b.inNode(func(ctx context.Context) (err error) {
		res, err = b.cni.AddNetworkList(ctx, b.list(c), rt(pod, c.ifname()))
		return err
	})
	return res, err
}

func (b *bed) mustAdd(pod nstest.NS, c railConf) types.Result {
	b.t.Helper()
	res, err := b.add(pod, c)
	if err != nil {
		b.t.Fatalf("ADD %s %s: %v", pod.Name, c.ifname(), err)
	}
	return res
}

func (b *bed) check(pod nstest.NS, c railConf) error {
	return b.inNode(func(ctx context.Context) error {
		return b.cni.CheckNetworkList(ctx, b.list(c), rt(pod, c.ifname()))
	})
}

func (b *bed) del(pod nstest.NS, c railConf) error {
	return b.inNode(func(ctx context.Context) error {
		return b.cni.DelNetworkList(ctx, b.list(c), rt(pod, c.ifname()))
	})
}

// pluginOnly is the nezha-rail part of c's conflist alone, under the same network name, so libcni
// hands it the cached result of the full ADD as prevResult.
func (b *bed) pluginOnly(c railConf) *libcni.NetworkConfigList {
	full := b.list(c)
	full.Plugins = full.Plugins[len(full.Plugins)-1:]
	return full
}

// tableOf finds the routing table the rule for src points at in pod (0 when there is none).
func tableOf(t *testing.T, pod nstest.NS, src string) int {
	t.Helper()
	table := 0
	pod.MustDo(t, func() error {
		rules, err := netlinksafe.RuleList(netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, r := range rules {
			if r.Src != nil && r.Src.IP.String() == src {
				table = r.Table
			}
		}
		return nil
	})
	return table
}

// tableOf6 is tableOf for IPv6 rules.
func tableOf6(t *testing.T, pod nstest.NS, src string) int {
	t.Helper()
	table := 0
	pod.MustDo(t, func() error {
		rules, err := netlinksafe.RuleList(netlink.FAMILY_V6)
		if err != nil {
			return err
		}
		for _, r := range rules {
			if r.Src != nil && r.Src.IP.Equal(net.ParseIP(src)) {
				table = r.Table
			}
		}
		return nil
	})
	return table
}

// routesIn lists the routes of table in pod as "dst dev gw" strings.
func routesIn(t *testing.T, pod nstest.NS, table int) []string {
	t.Helper()
	var out []string
	pod.MustDo(t, func() error {
		routes, err := netlinksafe.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return err
		}
		for _, r := range routes {
			name := "?"
			if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil {
				name = l.Attrs().Name
			}
			dst := "default"
			if r.Dst != nil && r.Dst.String() != "0.0.0.0/0" && r.Dst.String() != "::/0" {
				dst = r.Dst.String()
			}
			s := dst + " dev " + name
			if r.Gw != nil {
				s += " via " + r.Gw.String()
			}
			out = append(out, s)
		}
		return nil
	})
	return out
}

func sysctlIn(t *testing.T, pod nstest.NS, ifname, key string) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", pod.Name, "cat", "/proc/sys/net/ipv4/conf/"+ifname+"/"+key).CombinedOutput()
	if err != nil {
		t.Fatalf("read %s %s: %v: %s", ifname, key, err, out)
	}
	return string(out[:len(out)-1])
}

func mtuIn(t *testing.T, pod nstest.NS, ifname string) int {
	t.Helper()
	mtu := 0
	pod.MustDo(t, func() error {
		l, err := netlinksafe.LinkByName(ifname)
		if err != nil {
			return err
		}
		mtu = l.Attrs().MTU
		return nil
	})
	return mtu
}

// txBytes returns the transmitted byte counters of the pod's rail interfaces.
func txBytes(t *testing.T, pod nstest.NS, ifnames ...string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	pod.MustDo(t, func() error {
		for _, n := range ifnames {
			l, err := netlinksafe.LinkByName(n)
			if err != nil {
				return err
			}
			out[n] = l.Attrs().Statistics.TxBytes
		}
		return nil
	})
	return out
}

// sendTCP connects from src in pod `from` to dst in pod `to` and sends n bytes. It returns how
// many bytes each of the sender's rail interfaces transmitted meanwhile.
func sendTCP(t *testing.T, from nstest.NS, src string, to nstest.NS, dst string, n int) map[string]uint64 {
	t.Helper()
	var ln net.Listener
	to.MustDo(t, func() (err error) {
		// The socket belongs to the namespace it was created in, whichever thread serves it later.
		ln, err = net.Listen("tcp", net.JoinHostPort(dst, "0"))
		return err
	})
	defer ln.Close()
	received := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			received <- -1
			return
		}
		defer c.Close()
		got, _ := io.Copy(io.Discard, c)
		received <- got
	}()

	before := txBytes(t, from, "nz0", "nz1")
	var conn net.Conn
	from.MustDo(t, func() (err error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
		conn, err = d.Dial("tcp", ln.Addr().String())
		return err
	})
	if _, err := conn.Write(make([]byte, n)); err != nil {
		t.Fatalf("send %d bytes %s -> %s: %v", n, src, dst, err)
	}
	_ = conn.Close()
	select {
	case got := <-received:
		if got != int64(n) {
			t.Fatalf("receiver got %d bytes, want %d", got, n)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("receiver did not finish")
	}
	after := txBytes(t, from, "nz0", "nz1")
	return map[string]uint64{"nz0": after["nz0"] - before["nz0"], "nz1": after["nz1"] - before["nz1"]}
}

// routeDev asks the kernel which interface carries traffic from src to dst in pod (`ip route get
// <dst> from <src>`).
func routeDev(t *testing.T, pod nstest.NS, src, dst string) string {
	t.Helper()
	dev := ""
	pod.MustDo(t, func() error {
		routes, err := netlink.RouteGetWithOptions(net.ParseIP(dst), &netlink.RouteGetOptions{SrcAddr: net.ParseIP(src)})
		if err != nil {
			return err
		}
		l, err := netlink.LinkByIndex(routes[0].LinkIndex)
		if err != nil {
			return err
		}
		dev = l.Attrs().Name
		return nil
	})
	return dev
}

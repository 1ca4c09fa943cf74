package railcni_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/nezha-project/nezha/cni/internal/nstest"
	"github.com/nezha-project/nezha/cni/pkg/railcni"
	"github.com/nezha-project/nezha/internal/prereq"
)

// A bridged rail on a host that drops forwarding, the way Docker leaves a host: the node
// namespace holds a Linux bridge fb0 the pods' rail veths plug into (Debian's bridge plugin),
// br_netfilter sends bridged frames through iptables, and the FORWARD policy is DROP. Without
// "forwardAccept" the pods cannot reach each other over the rail; with it they can, and DEL and
// GC take the rules away again. The node's allow-list (forward_allowlist.go) holds fwdSubnet on
// fb0 only.

const (
	fwdPodA   = "10.101.0.2"
	fwdPodB   = "10.101.0.3"
	fwdSubnet = "10.101.0.0/24"
)

func fwdConf(b *bed, version, address string, forwardAccept bool) *libcni.NetworkConfigList {
	plugins := []map[string]any{{
		"type": "bridge", "bridge": "fb0", "isGateway": false, "ipMasq": false,
		"ipam": map[string]any{"type": "static", "addresses": []any{map[string]any{"address": address + "/24"}}},
	}}
	if forwardAccept {
		plugins = append(plugins, map[string]any{"type": "nezha-rail", "dataDir": b.dataDir, "forwardAccept": true})
	}
	return b.listOf(version, "frail", plugins)
}

// newDropBed is a bed whose node namespace forwards bridged traffic through iptables with a
// FORWARD policy of DROP.
func newDropBed(t *testing.T) *bed {
	t.Helper()
	b := newBed(t)
	if _, err := os.Stat(filepath.Join(debianCNIDir, "bridge")); err != nil {
		prereq.Missing(t, "needs Debian's bridge CNI plugin: %v", err)
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		prereq.Missing(t, "needs iptables: %v", err)
	}
	if _, err := os.Stat("/proc/sys/net/bridge"); err != nil {
		// br_netfilter is what makes bridged frames pass FORWARD (Docker loads it).
		if out, err := exec.Command("modprobe", "br_netfilter").CombinedOutput(); err != nil {
			prereq.Missing(t, "needs the br_netfilter module: %v: %s", err, out)
		}
	}
	b.node.MustIP(t, "link", "add", "fb0", "type", "bridge", "stp_state", "0", "forward_delay", "0")
	b.node.MustIP(t, "link", "set", "fb0", "up")
	inNodeNS(t, b, "sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=1")
	inNodeNS(t, b, "iptables", "-P", "FORWARD", "DROP")
	allow := filepath.Join(t.TempDir(), "rail-forward-allowlist.json")
	if err := os.WriteFile(allow, []byte(`{"rails": [{"interface": "fb0", "cidrs": ["`+fwdSubnet+`"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(railcni.EnvForwardAllowList, allow)
	return b
}

func inNodeNS(t *testing.T, b *bed, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", b.node.Name}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("in %s: %v: %v: %s", b.node.Name, args, err, out)
	}
	return string(out)
}

// reach reports whether a TCP connection from pod `from` to dst in pod `to` completes. The
// refused case is a dropped SYN, so it waits out the dial timeout.
func reach(t *testing.T, from nstest.NS, to nstest.NS, dst string) bool {
	t.Helper()
	var ln net.Listener
	to.MustDo(t, func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(dst, "0"))
		return err
	})
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	ok := false
	from.MustDo(t, func() error {
		d := net.Dialer{Timeout: 3 * time.Second}
		c, err := d.Dial("tcp", ln.Addr().String())
		if err == nil {
			ok = true
			c.Close()
		}
		return nil
	})
	return ok
}

func forwardRules(t *testing.T, b *bed) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", b.node.Name, "iptables", "-S", railcni.ForwardChain).CombinedOutput()
	if err != nil {
		return nil // no chain
	}
	var rules []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(l, "-A ") {
			rules = append(rules, l)
		}
	}
	return rules
}

func addList(t *testing.T, b *bed, pod nstest.NS, l *libcni.NetworkConfigList) {
	t.Helper()
	err := b.inNode(func(ctx context.Context) error {
		_, err := b.cni.AddNetworkList(ctx, l, rt(pod, "eth1"))
		return err
	})
	if err != nil {
		t.Fatalf("ADD %s: %v", pod.Name, err)
	}
}

func delList(t *testing.T, b *bed, pod nstest.NS, l *libcni.NetworkConfigList) {
	t.Helper()
	err := b.inNode(func(ctx context.Context) error { return b.cni.DelNetworkList(ctx, l, rt(pod, "eth1")) })
	if err != nil {
		t.Fatalf("DEL %s: %v", pod.Name, err)
	}
}

func TestForwardDropBlocksBridgedRailWithoutForwardAccept(t *testing.T) {
	b := newDropBed(t)
	a, p := nstest.New(t, "a"), nstest.New(t, "b")
	addList(t, b, a, fwdConf(b, "1.0.0", fwdPodA, false))
	addList(t, b, p, fwdConf(b, "1.0.0", fwdPodB, false))
	if reach(t, a, p, fwdPodB) {
		t.Fatalf("%s reached %s across a bridge whose host drops FORWARD: the bed does not reproduce the Docker host", fwdPodA, fwdPodB)
	}
	// The same bed with the policy back to ACCEPT works: the DROP policy was the only obstacle.
	inNodeNS(t, b, "iptables", "-P", "FORWARD", "ACCEPT")
	if !reach(t, a, p, fwdPodB) {
		t.Fatalf("%s cannot reach %s even with FORWARD ACCEPT", fwdPodA, fwdPodB)
	}
}

func TestForwardAcceptOpensBridgedRailAndCleansUp(t *testing.T) {
	b := newDropBed(t)
	a, p := nstest.New(t, "a"), nstest.New(t, "b")
	la, lb := fwdConf(b, "1.0.0", fwdPodA, true), fwdConf(b, "1.0.0", fwdPodB, true)
	addList(t, b, a, la)
	addList(t, b, p, lb)
	if got := len(forwardRules(t, b)); got != 4 {
		t.Fatalf("after two ADDs: %d rules in %s, want 4 (-s and -d per pod): %q", got, railcni.ForwardChain, forwardRules(t, b))
	}
	for _, r := range forwardRules(t, b) {
		if !strings.Contains(r, " -i fb0 ") && !strings.Contains(r, " -o fb0 ") {
			t.Errorf("rule %q is not bound to the allow-list's interface fb0", r)
		}
	}
	if !strings.Contains(inNodeNS(t, b, "iptables", "-S", "FORWARD"), "-j "+railcni.ForwardChain) {
		t.Fatalf("FORWARD has no jump to %s", railcni.ForwardChain)
	}
	if inNodeNS(t, b, "iptables", "-S", "FORWARD")[:len("-P FORWARD DROP")] != "-P FORWARD DROP" {
		t.Fatalf("the plugin changed the FORWARD policy")
	}
	if !reach(t, a, p, fwdPodB) || !reach(t, p, a, fwdPodA) {
		t.Fatalf("with forwardAccept the pods still cannot reach each other over the bridged rail")
	}
	// CHECK through nezha-rail alone (same network, so libcni passes the cached ADD result):
	// Debian's bridge plugin 1.1.1 fails its own CHECK on a bridge whose MAC followed a port.
	ca := b.listOf("1.0.0", "frail", []map[string]any{{"type": "nezha-rail", "dataDir": b.dataDir, "forwardAccept": true}})
	if err := b.inNode(func(ctx context.Context) error { return b.cni.CheckNetworkList(ctx, ca, rt(a, "eth1")) }); err != nil {
		t.Errorf("CHECK after ADD: %v", err)
	}
	// CHECK notices a rule removed behind the plugin's back.
	inNodeNS(t, b, "iptables", "-D", railcni.ForwardChain, "-s", fwdPodA+"/32", "-i", "fb0", "-m", "comment",
		"--comment", "nezha-rail:frail:"+a.Name+":eth1", "-j", "ACCEPT")
	err := b.inNode(func(ctx context.Context) error { return b.cni.CheckNetworkList(ctx, ca, rt(a, "eth1")) })
	if err == nil || !strings.Contains(err.Error(), "forwardAccept") {
		t.Errorf("CHECK with a rule missing: error %v, want one naming forwardAccept", err)
	}

	delList(t, b, a, la)
	left := forwardRules(t, b)
	if len(left) != 2 || strings.Contains(strings.Join(left, "\n"), fwdPodA) {
		t.Fatalf("after DEL of %s: rules %q, want only %s's two", a.Name, left, fwdPodB)
	}
	delList(t, b, a, la) // DEL twice is fine

	// GC (CNI 1.1.0; the Debian bridge plugin predates it, so the list is nezha-rail alone)
	// with no valid attachments removes b's rules too. A runtime with an empty cache (it lost
	// the attachment, so libcni cannot DEL it) leaves the plugin's own GC to find them.
	gcList := b.listOf("1.1.0", "frail", []map[string]any{{"type": "nezha-rail", "dataDir": b.dataDir, "forwardAccept": true}})
	fresh := libcni.NewCNIConfigWithCacheDir([]string{pluginBinDir, debianCNIDir}, t.TempDir(), nil)
	err = b.inNode(func(ctx context.Context) error {
		return fresh.GCNetworkList(ctx, gcList, &libcni.GCArgs{ValidAttachments: nil})
	})
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	if left := forwardRules(t, b); len(left) != 0 {
		t.Fatalf("after GC: rules %q left", left)
	}
}

// A NAD author cannot open the host's FORWARD chain for an address the node's allow-list does
// not hold: the ADD fails naming it and the chain gets nothing; without the file at all it fails
// naming the file.
func TestForwardAcceptRefusesAnAddressOutsideTheNodeAllowList(t *testing.T) {
	b := newDropBed(t)
	a := nstest.New(t, "a")
	err := b.inNode(func(ctx context.Context) error {
		_, err := b.cni.AddNetworkList(ctx, fwdConf(b, "1.0.0", "10.102.0.2", true), rt(a, "eth1"))
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "10.102.0.2 is in no CIDR of the node's allow-list") {
		t.Fatalf("ADD of an address outside the allow-list: %v", err)
	}
	if rules := forwardRules(t, b); len(rules) != 0 {
		t.Fatalf("the refused ADD left rules %q", rules)
	}
	if strings.Contains(inNodeNS(t, b, "iptables", "-S", "FORWARD"), railcni.ForwardChain) {
		t.Fatalf("the refused ADD touched FORWARD")
	}
	missing := filepath.Join(t.TempDir(), "none.json")
	t.Setenv(railcni.EnvForwardAllowList, missing)
	p := nstest.New(t, "b")
	err = b.inNode(func(ctx context.Context) error {
		_, err := b.cni.AddNetworkList(ctx, fwdConf(b, "1.0.0", fwdPodB, true), rt(p, "eth1"))
		return err
	})
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("ADD without the node's allow-list: %v, want an error naming %s", err, missing)
	}
}

// Several pods' first ADDs at once (a node starting a job's ranks) insert the FORWARD jump
// exactly once: its look-up and insert run under one host-wide lock.
func TestParallelFirstAddsInsertOneForwardJump(t *testing.T) {
	b := newDropBed(t)
	const pods = 8
	errs := make(chan error, pods)
	for i := 0; i < pods; i++ {
		pod := nstest.New(t, fmt.Sprintf("p%d", i))
		conf := fwdConf(b, "1.0.0", fmt.Sprintf("10.101.0.%d", 10+i), true)
		go func() {
			errs <- b.inNode(func(ctx context.Context) error {
				_, err := b.cni.AddNetworkList(ctx, conf, rt(pod, "eth1"))
				return err
			})
		}()
	}
	for i := 0; i < pods; i++ {
		if err := <-errs; err != nil {
			t.Errorf("parallel ADD: %v", err)
		}
	}
	jumps := 0
	for _, l := range strings.Split(inNodeNS(t, b, "iptables", "-S", "FORWARD"), "\n") {
		if strings.HasSuffix(l, "-j "+railcni.ForwardChain) {
			jumps++
		}
	}
	if jumps != 1 {
		t.Fatalf("%d parallel first ADDs left %d jumps to %s in FORWARD, want 1:\n%s", pods, jumps, railcni.ForwardChain,
			inNodeNS(t, b, "iptables", "-S", "FORWARD"))
	}
	if got := len(forwardRules(t, b)); got != 2*pods {
		t.Fatalf("%d rules in %s, want %d", got, railcni.ForwardChain, 2*pods)
	}
}

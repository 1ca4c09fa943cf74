// Package nstest creates throw-away network namespaces for the cni/ tests. Every namespace is
// named nzc-<pid>-<role>, so runs never collide with other users of this machine, and is removed
// by t.Cleanup; SweepStale removes the ones a killed test run left behind.
package nstest

import (
	"fmt"
	"github.com/nezha-project/nezha/internal/prereq"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
)

// Prefix starts the name of every namespace (and host-visible link) these tests create.
const Prefix = "nzc"

const netnsDir = "/run/netns"

var counter atomic.Int64

// RequireRoot skips the test unless it runs as root: network namespaces need CAP_SYS_ADMIN and
// CAP_NET_ADMIN.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		prereq.Missing(t, "needs root: creates network namespaces (run the cni tests with sudo)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		prereq.Missing(t, "needs iproute2's ip command")
	}
}

// NS is a named network namespace.
type NS struct {
	Name string // as in `ip netns`
	Path string // /run/netns/<Name>
}

// New creates a namespace named nzc-<pid>-<role><n> with loopback up and removes it when the
// test ends.
func New(t testing.TB, role string) NS {
	t.Helper()
	name := fmt.Sprintf("%s-%d-%s%d", Prefix, os.Getpid(), role, counter.Add(1))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	n := NS{Name: name, Path: filepath.Join(netnsDir, name)}
	t.Cleanup(func() { n.Delete() })
	n.MustIP(t, "link", "set", "lo", "up")
	return n
}

// Delete removes the namespace; removing an absent one is not an error.
func (n NS) Delete() {
	if _, err := os.Stat(n.Path); err == nil {
		_ = exec.Command("ip", "netns", "del", n.Name).Run()
	}
}

// IP runs `ip -n <ns> args...`.
func (n NS) IP(args ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"-n", n.Name}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ip -n %s %s: %w: %s", n.Name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// MustIP is IP that fails the test on error.
func (n NS) MustIP(t testing.TB, args ...string) string {
	t.Helper()
	out, err := n.IP(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Do runs f with the calling goroutine's thread inside the namespace.
func (n NS) Do(f func() error) error {
	return ns.WithNetNSPath(n.Path, func(ns.NetNS) error { return f() })
}

// MustDo is Do that fails the test on error.
func (n NS) MustDo(t testing.TB, f func() error) {
	t.Helper()
	if err := n.Do(f); err != nil {
		t.Fatal(err)
	}
}

// SweepStale deletes nzc-<pid>-* namespaces whose creating process is gone (a test run killed
// before its cleanups ran). Namespaces of live processes are left alone.
func SweepStale() {
	entries, err := os.ReadDir(netnsDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		parts := strings.SplitN(e.Name(), "-", 3)
		if len(parts) != 3 || parts[0] != Prefix {
			continue
		}
		pid, err := strconv.Atoi(parts[1])
		if err != nil || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		_ = exec.Command("ip", "netns", "del", e.Name()).Run()
	}
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}

package main_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/nezha-project/nezha/internal/listenertest"
	"github.com/nezha-project/nezha/internal/prereq"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nezha-project/nezha/cni/internal/kubetest"
	"github.com/nezha-project/nezha/cni/internal/nstest"
	"github.com/nezha-project/nezha/cni/pkg/agent"
	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// agentBin is the agent binary built once by TestMain.
var agentBin string

func TestMain(m *testing.M) {
	code := func() int {
		dir, err := os.MkdirTemp("", "nzc-agent-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		agentBin = filepath.Join(dir, "nezha-rail-agent")
		if out, err := exec.Command("go", "build", "-o", agentBin, "github.com/nezha-project/nezha/cni/cmd/nezha-rail-agent").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build nezha-rail-agent: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// TestBinary runs the real agent binary with the DaemonSet's flags against envtest, watching a
// test namespace: the RailNode appears, /metrics and /healthz answer, SIGTERM stops it cleanly.
func TestBinary(t *testing.T) {
	nstest.RequireRoot(t)
	nstest.SweepStale()
	kube, err := kubetest.Start()
	if err != nil {
		prereq.Missing(t, "needs envtest: %v", err)
	}
	defer func() { _ = kube.Stop() }()
	s, _ := agent.Scheme()
	c, err := client.New(kube.Config, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	bin := agentBin
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kube.KubeConfig(), 0o600); err != nil {
		t.Fatal(err)
	}

	h := nstest.New(t, "bin")
	h.MustIP(t, "link", "add", "nzb0", "type", "veth", "peer", "name", "nzb0p")
	h.MustIP(t, "link", "set", "nzb0", "up")
	h.MustIP(t, "link", "set", "nzb0p", "up")
	rc := &nezhav1.RailClass{
		ObjectMeta: metav1.ObjectMeta{Name: "bin-rail"},
		Spec: nezhav1.RailClassSpec{
			Network:       nezhav1.RailNetwork{Config: `{"type":"macvlan"}`},
			HostInterface: nezhav1.HostInterfaceSelector{Name: "nzb0"},
		},
	}
	if err := c.Create(context.Background(), rc); err != nil {
		t.Fatal(err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := ln.Addr().String()
	_ = ln.Close()

	var logs strings.Builder
	cmd := exec.Command(bin, "--kubeconfig="+kubeconfig, "--node-name=bin-node", "--netns="+h.Path,
		"--metrics-bind-address="+metricsAddr, "--coalesce-window=100ms", "--sys-class-net="+dir)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	}()

	deadline := time.Now().Add(15 * time.Second)
	rn := &nezhav1.RailNode{}
	for {
		err := c.Get(context.Background(), client.ObjectKey{Name: "bin-node"}, rn)
		if err == nil && rn.Status.HealthyRailCount == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no healthy RailNode from the binary (last error %v); logs:\n%s", err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Stray, garbage and idle connections stay open while the real scrape below is answered.
	listenertest.Abuse(t, metricsAddr, 5)
	body := get(t, "http://"+metricsAddr+"/metrics")
	for _, want := range []string{
		`nezha_agent_rail_link_up{interface="nzb0",rail="bin-rail"} 1`,
		`nezha_agent_rail_speed_bits_per_second{interface="nzb0",rail="bin-rail"} 1e+10`,
		`nezha_agent_publishes_total{result="success"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if got := get(t, "http://"+metricsAddr+"/healthz"); got != "ok" {
		t.Errorf("/healthz = %q", got)
	}

	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v; logs:\n%s", err, logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("agent ignored SIGTERM")
	}
}

func TestBadEnvironmentIsNamed(t *testing.T) {
	dir := t.TempDir()
	bin := agentBin
	cmd := exec.Command(bin, "--node-name=n")
	cmd.Env = append(os.Environ(), agent.EnvCoalesceWindow+"=soon")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), agent.EnvCoalesceWindow) {
		t.Errorf("malformed %s: err %v, output %s", agent.EnvCoalesceWindow, err, out)
	}
	out, err = exec.Command(bin, "install-cni", "--from="+filepath.Join(dir, "missing"), "--to="+dir).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--from") {
		t.Errorf("install-cni with a missing source: err %v, output %s", err, out)
	}
}

// TestInstallCNICommandLine: --help is a success (exit 0, usage naming the flags); a bad flag
// or a stray argument is a usage error (exit 2).
func TestInstallCNICommandLine(t *testing.T) {
	out, err := exec.Command(agentBin, "install-cni", "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "-from") || !strings.Contains(string(out), "-to") {
		t.Errorf("install-cni --help: err %v, output %s", err, out)
	}
	for _, args := range [][]string{{"--bogus"}, {"--to=/tmp", "extra"}} {
		out, err := exec.Command(agentBin, append([]string{"install-cni"}, args...)...).CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("install-cni %v: err %v (want exit 2), output %s", args, err, out)
		}
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return string(b)
}

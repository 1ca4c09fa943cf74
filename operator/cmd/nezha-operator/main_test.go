package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/nezha-project/nezha/internal/listenertest"
	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/testenv"
	tu "github.com/nezha-project/nezha/operator/internal/testutil"
)

// TestOperatorBinaryWithGeneratedRBAC builds and runs the real nezha-operator binary against a
// real API server, authenticated as a user that holds only the generated ClusterRole
// (config/rbac/role.yaml): a missing RBAC marker shows up here as a job that never gets its pods.
func TestOperatorBinaryWithGeneratedRBAC(t *testing.T) {
	env, err := testenv.New(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	ctx := context.Background()
	admin, err := client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}

	// The operator's identity: bound to the generated role and nothing else.
	raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(raw, role); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, admin, role)
	mustCreate(t, admin, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "nezha-operator"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "nezha-operator"}},
	})
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "leases") {
			t.Errorf("the ClusterRole grants leases cluster-wide: %+v", r)
		}
	}
	// Leader election runs on the namespaced Role of config/rbac, bound in its namespace.
	raw, err = os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "leader_election_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	leRole := &rbacv1.Role{}
	if err := yaml.Unmarshal(raw, leRole); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, admin, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leRole.Namespace}})
	mustCreate(t, admin, leRole)
	mustCreate(t, admin, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: leRole.Name, Namespace: leRole.Namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: leRole.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "nezha-operator"}},
	})
	user, err := env.AddUser(envtest.User{Name: "nezha-operator"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// RBAC is enforced for this identity (else this test would prove nothing): no Secret listing.
	userClient, err := client.New(user.Config(), client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	if err := userClient.List(ctx, &corev1.SecretList{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the operator identity may list Secrets (err %v): least privilege broken or RBAC off", err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kcPath := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kcPath, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}

	bin := buildOperator(t)
	metricsAddr, probeAddr := freeAddr(t), freeAddr(t)
	configPath := writeConfig(t, fmt.Sprintf(`apiVersion: config.nezha.io/v1alpha1
kind: Configuration
namespace: %[1]s
health: {healthProbeBindAddress: "%[2]s"}
metrics: {bindAddress: "%[3]s"}
webhook: {port: 0} # the webhook itself is tested in the controller suite (envtest certs)
leaderElection: {leaderElect: true, resourceNamespace: %[1]s}
runtime: {image: "nezha/runtime:smoke"}
`, leRole.Namespace, probeAddr, metricsAddr))
	// The operator's output is copied in by exec's goroutine while the test reads it.
	var logs syncBuffer
	cmd := exec.Command(bin, "--config="+configPath, "--zap-log-level=info")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kcPath)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
		if t.Failed() {
			t.Logf("operator logs:\n%s", logs.String())
		}
	}()

	waitFor(t, "readyz", func() error { return httpOK("http://" + probeAddr + "/readyz") })
	// Stray, garbage and idle connections to both listeners do not stop them answering.
	listenertest.Abuse(t, probeAddr, 5)
	listenertest.Abuse(t, metricsAddr, 5)
	if err := httpOK("http://" + probeAddr + "/readyz"); err != nil {
		t.Fatalf("/readyz with stray connections open: %v", err)
	}
	if err := httpOK("http://" + metricsAddr + "/metrics"); err != nil {
		t.Fatalf("/metrics with stray connections open: %v", err)
	}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "smoke"}}
	mustCreate(t, admin, ns)
	mustCreate(t, admin, tu.MakeRailClass("smoke-r0").Obj())
	mustCreate(t, admin, tu.MakeJob("smoke", "smoke", "smoke-r0").Replicas(2).InjectRuntime().Obj())
	waitFor(t, "worker pods", func() error {
		var pods corev1.PodList
		if err := admin.List(ctx, &pods, client.InNamespace("smoke")); err != nil {
			return err
		}
		if len(pods.Items) != 2 {
			return fmt.Errorf("%d pods", len(pods.Items))
		}
		if img := pods.Items[0].Spec.InitContainers[0].Image; img != "nezha/runtime:smoke" {
			return fmt.Errorf("init image %q", img)
		}
		return nil
	})
	lease := &coordinationv1.Lease{}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: leRole.Namespace, Name: "nezha-operator.nezha.io"}, lease); err != nil {
		t.Errorf("leader-election lease: %v", err)
	}
	waitFor(t, "status written", func() error {
		job := &nezhav1.MultiRailJob{}
		if err := admin.Get(ctx, client.ObjectKey{Namespace: "smoke", Name: "smoke"}, job); err != nil {
			return err
		}
		// The first write may predate the pods; the printer columns below need the one that
		// counts them (both Pending, so unhealthy).
		if job.Status.Phase != nezhav1.PhasePending || job.Status.WorkersReady != "0/2" ||
			job.Status.RailsHealthy != "1/1" || job.Status.WorkerCounts.Unhealthy != 2 {
			return fmt.Errorf("status %+v", job.Status)
		}
		return nil
	})
	// What users see: kubectl get mrj with the printer columns.
	adminUser, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubectl, err := adminUser.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := kubectl.Run("get", "mrj", "-n", "smoke")
	if err != nil {
		errOut, _ := io.ReadAll(stderr)
		t.Fatalf("kubectl get mrj: %v: %s", err, errOut)
	}
	out, _ := io.ReadAll(stdout)
	fields := strings.Fields(string(out))
	// Both workers are Pending (nothing schedules them here): counted as unhealthy.
	if len(fields) < 12 || strings.Join(fields[:6], " ") != "NAME PHASE READY RAILS UNHEALTHY AGE" ||
		strings.Join(fields[6:11], " ") != "smoke Pending 0/2 1/1 2" {
		t.Errorf("kubectl get mrj:\n%s", out)
	}

	waitFor(t, "metrics", func() error {
		body, err := httpGet("http://" + metricsAddr + "/metrics")
		if err != nil {
			return err
		}
		for _, m := range []string{`nezha_operator_jobs{phase="Pending"} 1`, "nezha_operator_reconcile_duration_seconds_count",
			"nezha_operator_worker_pods_created_total 2"} {
			if !strings.Contains(body, m) {
				return fmt.Errorf("metrics lack %q", m)
			}
		}
		return nil
	})
	if !strings.Contains(logs.String(), `"msg":"PyTorchJob support","enabled":true`) {
		t.Errorf("operator did not detect the PyTorchJob CRD:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "forbidden") || strings.Contains(logs.String(), "unknown field") {
		t.Errorf("RBAC denied something or the API server warned:\n%s", logs.String())
	}
}

// TestOperatorRefusesABadConfiguration: a configuration the operator cannot use stops it at
// start, before it talks to any API server, with the path of every bad field.
func TestOperatorRefusesABadConfiguration(t *testing.T) {
	bin := buildOperator(t)
	for _, tc := range []struct {
		name, config string
		want         []string
	}{
		{"no file", "", []string{"--config is required"}},
		{"bad values", `apiVersion: config.nezha.io/v1alpha1
kind: Configuration
namespace: nezha-system
workerPods: {createParallelism: 0}
quarantine: {failures: 3, window: 0s}
`, []string{"workerPods.createParallelism: Invalid value: 0", "quarantine.window: Invalid value"}},
		{"unknown field", `apiVersion: config.nezha.io/v1alpha1
kind: Configuration
namespace: nezha-system
quarantine: {failurs: 3}
`, []string{`unknown field "quarantine.failurs"`}},
	} {
		args := []string{"--kubeconfig=/nonexistent"}
		if tc.config != "" {
			args = append(args, "--config="+writeConfig(t, tc.config))
		}
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err == nil {
			t.Errorf("%s: the operator started", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s: the error does not say %q:\n%s", tc.name, w, out)
			}
		}
		if strings.Contains(string(out), "nonexistent") {
			t.Errorf("%s: the operator read its kubeconfig before refusing its configuration:\n%s", tc.name, out)
		}
	}
}

// buildOperator builds this command into the test's temporary directory.
func buildOperator(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "nezha-operator")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustCreate(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %s: %v", obj.GetName(), err)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func httpGet(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	return string(b), err
}

func httpOK(url string) error { _, err := httpGet(url); return err }

// waitFor polls check; the bound only keeps a broken run from hanging.
func waitFor(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		if err = check(); err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: %v", what, err)
}

// syncBuffer is a bytes.Buffer safe for one writer goroutine and concurrent readers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

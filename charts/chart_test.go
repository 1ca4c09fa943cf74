// Package charts tests the Helm chart the way a cluster would see it: rendered by the real helm
// binary and every object submitted (server-side dry run) to a real kube-apiserver (envtest), so a
// template that renders but would be rejected on install fails here.
package charts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

const (
	chartDir         = "nezha"
	releaseName      = "nezha"
	releaseNamespace = "nezha-system"
	// helm template assumes an old cluster unless told; render for the version envtest runs.
	kubeVersion = "v1.33.13"
)

// helmBinary finds the pinned helm that hack/setup.sh installs.
func helmBinary(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	cache := os.Getenv("NEZHA_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatalf("no HOME to find the helm cache: %v", err)
		}
		cache = filepath.Join(home, ".cache", "nezha")
	}
	h := filepath.Join(cache, "tools", "bin", "helm")
	if _, err := os.Stat(h); err != nil {
		t.Fatalf("helm not found at %s (run hack/setup.sh or set HELM): %v", h, err)
	}
	return h
}

func runHelm(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(helmBinary(t), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return out.String()
}

// helmOutput runs helm for a test that expects it may fail: its combined output and error.
func helmOutput(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(helmBinary(t), args...).CombinedOutput()
	return string(out), err
}

func renderedObjects(t *testing.T, manifest string) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]interface{}
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("rendered chart is not valid YAML: %v", err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

func kinds(objs []*unstructured.Unstructured) map[string]int {
	k := map[string]int{}
	for _, o := range objs {
		k[o.GetKind()]++
	}
	return k
}

func TestChartLints(t *testing.T) {
	out := runHelm(t, "lint", "--strict", chartDir)
	if !strings.Contains(out, "0 chart(s) failed") {
		t.Fatalf("helm lint did not pass:\n%s", out)
	}
}

// The chart ships the CRDs and the operator's RBAC rules that controller-gen generates; `make
// manifests` copies them. A stale copy would install an API the operator does not speak.
func TestChartCopiesOfGeneratedManifestsAreCurrent(t *testing.T) {
	bases, err := filepath.Glob("../config/crd/bases/*.yaml")
	if err != nil || len(bases) == 0 {
		t.Fatalf("no generated CRDs in config/crd/bases (err %v)", err)
	}
	for _, base := range bases {
		want, err := os.ReadFile(base)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(chartDir, "crds", filepath.Base(base)))
		if err != nil {
			t.Fatalf("chart lacks CRD %s (run make manifests): %v", filepath.Base(base), err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("charts/nezha/crds/%s differs from config/crd/bases (run make manifests)", filepath.Base(base))
		}
	}
	role, err := os.ReadFile("../config/rbac/role.yaml")
	if err != nil {
		t.Fatalf("no generated RBAC role: %v", err)
	}
	idx := bytes.Index(role, []byte("\nrules:"))
	if idx < 0 {
		t.Fatalf("config/rbac/role.yaml has no rules")
	}
	rules, err := os.ReadFile(filepath.Join(chartDir, "files", "operator-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rules, role[idx+1:]) {
		t.Errorf("charts/nezha/files/operator-rules.yaml differs from config/rbac/role.yaml (run make manifests)")
	}
}

func TestChartRendersWhatValuesAskFor(t *testing.T) {
	full := kinds(renderedObjects(t, runHelm(t, "template", releaseName, chartDir, "--kube-version", kubeVersion, "--namespace", releaseNamespace)))
	if full["ClusterTrainingRuntime"] != 0 {
		t.Errorf("the Trainer runtime renders by default (it needs Trainer's CRDs: off unless trainer.enabled)")
	}
	for kind, n := range map[string]int{"Deployment": 1, "DaemonSet": 1, "ServiceAccount": 2, "ClusterRole": 2} {
		if full[kind] != n {
			t.Errorf("default render has %d %s, want %d (all kinds: %v)", full[kind], kind, n, full)
		}
	}
	noAgent := kinds(renderedObjects(t, runHelm(t, "template", releaseName, chartDir, "--kube-version", kubeVersion,
		"--namespace", releaseNamespace, "--set", "agent.enabled=false")))
	if noAgent["DaemonSet"] != 0 {
		t.Errorf("agent.enabled=false still renders a DaemonSet")
	}
}

// TestValuesSchemaRefusesBadValuesNamingTheField: values.schema.json turns a typo or a wrong type
// into an error at `helm install` that names the value, instead of a pod that crash-loops on a
// bad flag.
func TestValuesSchemaRefusesBadValuesNamingTheField(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"operator.runtimeControl.railActionInterval=soon", "railActionInterval"},
		{"operator.runtimeControl.steerRails=maybe", "steerRails"},
		{"operator.metricsPort=70000", "metricsPort"},
		{"image.pullPolicy=Sometimes", "pullPolicy"},
		{"operator.logLevel=loud", "logLevel"},
		{"agent.coalesceWindow=200", "coalesceWindow"},
		{"networkPolicy.monitoringNamespace=Not_A_Namespace", "monitoringNamespace"},
		{"operatr.replicas=2", "operatr"},
		{"operator.quarantine.failures=-1", "failures"},
		{"operator.quarantine.window=10", "window"},
		{"operator.quarantine.releaseAfter=0s", "releaseAfter"},
		{"operator.runtimeControl.probeTimeout=0ms", "probeTimeout"},
		{"monitoring.podMonitors.interval=often", "interval"},
		{"monitoring.grafanaDashboard.enabled=yes", "enabled"},
		{"operator.railNodeStaleAfter=90", "railNodeStaleAfter"},
		{"operator.leaderElectionNamespace=Bad_NS", "leaderElectionNamespace"},
		{"agent.resyncPeriod=often", "resyncPeriod"},
		{"agent.maxRetryBackoff=5", "maxRetryBackoff"},
		{"agent.logLevel=loud", "logLevel"},
		{"tests.enabled=sure", "enabled"},
		{"trainer.railClasses={Bad_Name}", "railClasses"},
		{"webhook.podRails=maybe", "podRails"},
		{"operator.watchNamespaces={Team_A}", "watchNamespaces"},
	} {
		cmd := exec.Command(helmBinary(t), "template", releaseName, chartDir, "--kube-version", kubeVersion,
			"--namespace", releaseNamespace, "--set", tc.set)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("--set %s rendered without error", tc.set)
			continue
		}
		if !strings.Contains(string(out), "values don't meet the specifications of the schema") || !strings.Contains(string(out), tc.want) {
			t.Errorf("--set %s: error does not name %q as a schema violation:\n%s", tc.set, tc.want, out)
		}
	}
}

// moduleDir downloads (Go module proxy; cached) a module that is not a dependency and returns
// its directory.
func moduleDir(t *testing.T, modVersion string) string {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", modVersion).Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v", modVersion, err)
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		t.Fatalf("go mod download %s: %s %v", modVersion, m.Error, err)
	}
	return m.Dir
}

// Every rendered object (and every CRD) must be accepted by a real API server.
func TestChartObjectsAreAcceptedByAPIServer(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run through `make test` (hack/setup.sh builds the binaries)")
	}
	// The real Kubeflow Trainer v2 and JobSet CRDs, so the optional ClusterTrainingRuntime is
	// checked too (trainer.enabled=true below).
	env := &envtest.Environment{
		CRDDirectoryPaths: []string{filepath.Join(chartDir, "crds"),
			filepath.Join(moduleDir(t, "github.com/kubeflow/trainer/v2@v2.3.0"), "manifests", "base", "crds"),
			filepath.Join(moduleDir(t, "sigs.k8s.io/jobset@v0.12.0"), "config", "components", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNamespace}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	objs := renderWith(t, "--api-versions", admissionPolicyAPI, "--set", "trainer.enabled=true")
	if kinds(objs)["ClusterTrainingRuntime"] != 1 || kinds(objs)["MutatingWebhookConfiguration"] != 1 ||
		kinds(objs)["ValidatingAdmissionPolicy"] != 1 {
		t.Fatalf("trainer.enabled=true render lacks the ClusterTrainingRuntime, the pod webhook or the agent's policy: %v", kinds(objs))
	}
	// The agent's namespace (made by the chart) must exist for a dry run of what goes into it.
	for _, o := range byKind(objs, "Namespace") {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("API server rejects Namespace %s: %v", o.GetName(), err)
		}
	}
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			continue
		}
		if err := c.Create(ctx, o, client.DryRunAll); err != nil {
			t.Errorf("API server rejects %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

package charts

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// admissionPolicyAPI is what the chart asks .Capabilities for before it renders the rail agent's
// ValidatingAdmissionPolicy; every API server these tests start (1.30+) serves it, and `helm
// template` only knows it when told.
const admissionPolicyAPI = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"

// startAPIServer starts a real kube-apiserver (and etcd) from binDir (empty: KUBEBUILDER_ASSETS)
// with no CRDs; the caller installs what it needs. With a binDir it cannot run in parallel.
func startAPIServer(t *testing.T, binDir string) (*envtest.Environment, *rest.Config, client.Client) {
	t.Helper()
	if binDir == "" && os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run through `make test` (hack/setup.sh builds the binaries)")
	}
	if binDir != "" {
		// envtest prefers KUBEBUILDER_ASSETS (set by make test-go) over BinaryAssetsDirectory.
		t.Setenv("KUBEBUILDER_ASSETS", binDir)
	}
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start envtest from %q: %v", binDir, err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return env, cfg, c
}

// kubeconfigFor writes a kubeconfig for a system:masters user of env, for helm.
func kubeconfigFor(t *testing.T, env *envtest.Environment, cfg *rest.Config) string {
	t.Helper()
	admin, err := env.AddUser(envtest.User{Name: "chart-test-admin", Groups: []string{"system:masters"}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// createPSANamespace creates namespace name enforcing Pod Security level (restricted, baseline,
// privileged) with the API server's built-in PodSecurity admission.
func createPSANamespace(t *testing.T, c client.Client, name, level string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce":         level,
		"pod-security.kubernetes.io/enforce-version": "latest",
	}}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// podOf is the Pod a Deployment or DaemonSet would create (its template), or the Pod itself, in
// namespace ns: PodSecurity admission enforces on pods, and only warns on workload objects.
func podOf(t *testing.T, o *unstructured.Unstructured, ns string) *unstructured.Unstructured {
	t.Helper()
	spec, ok, _ := unstructured.NestedMap(o.Object, "spec")
	if o.GetKind() != "Pod" {
		spec, ok, _ = unstructured.NestedMap(o.Object, "spec", "template", "spec")
	}
	if !ok {
		t.Fatalf("%s %s has no pod spec", o.GetKind(), o.GetName())
	}
	pod := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod", "spec": spec}}
	pod.SetName(strings.ToLower(o.GetKind()) + "-" + o.GetName())
	pod.SetNamespace(ns)
	return pod
}

// workloads are the rendered objects that make pods.
func workloads(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment", "DaemonSet", "Pod":
			out = append(out, o)
		}
	}
	return out
}

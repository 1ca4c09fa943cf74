package charts

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The Kubernetes versions the chart claims (Chart.yaml kubeVersion): the ends are what `make
// test-chart-matrix` installs into (hack/versions.sh KUBE_OLDEST_VERSION and KUBE_VERSION).
const (
	oldestClaimed = "v1.29.0"
	newestClaimed = "v1.33.13"
)

// TestChartClaimsExactlyTheTestedRange: helm refuses the chart below the oldest and above the
// newest minor the matrix tests, and accepts both ends.
func TestChartClaimsExactlyTheTestedRange(t *testing.T) {
	for version, ok := range map[string]bool{"v1.28.15": false, oldestClaimed: true, newestClaimed: true, "v1.34.0": false} {
		out, err := helmOutput(t, "template", releaseName, chartDir, "--kube-version", version, "--namespace", releaseNamespace)
		switch {
		case ok && err != nil:
			t.Errorf("Kubernetes %s is claimed but helm refuses it: %v\n%s", version, err, out)
		case !ok && (err == nil || !strings.Contains(out, "chart requires kubeVersion")):
			t.Errorf("Kubernetes %s is outside the tested range but helm accepts it (%v):\n%.300s", version, err, out)
		}
	}
}

// TestChartInstallsOnEveryClaimedVersion is `make test-chart-matrix`: for each API server in
// NEZHA_CHART_MATRIX ("v1.29.15=/bin/dir,v1.33.13=/bin/dir", envtest kube-apiserver and etcd) the
// chart is rendered by helm against that server (its real API versions and kubeVersion check),
// every object is server-side applied as a dry run, every pod the chart makes is admitted under
// its namespace's enforced Pod Security level, and a real `helm install` succeeds. The rail
// agent's ValidatingAdmissionPolicy is rendered exactly where admissionregistration.k8s.io/v1
// serves it (1.30+), and elsewhere NOTES says which protection is missing.
func TestChartInstallsOnEveryClaimedVersion(t *testing.T) {
	matrix := os.Getenv("NEZHA_CHART_MATRIX")
	if matrix == "" {
		t.Skip("NEZHA_CHART_MATRIX is not set: run `make test-chart-matrix` (it builds the oldest claimed kube-apiserver)")
	}
	for _, entry := range strings.Split(matrix, ",") {
		version, binDir, ok := strings.Cut(entry, "=")
		if !ok || version == "" || binDir == "" {
			t.Fatalf("NEZHA_CHART_MATRIX entry %q: want VERSION=BINDIR", entry)
		}
		t.Run(version, func(t *testing.T) { installOn(t, version, binDir) })
	}
}

func installOn(t *testing.T, version, binDir string) {
	env, cfg, c := startAPIServer(t, binDir)
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if sv, err := dc.ServerVersion(); err != nil || sv.GitVersion != version {
		t.Fatalf("the API server from %s is %v (err %v), want %s", binDir, sv, err, version)
	}
	kubeconfig := kubeconfigFor(t, env, cfg)
	ctx := context.Background()
	createPSANamespace(t, c, releaseNamespace, "restricted")

	objs := renderedObjects(t, runHelm(t, "template", releaseName, chartDir, "--validate", "--kubeconfig", kubeconfig,
		"--include-crds", "--namespace", releaseNamespace))
	wantPolicy := minorOf(t, version) >= 30
	if got := kinds(objs)["ValidatingAdmissionPolicy"] == 1; got != wantPolicy {
		t.Errorf("Kubernetes %s: ValidatingAdmissionPolicy rendered %v, want %v", version, got, wantPolicy)
	}
	for _, o := range objs {
		opts := []client.PatchOption{client.FieldOwner("chart-matrix"), client.ForceOwnership}
		if o.GetKind() != "Namespace" { // the agent's namespace must exist for its objects' dry run
			opts = append(opts, client.DryRunAll)
		}
		if err := c.Patch(ctx, o, client.Apply, opts...); err != nil {
			t.Errorf("Kubernetes %s rejects %s %s: %v", version, o.GetKind(), o.GetName(), err)
		}
	}
	for _, w := range workloads(objs) {
		if err := c.Create(ctx, podOf(t, w, w.GetNamespace()), client.DryRunAll); err != nil {
			t.Errorf("Kubernetes %s: the pod of %s %s: %v", version, w.GetKind(), w.GetName(), err)
		}
	}

	// A real install (the agent's namespace now exists: the chart adopts nothing, so use another).
	out := runHelm(t, "install", "matrix", chartDir, "--kubeconfig", kubeconfig, "--namespace", releaseNamespace,
		"--set", "agent.namespace.name=matrix-rail-agent")
	warned := strings.Contains(out, "WARNING: this cluster does not serve admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy")
	if warned == wantPolicy {
		t.Errorf("Kubernetes %s: NOTES warn about the missing policy: %v, want %v\n%s", version, warned, !wantPolicy, out)
	}
	if !strings.Contains(out, "NetworkPolicy (networkPolicy.chartPods=true): the operator's pod admits only") {
		t.Errorf("Kubernetes %s: NOTES do not say what the chart pods' NetworkPolicies admit\n%s", version, out)
	}
}

// minorOf is the minor version of "v1.<minor>.<patch>".
func minorOf(t *testing.T, version string) int {
	t.Helper()
	parts := strings.Split(strings.TrimPrefix(version, "v"), ".")
	if len(parts) < 2 {
		t.Fatalf("version %q is not v1.<minor>.<patch>", version)
	}
	m, err := strconv.Atoi(parts[1])
	if err != nil {
		t.Fatalf("version %q: %v", version, err)
	}
	return m
}

package charts

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Flags the chart deliberately does not expose: testing hooks, the in-pod kubeconfig, and
// controller-runtime's zap flags other than the log level. The operator's settings are in its
// configuration file, not flags: operator_config_test.go checks the chart sets each of them.
var chartFixedFlags = map[string]bool{
	"netns": true, "sys-class-net": true, // agent: testing only
	"kubeconfig": true,
}

var flagName = regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9-]*)`)

// binaryFlags builds pkg and returns the flags its -h lists.
func binaryFlags(t *testing.T, pkg string) []string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, out)
	}
	out, _ := exec.Command(bin, "-h").CombinedOutput() // -h exits 2 after printing the flags
	listed := flagName.FindAllStringSubmatch(string(out), -1)
	if len(listed) < 3 {
		t.Fatalf("%s -h listed too few flags to be true:\n%s", pkg, out)
	}
	var flags []string
	for _, m := range listed {
		name := m[1]
		if chartFixedFlags[name] || (strings.HasPrefix(name, "zap-") && name != "zap-log-level") {
			continue
		}
		flags = append(flags, name)
	}
	return flags
}

// TestEveryFlagIsReachableFromValues: each operator and agent flag (but the fixed ones above)
// is on the rendered command line, so values can set it; a new flag without a value fails here.
func TestEveryFlagIsReachableFromValues(t *testing.T) {
	out := runHelm(t, "template", releaseName, chartDir, "--kube-version", kubeVersion, "--namespace", releaseNamespace)
	for _, pkg := range []string{"github.com/nezha-project/nezha/operator/cmd/nezha-operator", "github.com/nezha-project/nezha/cni/cmd/nezha-rail-agent"} {
		for _, f := range binaryFlags(t, pkg) {
			if !strings.Contains(out, "- --"+f+"=") {
				t.Errorf("%s flag --%s is not set by the chart (add a value, or list it in chartFixedFlags with the reason)", filepath.Base(pkg), f)
			}
		}
	}
}

// TestHelmTestHookChecksOperatorAndAgents: the `helm test` pod is a test hook, uses the runtime
// image (the one with busybox wget), and probes the operator's readiness port and the agents'
// health port as values set them; tests.enabled=false drops it and its Services.
func TestHelmTestHookChecksOperatorAndAgents(t *testing.T) {
	out := runHelm(t, "template", releaseName, chartDir, "--kube-version", kubeVersion, "--namespace", releaseNamespace,
		"--set", "operator.healthPort=8091", "--set", "agent.metricsPort=9413", "--set", "image.registry=reg.example:5000",
		"--show-only", "templates/tests/health.yaml")
	objs := renderedObjects(t, out)
	var names []string
	for _, o := range objs {
		names = append(names, o.GetKind()+"/"+o.GetName())
		if o.GetKind() == "Pod" {
			if hook := o.GetAnnotations()["helm.sh/hook"]; hook != "test" {
				t.Errorf("test pod hook annotation %q, want test", hook)
			}
		}
	}
	slices.Sort(names)
	want := []string{"Pod/nezha-test-health", "Service/nezha-agents", "Service/nezha-operator-health"}
	if !slices.Equal(names, want) {
		t.Fatalf("helm test objects %q, want %q", names, want)
	}
	for _, s := range []string{"image: reg.example:5000/nezha/runtime:0.1.0", ":8091/readyz", ":9413/healthz",
		"nezha-operator-health.nezha-system.svc.cluster.local", "publishNotReadyAddresses: true"} {
		if !strings.Contains(out, s) {
			t.Errorf("helm test objects lack %q", s)
		}
	}
	off := runHelm(t, "template", releaseName, chartDir, "--kube-version", kubeVersion, "--namespace", releaseNamespace,
		"--set", "tests.enabled=false")
	if strings.Contains(off, "test-health") || strings.Contains(off, "operator-health") {
		t.Errorf("tests.enabled=false still renders the helm test objects")
	}
}

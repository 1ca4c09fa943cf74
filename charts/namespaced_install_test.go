package charts

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestNamespacedInstallGrantsPodsAndSecretsPerNamespace: with operator.watchNamespaces the
// operator may read and create Secrets and create and delete pods only in those namespaces
// (a Role and RoleBinding in each), its ClusterRole keeps only cluster-scoped resources, its
// configuration names the namespaces, and the pod webhook is sent only their pods.
func TestNamespacedInstallGrantsPodsAndSecretsPerNamespace(t *testing.T) {
	objs := renderedObjects(t, runHelm(t, "template", releaseName, chartDir, "--kube-version", kubeVersion,
		"--namespace", releaseNamespace, "--set", "operator.watchNamespaces={team-a,team-b}"))
	roles := map[string][]string{} // namespace → resources its operator Role grants
	for _, o := range objs {
		if !strings.HasSuffix(o.GetName(), "-operator") {
			continue
		}
		switch o.GetKind() {
		case "ClusterRole":
			for _, res := range ruleResources(t, o) {
				if res == "secrets" || res == "pods" || res == "services" || res == "networkpolicies" {
					t.Errorf("namespaced install: the operator's ClusterRole still grants %s cluster-wide", res)
				}
			}
		case "Role":
			roles[o.GetNamespace()] = ruleResources(t, o)
		}
	}
	for _, ns := range []string{"team-a", "team-b"} {
		for _, res := range []string{"secrets", "pods", "services", "networkpolicies", "multirailjobs"} {
			if !slices.Contains(roles[ns], res) {
				t.Errorf("namespace %s: the operator's Role lacks %s (has %v)", ns, res, roles[ns])
			}
		}
	}
	if len(roles) != 2 {
		t.Errorf("operator Roles in %d namespaces, want 2: %v", len(roles), roles)
	}

	var config, webhook string
	for _, o := range objs {
		switch {
		case o.GetKind() == "ConfigMap" && strings.HasSuffix(o.GetName(), "-operator-config"):
			config, _, _ = unstructured.NestedString(o.Object, "data", "config.yaml")
		case o.GetKind() == "MutatingWebhookConfiguration":
			hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
			if len(hooks) == 1 {
				sel, _, _ := unstructured.NestedSlice(hooks[0].(map[string]any), "namespaceSelector", "matchExpressions")
				if len(sel) == 1 {
					vals, _, _ := unstructured.NestedStringSlice(sel[0].(map[string]any), "values")
					webhook = strings.Join(vals, ",")
				}
			}
		}
	}
	if !strings.Contains(config, `watchNamespaces: ["team-a","team-b"]`) {
		t.Errorf("the operator's configuration does not name the watched namespaces:\n%s", config)
	}
	if webhook != "team-a,team-b" {
		t.Errorf("the pod webhook's namespaceSelector selects %q, want team-a,team-b", webhook)
	}
}

func ruleResources(t *testing.T, role *unstructured.Unstructured) []string {
	t.Helper()
	rules, _, err := unstructured.NestedSlice(role.Object, "rules")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rules {
		res, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resources")
		out = append(out, res...)
	}
	return out
}

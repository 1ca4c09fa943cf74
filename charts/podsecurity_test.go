package charts

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const agentNamespace = releaseNamespace + "-rail-agent"

// TestChartPodsPassTheirPodSecurityLevels submits the pod of every workload the chart renders to a
// real API server whose PodSecurity admission enforces: the operator and the `helm test` pod in a
// release namespace at "restricted", the rail agent in the namespace the chart makes for it, with
// the chart's own "privileged" label. The agent's pod in the restricted namespace is refused: the
// check can fail, and the agent really needs its own namespace.
func TestChartPodsPassTheirPodSecurityLevels(t *testing.T) {
	_, _, c := startAPIServer(t, "")
	ctx := context.Background()
	createPSANamespace(t, c, releaseNamespace, "restricted")
	objs := renderWith(t, "--api-versions", admissionPolicyAPI)
	var agentNS *unstructured.Unstructured
	for _, o := range byKind(objs, "Namespace") {
		if o.GetName() == agentNamespace {
			agentNS = o
		}
	}
	if agentNS == nil || agentNS.GetLabels()["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Fatalf("the chart does not make namespace %s labelled privileged: %v", agentNamespace, agentNS)
	}
	if err := c.Create(ctx, agentNS); err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, w := range workloads(objs) {
		seen[w.GetKind()] = w.GetNamespace()
		if err := c.Create(ctx, podOf(t, w, w.GetNamespace()), client.DryRunAll); err != nil {
			t.Errorf("%s %s in namespace %s: %v", w.GetKind(), w.GetName(), w.GetNamespace(), err)
		}
	}
	want := map[string]string{"Deployment": releaseNamespace, "Pod": releaseNamespace, "DaemonSet": agentNamespace}
	for kind, ns := range want {
		if seen[kind] != ns {
			t.Errorf("%s rendered in namespace %q, want %q", kind, seen[kind], ns)
		}
	}
	agent := byKind(objs, "DaemonSet")[0]
	err := c.Create(ctx, podOf(t, agent, releaseNamespace), client.DryRunAll)
	if err == nil || !strings.Contains(err.Error(), "violates PodSecurity") || !strings.Contains(err.Error(), "host namespaces") {
		t.Fatalf("the agent's pod in a restricted namespace: want refused by PodSecurity for hostNetwork, got %v", err)
	}
}

// TestChartRefusesTheAgentInTheReleaseNamespace: the split is not optional; an agent namespace
// equal to the release namespace fails the render naming the value.
func TestChartRefusesTheAgentInTheReleaseNamespace(t *testing.T) {
	out, err := helmOutput(t, "template", releaseName, chartDir, "--kube-version", kubeVersion, "--namespace", releaseNamespace,
		"--set", "agent.namespace.name="+releaseNamespace)
	if err == nil || !strings.Contains(out, "agent.namespace.name must not be the release namespace") {
		t.Fatalf("want a render error naming agent.namespace.name, got %v:\n%s", err, out)
	}
	noNS := renderWith(t, "--set", "agent.namespace.create=false", "--set", "agent.namespace.name=rails")
	if n := len(byKind(noNS, "Namespace")); n != 0 {
		t.Errorf("agent.namespace.create=false still renders %d Namespace", n)
	}
	if ds := byKind(noNS, "DaemonSet"); len(ds) != 1 || ds[0].GetNamespace() != "rails" {
		t.Errorf("agent.namespace.name=rails: DaemonSet not in namespace rails")
	}
}

// TestEveryContainerHasRequestsLimitsAndTheAgentProbes: a namespace with a ResourceQuota refuses
// a pod with any container lacking requests or limits (ephemeral-storage included, which the
// kubelet counts the container's log against); a hung agent must be restarted (/healthz) and an
// agent rollout gated by whether its RailNode is written (/readyz), both on the metrics port.
func TestEveryContainerHasRequestsLimitsAndTheAgentProbes(t *testing.T) {
	for _, w := range workloads(renderWith(t)) {
		spec := podOf(t, w, "").Object["spec"].(map[string]any)
		for _, field := range []string{"initContainers", "containers"} {
			containers, _, _ := unstructured.NestedSlice(spec, field)
			for _, ci := range containers {
				cm := ci.(map[string]any)
				for _, kind := range []string{"requests", "limits"} {
					for _, res := range []string{"cpu", "memory", "ephemeral-storage"} {
						if v, _, _ := unstructured.NestedString(cm, "resources", kind, res); v == "" {
							t.Errorf("%s %s container %s: no resources.%s.%s", w.GetKind(), w.GetName(), cm["name"], kind, res)
						}
					}
				}
				if w.GetKind() != "DaemonSet" || cm["name"] != "agent" {
					continue
				}
				for probe, want := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
					path, _, _ := unstructured.NestedString(cm, probe, "httpGet", "path")
					port, _, _ := unstructured.NestedString(cm, probe, "httpGet", "port")
					if path != want || port != "metrics" {
						t.Errorf("agent %s: httpGet %q on port %q, want %s on metrics", probe, path, port, want)
					}
				}
			}
		}
	}
}

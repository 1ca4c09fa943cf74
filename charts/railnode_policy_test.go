package charts

import (
	"context"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// TestAgentWritesOnlyItsOwnRailNode installs the chart's agent RBAC and its
// ValidatingAdmissionPolicy into a real apiserver, then acts as the agent with a service-account
// token bound to a pod on node-a: writing RailNode node-a is allowed, node-b is denied by the
// policy (RBAC alone would allow it).
func TestAgentWritesOnlyItsOwnRailNode(t *testing.T) {
	env := &envtest.Environment{CRDDirectoryPaths: []string{"nezha/crds"}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	admin, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range renderWith(t, "--api-versions", admissionPolicyAPI, "--show-only", "templates/agent-namespace.yaml",
		"--show-only", "templates/agent-rbac.yaml", "--show-only", "templates/agent-railnode-policy.yaml") {
		must(admin.Create(ctx, o))
	}
	// A pod of the agent on each node, and a token bound to the one on node-a.
	for _, node := range []string{"node-a", "node-b"} {
		must(admin.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}))
		must(admin.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "agent-" + node, Namespace: agentNamespace},
			Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: releaseName + "-rail-agent",
				Containers: []corev1.Container{{Name: "agent", Image: "agent"}}},
		}))
	}
	pod := &corev1.Pod{}
	must(admin.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: "agent-node-a"}, pod))
	cs, err := kubernetes.NewForConfig(cfg)
	must(err)
	// clientWithToken acts as the agent's service account with a token bound to bound (nil: a
	// token bound to nothing, which carries no userInfo.extra).
	clientWithToken := func(bound *authenticationv1.BoundObjectReference) client.Client {
		t.Helper()
		tr, err := cs.CoreV1().ServiceAccounts(agentNamespace).CreateToken(ctx, releaseName+"-rail-agent",
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: bound}}, metav1.CreateOptions{})
		must(err)
		agentCfg := rest.AnonymousClientConfig(cfg)
		agentCfg.BearerToken = tr.Status.Token
		c, err := client.New(agentCfg, client.Options{})
		must(err)
		return c
	}
	agent := clientWithToken(&authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID})

	railNode := func(name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("nezha.io/v1alpha1")
		u.SetKind("RailNode")
		u.SetName(name)
		return u
	}
	// The API server's admission plugin picks the policy and its binding up from its informers,
	// a moment after they are created: until a dry run of the forbidden write is denied, nothing
	// below would test the policy.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := agent.Create(ctx, railNode("node-b"), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "only the RailNode of its own node"), nil
	}); err != nil {
		t.Fatalf("the ValidatingAdmissionPolicy never took effect: %v", err)
	}
	if err := agent.Create(ctx, railNode("node-a")); err != nil {
		t.Fatalf("the agent on node-a may write RailNode node-a: %v", err)
	}
	err = agent.Create(ctx, railNode("node-b"))
	if err == nil || !strings.Contains(err.Error(), "only the RailNode of its own node") ||
		!strings.Contains(err.Error(), "this token belongs to node node-a") {
		t.Fatalf("the agent on node-a must not write RailNode node-b, got %v", err)
	}
	// Credentials not bound to a pod are denied with the policy's own message, not an evaluation
	// error: a token bound to nothing (userInfo.extra without node-name), and a request with no
	// userInfo.extra at all (a legacy Secret token; here the admin impersonating the account),
	// where reading extra unguarded fails with "no such key: extra".
	impersonated := rest.CopyConfig(cfg)
	impersonated.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + agentNamespace + ":" + releaseName + "-rail-agent"}
	noExtra, err := client.New(impersonated, client.Options{})
	must(err)
	for name, c := range map[string]client.Client{"a token bound to nothing": clientWithToken(nil), "no userInfo.extra": noExtra} {
		err = c.Create(ctx, railNode("node-b"))
		if err == nil || !strings.Contains(err.Error(), "this token belongs to node (none: not a pod-bound token)") ||
			strings.Contains(err.Error(), "no such key") {
			t.Fatalf("%s: want the policy's denial naming no node, got %v", name, err)
		}
	}
	// The admin made node-b's; the agent from node-a may not change or delete it either.
	must(admin.Create(ctx, railNode("node-b")))
	victim := railNode("node-b")
	must(admin.Get(ctx, client.ObjectKey{Name: "node-b"}, victim))
	victim.SetLabels(map[string]string{"forged": "yes"})
	if err := agent.Update(ctx, victim); !apierrors.IsForbidden(err) {
		t.Fatalf("update of another node's RailNode: want forbidden, got %v", err)
	}
	if err := agent.Status().Update(ctx, victim); err == nil || !strings.Contains(err.Error(), "own node") {
		t.Fatalf("status update of another node's RailNode: want denied by the policy, got %v", err)
	}

	// Its own RailNode's quarantine is not the agent's to clear: no update of the main resource
	// (RBAC), a status update leaves the spec as the administrator set it, and it may not create
	// a RailNode that carries a quarantine.
	own := railNode("node-a")
	must(admin.Get(ctx, client.ObjectKey{Name: "node-a"}, own))
	must(unstructured.SetNestedStringSlice(own.Object, []string{"rail0"}, "spec", "quarantinedRails"))
	must(admin.Update(ctx, own))
	must(agent.Get(ctx, client.ObjectKey{Name: "node-a"}, own))
	unstructured.RemoveNestedField(own.Object, "spec")
	if err := agent.Update(ctx, own); !apierrors.IsForbidden(err) {
		t.Fatalf("the agent cleared its own quarantine through the main resource: %v", err)
	}
	must(agent.Status().Update(ctx, own))
	must(admin.Get(ctx, client.ObjectKey{Name: "node-a"}, own))
	if q, _, _ := unstructured.NestedStringSlice(own.Object, "spec", "quarantinedRails"); len(q) != 1 || q[0] != "rail0" {
		t.Fatalf("the agent's status update changed spec.quarantinedRails to %v", q)
	}
	must(admin.Delete(ctx, own))
	quarantined := railNode("node-a")
	must(unstructured.SetNestedStringSlice(quarantined.Object, []string{"rail0"}, "spec", "quarantinedRails"))
	if err := agent.Create(ctx, quarantined); err == nil || !strings.Contains(err.Error(), "spec.quarantinedRails") {
		t.Fatalf("the agent created a RailNode with a quarantine: %v", err)
	}
	// Deleting is not even in the agent's RBAC; either way it must be forbidden.
	if err := agent.Delete(ctx, victim); !apierrors.IsForbidden(err) {
		t.Fatalf("delete of another node's RailNode: want forbidden, got %v", err)
	}
}

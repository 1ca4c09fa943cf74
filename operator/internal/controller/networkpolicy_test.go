package controller_test

import (
	"context"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/nezha-project/nezha/operator/internal/builder"
	tu "github.com/nezha-project/nezha/operator/internal/testutil"
)

// TestJobGetsItsNetworkPolicy: the real apiserver accepts the job's NetworkPolicy, the job
// controls it, it selects the job's workers, lets the job's own pods in, and opens only the
// runtime's control ports to the operator and the monitoring namespace; a drifted rule is put
// back.
func TestJobGetsItsNetworkPolicy(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	r0 := ns + "-r0"
	mustCreate(t, tu.MakeRailClass(r0).Obj())
	mustCreate(t, tu.MakeJob("np", ns, r0).Replicas(2).Obj())
	np := &networkingv1.NetworkPolicy{}
	eventually(t, "NetworkPolicy", func() error { return k8s.Get(ctx, clientKey(ns, builder.NetworkPolicyName("np")), np) })
	if err := ownedByJob(np, getJob(t, ns, "np")); err != nil {
		t.Fatal(err)
	}
	if got := np.Spec.PodSelector.MatchLabels["nezha.io/job-name"]; got != "np" {
		t.Fatalf("podSelector %v", np.Spec.PodSelector)
	}
	if len(np.Spec.Ingress) != 2 || np.Spec.Ingress[0].Ports != nil ||
		np.Spec.Ingress[0].From[0].PodSelector.MatchLabels["nezha.io/job-name"] != "np" {
		t.Fatalf("first rule must admit the job's own pods on every port: %+v", np.Spec.Ingress)
	}
	control := np.Spec.Ingress[1]
	if len(control.Ports) != 1 || control.Ports[0].Port.IntValue() != 9402 || *control.Ports[0].EndPort != 9402+63 ||
		len(control.From) != 2 || control.From[1].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "monitoring" {
		t.Fatalf("second rule must open only 9402..9465 to the operator and monitoring: %+v", control)
	}
	np.Spec.Ingress = nil
	if err := k8s.Update(ctx, np); err != nil {
		t.Fatal(err)
	}
	eventually(t, "rules restored", func() error {
		if err := k8s.Get(ctx, clientKey(ns, builder.NetworkPolicyName("np")), np); err != nil {
			return err
		}
		if len(np.Spec.Ingress) != 2 {
			return errorf("ingress rules %v", np.Spec.Ingress)
		}
		return nil
	})
}

package controller_test

import (
	"context"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	tu "github.com/nezha-project/nezha/operator/internal/testutil"
)

// TestDeleteJobLeavesOnlyOwnedChildren: everything the operator created for a job is controlled
// by it (so the garbage collector removes it with the job; envtest runs no garbage collector, so
// the test plays it), and nothing is recreated once the job is gone.
func TestDeleteJobLeavesOnlyOwnedChildren(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	r0 := ns + "-r0"
	mustCreate(t, tu.MakeRailClass(r0).Obj())
	mustCreate(t, tu.MakeJob("del", ns, r0).Replicas(3).Obj())
	eventually(t, "pods", podExists(ns, "del-2"))
	job := getJob(t, ns, "del")

	sel := client.MatchingLabels{nezhav1.JobNameLabel: "del"}
	var pods corev1.PodList
	var svcs corev1.ServiceList
	var secrets corev1.SecretList
	var nads nadv1.NetworkAttachmentDefinitionList
	var owned []client.Object
	for _, l := range []client.ObjectList{&pods, &svcs, &secrets, &nads} {
		if err := k8s.List(ctx, l, client.InNamespace(ns), sel); err != nil {
			t.Fatal(err)
		}
	}
	for i := range pods.Items {
		owned = append(owned, &pods.Items[i])
	}
	for i := range svcs.Items {
		owned = append(owned, &svcs.Items[i])
	}
	for i := range secrets.Items {
		owned = append(owned, &secrets.Items[i])
	}
	for i := range nads.Items {
		owned = append(owned, &nads.Items[i])
	}
	if len(owned) != 3+1+1+1 {
		t.Fatalf("want 3 pods, a Service, a Secret and a NAD labelled for the job; got %d objects", len(owned))
	}
	for _, o := range owned {
		if err := ownedByJob(o, job); err != nil {
			t.Error(err)
		}
	}

	if err := k8s.Delete(ctx, job); err != nil {
		t.Fatal(err)
	}
	eventually(t, "job gone", func() error {
		err := k8s.Get(ctx, clientKey(ns, "del"), &nezhav1.MultiRailJob{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return errorf("job still there (%v)", err)
	})
	for _, o := range owned { // what the garbage collector would do
		if err := k8s.Delete(ctx, o, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	// Pod deletions map back to the (gone) job; give the controller a moment to misbehave.
	time.Sleep(500 * time.Millisecond)
	if err := k8s.List(ctx, &pods, client.InNamespace(ns), sel); err != nil || len(pods.Items) != 0 {
		t.Errorf("pods recreated after job deletion: %d (%v)", len(pods.Items), err)
	}
}

package controller_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/builder"
	tu "github.com/nezha-project/nezha/operator/internal/testutil"
)

// TestForeignTokenSecretIsNeverAdopted: a Secret with the job's token name that the job does not
// control (someone else made it, so someone else may know the token) is left alone: the job gets
// a SecretConflict condition naming it and no workers; once it is gone the job proceeds with a
// token the operator made itself.
func TestForeignTokenSecretIsNeverAdopted(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	r0 := ns + "-r0"
	mustCreate(t, tu.MakeRailClass(r0).Obj())
	name := builder.SecretName("sec")
	planted := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Data:       map[string][]byte{nezhav1.JobTokenKey: []byte("known-to-the-attacker")},
	}
	mustCreate(t, planted)
	mustCreate(t, tu.MakeJob("sec", ns, r0).Replicas(2).Obj())
	eventually(t, "SecretConflict", conditionIs(ns, "sec", nezhav1.ConditionWorkersCreated,
		metav1.ConditionFalse, "SecretConflict", "Secret "+ns+"/"+name+" exists but was not created by this MultiRailJob"))
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace(ns)); err != nil || len(pods.Items) != 0 {
		t.Fatalf("want no worker pods while the Secret conflicts, got %d (%v)", len(pods.Items), err)
	}
	var got corev1.Secret
	if err := k8s.Get(ctx, clientKey(ns, name), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.OwnerReferences) != 0 || string(got.Data[nezhav1.JobTokenKey]) != "known-to-the-attacker" {
		t.Fatalf("the foreign Secret was modified: owners %v", got.OwnerReferences)
	}

	if err := k8s.Delete(ctx, planted); err != nil {
		t.Fatal(err)
	}
	// The job's next change (or resync) brings it back: touch a label.
	job := getJob(t, ns, "sec")
	job.Labels = map[string]string{"retry": "1"}
	if err := k8s.Update(ctx, job); err != nil {
		t.Fatal(err)
	}
	eventually(t, "workers", podExists(ns, "sec-1"))
	if err := k8s.Get(ctx, clientKey(ns, name), &got); err != nil {
		t.Fatal(err)
	}
	if !metav1.IsControlledBy(&got, getJob(t, ns, "sec")) || len(got.Data[nezhav1.JobTokenKey]) != 64 {
		t.Fatalf("want a Secret controlled by the job with a 64-hex-digit token, got owners %v, %d bytes",
			got.OwnerReferences, len(got.Data[nezhav1.JobTokenKey]))
	}
}

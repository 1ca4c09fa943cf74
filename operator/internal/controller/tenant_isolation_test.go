package controller_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/builder"
	tu "github.com/nezha-project/nezha/operator/internal/testutil"
)

// The attacks of docs/security.md "Tenant model": someone who may create MultiRailJobs or pods in
// a namespace must not be able to make the operator rewrite another team's objects there, nor get
// a pod of their own treated as one of the job's workers.

// TestForeignServiceIsNeverTakenOver: a job named like an existing Service ("db", selecting a
// database) used to rewrite that Service's selector and ports to the job's pods. Now the Service
// is left as it was, the job gets a ServiceConflict condition naming it, and no workers.
func TestForeignServiceIsNeverTakenOver(t *testing.T) {
	ns := newNamespace(t)
	r0 := ns + "-r0"
	mustCreate(t, tu.MakeRailClass(r0).Obj())
	db := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "postgres"},
			Ports: []corev1.ServicePort{{Name: "pg", Port: 5432, Protocol: corev1.ProtocolTCP}}},
	}
	mustCreate(t, db)
	before := db.Spec.DeepCopy()
	mustCreate(t, tu.MakeJob("db", ns, r0).Replicas(2).Obj())
	eventually(t, "ServiceConflict", conditionIs(ns, "db", nezhav1.ConditionWorkersCreated, metav1.ConditionFalse,
		nezhav1.ReasonServiceConflict, "Service "+ns+"/db exists but was not created by this MultiRailJob"))
	eventually(t, "event", eventSeen(ns, "db", corev1.EventTypeWarning, nezhav1.ReasonServiceConflict, "Service "+ns+"/db"))

	var got corev1.Service
	if err := k8s.Get(context.Background(), clientKey(ns, "db"), &got); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(got.Spec.Selector, before.Selector) || len(got.Spec.Ports) != 1 ||
		got.Spec.Ports[0].Port != 5432 || len(got.OwnerReferences) != 0 {
		t.Fatalf("the foreign Service was modified: selector %v ports %v owners %v", got.Spec.Selector, got.Spec.Ports, got.OwnerReferences)
	}
	expectNoPods(t, ns)
}

// TestForeignNetworkPolicyIsNeverTakenOver: a NetworkPolicy with the job's policy name
// ("<job>-workers") that another team wrote keeps its rules; the job gets a NetworkPolicyConflict
// condition naming it and starts no workers (they would run without the job's own policy).
func TestForeignNetworkPolicyIsNeverTakenOver(t *testing.T) {
	ns := newNamespace(t)
	r0 := ns + "-r0"
	mustCreate(t, tu.MakeRailClass(r0).Obj())
	name := builder.NetworkPolicyName("train")
	port := intstr.FromInt32(5432)
	theirs := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "postgres"}},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: &port}}}},
		},
	}
	mustCreate(t, theirs)
	mustCreate(t, tu.MakeJob("train", ns, r0).Replicas(2).Obj())
	eventually(t, "NetworkPolicyConflict", conditionIs(ns, "train", nezhav1.ConditionWorkersCreated, metav1.ConditionFalse,
		nezhav1.ReasonNetworkPolicyConflict, "NetworkPolicy "+ns+"/"+name+" exists but was not created by this MultiRailJob"))

	var got networkingv1.NetworkPolicy
	if err := k8s.Get(context.Background(), clientKey(ns, name), &got); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(got.Spec, theirs.Spec) || len(got.OwnerReferences) != 0 {
		t.Fatalf("the foreign NetworkPolicy was modified: %+v owners %v", got.Spec, got.OwnerReferences)
	}
	var svc corev1.Service
	if err := k8s.Get(context.Background(), clientKey(ns, "train"), &svc); err == nil {
		t.Fatalf("the job's Service was created although its NetworkPolicy conflicts")
	}
	expectNoPods(t, ns)
}

// TestLabelledStrangerPodIsNotAWorker: ownerless pods carrying a job's name and rank labels (one
// rank 0, one a rank beyond the job's replicas) were taken for workers: rank 0 was never created
// (so the stranger would get the job's credential and be believed about its rails) and the other
// was deleted as surplus. Now the job creates its own rank 0 and leaves both strangers alone.
func TestLabelledStrangerPodIsNotAWorker(t *testing.T) {
	ns := newNamespace(t)
	r0 := ns + "-r0"
	mustCreate(t, tu.MakeRailClass(r0).Obj())
	stranger := func(name, rank string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
				nezhav1.JobNameLabel: "victim", nezhav1.RankLabel: rank, nezhav1.ManagedByLabel: nezhav1.ManagedByValue}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "attacker"}}},
		}
	}
	mustCreate(t, stranger("fake-0", "0"))
	mustCreate(t, stranger("fake-5", "5"))
	mustCreate(t, tu.MakeJob("victim", ns, r0).Replicas(2).Obj())

	// ensureWorkers deletes surplus ranks before it creates missing ones, in the same reconcile:
	// once the job's own rank 0 exists, that reconcile has seen both strangers.
	eventually(t, "the job's own rank 0", podExists(ns, builder.PodName("victim", 0)))
	for _, name := range []string{"fake-0", "fake-5"} {
		pod, err := getPod(ns, name)
		if err != nil || pod.DeletionTimestamp != nil {
			t.Fatalf("stranger pod %s was deleted (%v)", name, err)
		}
	}
	eventually(t, "only the job's pods counted", func() error {
		if c := getJob(t, ns, "victim").Status.WorkerCounts; c.Pods != 2 {
			return errorf("worker counts %+v, want 2 pods", c)
		}
		return nil
	})
}

func expectNoPods(t *testing.T, ns string) {
	t.Helper()
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(ns)); err != nil || len(pods.Items) != 0 {
		t.Fatalf("want no worker pods while a child conflicts, got %d (%v)", len(pods.Items), err)
	}
}

// TestRailClassAllowedNamespaces: a RailClass whose spec.allowedNamespaces does not select a
// namespace is refused to jobs there (NetworksReady=False, RailClassNotAllowed, naming the
// RailClass and the namespace; no NAD is created in that namespace, no workers), while a
// namespace it selects gets its workers.
func TestRailClassAllowedNamespaces(t *testing.T) {
	ctx := context.Background()
	other, team := newNamespace(t), newNamespace(t)
	ns := &corev1.Namespace{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: team}, ns); err != nil {
		t.Fatal(err)
	}
	ns.Labels["rails.example/team"] = "vision"
	if err := k8s.Update(ctx, ns); err != nil {
		t.Fatal(err)
	}
	rc := tu.MakeRailClass(team + "-r0").Obj()
	rc.Spec.AllowedNamespaces = &metav1.LabelSelector{MatchLabels: map[string]string{"rails.example/team": "vision"}}
	mustCreate(t, rc)

	mustCreate(t, tu.MakeJob("intruder", other, rc.Name).Replicas(1).Obj())
	eventually(t, "RailClassNotAllowed", conditionIs(other, "intruder", nezhav1.ConditionNetworksReady, metav1.ConditionFalse,
		nezhav1.ReasonRailClassNotAllowed, `RailClass "`+rc.Name+`" does not allow namespace "`+other+`"`))
	expectNoPods(t, other)

	mustCreate(t, tu.MakeJob("owner", team, rc.Name).Replicas(1).Obj())
	eventually(t, "the selected namespace gets its worker", podExists(team, builder.PodName("owner", 0)))
}

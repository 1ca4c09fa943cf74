package controller

import (
	"context"
	"errors"
	"strings"
	"testing"

	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/scheme"
	tu "github.com/nezha-project/nezha/operator/internal/testutil"
)

// These tests use the fake client where a real API server adds nothing: injected write
// failures, and an operator started without the PyTorchJob CRD.

func newFakeReconciler(funcs interceptor.Funcs, objs ...client.Object) (*MultiRailJobReconciler, *record.FakeRecorder) {
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).
		WithStatusSubresource(&nezhav1.MultiRailJob{}).WithInterceptorFuncs(funcs).Build()
	rec := record.NewFakeRecorder(100)
	return &MultiRailJobReconciler{Client: c, APIReader: c, Recorder: rec, Clock: clocktesting.NewFakePassiveClock(t0.Time)}, rec
}

func request(ns, name string) ctrl.Request {
	return ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
}

// TestNoEventsWhenStatusWriteFails: Events describe state the API shows, so a failed status
// write emits none (the retry will).
func TestNoEventsWhenStatusWriteFails(t *testing.T) {
	job := tu.MakeJob("j", "ns", "missing-rail").Obj()
	r, rec := newFakeReconciler(interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			return apierrors.NewConflict(schema.GroupResource{Group: "nezha.io", Resource: "multirailjobs"}, obj.GetName(), nil)
		},
	}, job)
	res, err := r.Reconcile(context.Background(), request("ns", "j"))
	if err != nil || res.RequeueAfter != conflictRetry {
		t.Fatalf("want a quiet retry after %v, got %+v %v", conflictRetry, res, err)
	}
	if n := len(rec.Events); n != 0 {
		t.Errorf("%d events emitted before the status was written: %v", n, <-rec.Events)
	}
}

// TestPyTorchJobWithoutCRD: without the Kubeflow CRD a pytorchJob job gets a condition and an
// Event instead of a crash or a retry loop.
func TestPyTorchJobWithoutCRD(t *testing.T) {
	rc := tu.MakeRailClass("r0").Obj()
	job := tu.MakeJob("p", "ns", "r0").PyTorchJob(1).Obj()
	r, rec := newFakeReconciler(interceptor.Funcs{}, rc, job)
	res, err := r.Reconcile(context.Background(), request("ns", "p"))
	if err != nil || res.RequeueAfter != 0 {
		t.Fatalf("reconcile: %v %+v", err, res)
	}
	got := &nezhav1.MultiRailJob{}
	if err := r.Get(context.Background(), client.ObjectKeyFromObject(job), got); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(got.Status.Conditions, nezhav1.ConditionWorkersCreated)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != nezhav1.ReasonPyTorchJobCRDMissing {
		t.Fatalf("condition %+v", c)
	}
	if e := <-rec.Events; !strings.Contains(e, "Warning PyTorchJobCRDMissing") {
		t.Errorf("event %q", e)
	}
}

// TestJobsGaugeFollowsPhaseAndDeletion: nezha_operator_jobs{phase} counts each job once and
// forgets deleted jobs.
func TestJobsGaugeFollowsPhaseAndDeletion(t *testing.T) {
	job := tu.MakeJob("g", "gauge-ns", "absent").Obj()
	r, _ := newFakeReconciler(interceptor.Funcs{}, job)
	before := promtestutil.ToFloat64(jobsByPhase.WithLabelValues(string(nezhav1.PhasePending)))
	for i := 0; i < 2; i++ { // reconciling twice must not count twice
		if _, err := r.Reconcile(context.Background(), request("gauge-ns", "g")); err != nil {
			t.Fatal(err)
		}
	}
	if got := promtestutil.ToFloat64(jobsByPhase.WithLabelValues(string(nezhav1.PhasePending))); got != before+1 {
		t.Errorf("pending jobs %v, want %v", got, before+1)
	}
	if err := r.Delete(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(context.Background(), request("gauge-ns", "g")); err != nil {
		t.Fatal(err)
	}
	if got := promtestutil.ToFloat64(jobsByPhase.WithLabelValues(string(nezhav1.PhasePending))); got != before {
		t.Errorf("pending jobs after delete %v, want %v", got, before)
	}
	if promtestutil.CollectAndCount(reconcileDuration) == 0 {
		t.Error("reconcile duration not observed")
	}
}

// TestPodCreateRejected: a pod the API server refuses (here: a quota) becomes a condition naming
// the pod and an error for a rate-limited retry; the pods that were accepted stay.
func TestPodCreateRejected(t *testing.T) {
	rc := tu.MakeRailClass("r0").Obj()
	job := tu.MakeJob("q", "ns", "r0").Replicas(3).Obj()
	r, _ := newFakeReconciler(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if obj.GetName() == "q-1" {
				return apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "q-1", errQuota)
			}
			return c.Create(ctx, obj, opts...)
		},
	}, rc, job)
	_, err := r.Reconcile(context.Background(), request("ns", "q"))
	if err == nil || !strings.Contains(err.Error(), "create worker pod q-1") {
		t.Fatalf("error %v", err)
	}
	got := &nezhav1.MultiRailJob{}
	if err := r.Get(context.Background(), client.ObjectKeyFromObject(job), got); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(got.Status.Conditions, nezhav1.ConditionWorkersCreated)
	if c == nil || c.Reason != nezhav1.ReasonCreatingWorkers || !strings.Contains(c.Message, "exceeded quota") {
		t.Errorf("condition %+v", c)
	}
	var pods corev1.PodList
	if err := r.List(context.Background(), &pods); err != nil || len(pods.Items) != 2 {
		t.Errorf("want the 2 accepted pods, got %d (%v)", len(pods.Items), err)
	}
}

var errQuota = errors.New("exceeded quota: pods")

// TestStatusWriteErrorIsReturned: other status write failures go back to controller-runtime for a
// rate-limited retry, again without Events.
func TestStatusWriteErrorIsReturned(t *testing.T) {
	job := tu.MakeJob("j", "ns", "missing-rail").Obj()
	r, rec := newFakeReconciler(interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			return apierrors.NewServiceUnavailable("etcd is sad")
		},
	}, job)
	if _, err := r.Reconcile(context.Background(), request("ns", "j")); err == nil || !strings.Contains(err.Error(), "etcd is sad") {
		t.Fatalf("error %v", err)
	}
	if n := len(rec.Events); n != 0 {
		t.Errorf("%d events emitted without a status write", n)
	}
}

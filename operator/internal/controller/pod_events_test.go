package controller

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// recordingQueue records how requests are enqueued; nothing else of the queue is used.
type recordingQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	added   []reconcile.Request
	delayed map[reconcile.Request]time.Duration
}

func (q *recordingQueue) Add(r reconcile.Request) { q.added = append(q.added, r) }
func (q *recordingQueue) AddAfter(r reconcile.Request, d time.Duration) {
	if q.delayed == nil {
		q.delayed = map[reconcile.Request]time.Duration{}
	}
	q.delayed[r] = d
}

// TestPodEventsAreBatched: a worker pod's events reach its job after the batch delay; a pod of no
// job is ignored; batch 0 enqueues at once.
func TestPodEventsAreBatched(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "j-3", Labels: map[string]string{nezhav1.JobNameLabel: "j"}}}
	stray := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x"}}
	ctx := context.Background()

	q := &recordingQueue{}
	h := podEventsToJob(time.Second)
	h.Create(ctx, ctrlevent.CreateEvent{Object: pod}, q)
	h.Update(ctx, ctrlevent.UpdateEvent{ObjectOld: pod, ObjectNew: pod}, q)
	h.Delete(ctx, ctrlevent.DeleteEvent{Object: stray}, q)
	want := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "j"}}
	if len(q.added) != 0 || len(q.delayed) != 1 || q.delayed[want] != time.Second {
		t.Errorf("added %v delayed %v", q.added, q.delayed)
	}

	q = &recordingQueue{}
	podEventsToJob(0).Delete(ctx, ctrlevent.DeleteEvent{Object: pod}, q)
	if len(q.added) != 1 || q.added[0] != want || len(q.delayed) != 0 {
		t.Errorf("added %v delayed %v", q.added, q.delayed)
	}
}

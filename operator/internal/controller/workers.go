package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	configapi "github.com/nezha-project/nezha/operator/api/config/v1alpha1"
	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/builder"
)

// ensureWorkers creates the missing worker pods (one per rank) and deletes pods of ranks beyond
// spec.workers.replicas. A worker spec the builder rejects becomes a condition, not a retry loop:
// only a spec change can fix it, and that brings the job back anyway.
func (r *MultiRailJobReconciler) ensureWorkers(ctx context.Context, job *nezhav1.MultiRailJob, rails []builder.Rail,
	obs observation, avoid []string, st *statusUpdate) error {
	desired := job.Spec.Workers.Replicas
	for rank, pod := range obs.pods {
		if rank >= desired && pod.DeletionTimestamp == nil {
			if err := r.Delete(ctx, pod); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete surplus worker pod %s: %w", pod.Name, err)
			}
		}
	}
	if err := r.replaceStaleUnscheduled(ctx, obs, avoid, st); err != nil {
		return err
	}
	var build []*corev1.Pod
	for rank := int32(0); rank < desired; rank++ {
		if obs.pods[rank] != nil {
			continue
		}
		pod, err := builder.WorkerPod(job, rails, rank, builder.WorkerOptions{RuntimeImage: r.RuntimeImage, AvoidNodes: avoid})
		if err != nil {
			st.setCondition(nezhav1.ConditionWorkersCreated, metav1.ConditionFalse, nezhav1.ReasonInvalidWorkerSpec, err.Error(), warning)
			return nil
		}
		build = append(build, pod)
	}
	if len(build) == 0 {
		st.setCondition(nezhav1.ConditionWorkersCreated, metav1.ConditionTrue, nezhav1.ReasonAllWorkersCreated,
			fmt.Sprintf("%d worker pods exist", desired), "")
		return nil
	}
	if ok, err := r.ensureSecret(ctx, job, st); !ok || err != nil {
		return err
	}
	// Create in parallel: a 1,000-worker job would otherwise wait for 1,000 sequential round trips.
	var (
		mu       sync.Mutex
		created  int
		firstErr error
	)
	parallel := r.CreateParallelism
	if parallel <= 0 {
		parallel = configapi.DefaultCreateParallelism
	}
	workqueue.ParallelizeUntil(ctx, parallel, len(build), func(i int) {
		err := r.Create(ctx, build[i])
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			created++
		case apierrors.IsAlreadyExists(err):
			// the previous incarnation is still terminating; its deletion requeues us
		case firstErr == nil:
			firstErr = fmt.Errorf("create worker pod %s: %w", build[i].Name, err)
		}
	})
	if firstErr != nil {
		workerPodsCreated.Add(float64(created))
		st.setCondition(nezhav1.ConditionWorkersCreated, metav1.ConditionFalse, nezhav1.ReasonCreatingWorkers, firstErr.Error(), warning)
		return firstErr
	}
	workerPodsCreated.Add(float64(created))
	if created > 0 {
		st.event(normal, nezhav1.ReasonCreatedWorkers, fmt.Sprintf("created %d worker pods", created))
		if st.status.StartTime == nil {
			st.status.StartTime = &st.now
		}
	}
	if created == len(build) {
		st.setCondition(nezhav1.ConditionWorkersCreated, metav1.ConditionTrue, nezhav1.ReasonAllWorkersCreated,
			fmt.Sprintf("%d worker pods exist", desired), "")
	} else {
		st.setCondition(nezhav1.ConditionWorkersCreated, metav1.ConditionFalse, nezhav1.ReasonCreatingWorkers,
			fmt.Sprintf("waiting for %d terminating worker pods to go", len(build)-created), "")
	}
	return nil
}

// replaceStaleUnscheduled deletes workers that are not yet scheduled and were built to avoid a
// different set of nodes than now; ensureWorkers recreates them once they are gone. Node affinity
// is immutable, so without this a worker created during a rail outage would keep excluding the
// recovered node and could stay Pending forever. Scheduled pods are never touched: their affinity
// no longer matters and deleting them would kill training.
func (r *MultiRailJobReconciler) replaceStaleUnscheduled(ctx context.Context, obs observation, avoid []string,
	st *statusUpdate) error {
	want := strings.Join(avoid, ",")
	var replaced []string
	for _, pod := range obs.pods {
		if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil || builder.AvoidedNodesOf(pod) == want {
			continue
		}
		// The precondition makes a pod bound since our read survive: the delete then fails.
		err := r.Delete(ctx, pod, client.Preconditions{UID: &pod.UID, ResourceVersion: &pod.ResourceVersion})
		switch {
		case err == nil:
			replaced = append(replaced, pod.Name)
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// gone or changed (possibly scheduled) meanwhile; the next reconcile looks again
		default:
			return fmt.Errorf("replace unscheduled worker pod %s: %w", pod.Name, err)
		}
	}
	if len(replaced) > 0 {
		sort.Strings(replaced)
		now := want
		if now == "" {
			now = "none"
		}
		st.actionEvent(normal, nezhav1.ReasonReplacedUnscheduledWorkers, fmt.Sprintf(
			"recreating %d unscheduled worker pods (%s) built for other nodes to avoid; nodes to avoid now: %s",
			len(replaced), strings.Join(replaced, ", "), now))
	}
	return nil
}

// restartWorkers deletes every worker pod (onRailLoss=Restart); they are recreated on the next
// reconcile, off the nodes whose rails are down.
func (r *MultiRailJobReconciler) restartWorkers(ctx context.Context, obs observation, st *statusUpdate, why string) error {
	for _, pod := range obs.pods {
		if pod.DeletionTimestamp != nil {
			continue
		}
		if err := r.Delete(ctx, pod); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("restart: delete worker pod %s: %w", pod.Name, err)
		}
	}
	st.status.Restarts++
	rec := nezhav1.FailoverRecord{Time: st.now, Action: nezhav1.FailoverRestarted, Message: why}
	st.status.FailoverHistory = appendHistory(st.status.FailoverHistory, []nezhav1.FailoverRecord{rec})
	railFailovers.WithLabelValues(string(nezhav1.FailoverRestarted)).Inc()
	st.actionEvent(warning, nezhav1.ReasonRestartedWorkers, fmt.Sprintf("deleted %d worker pods to restart them: %s", len(obs.pods), why))
	return nil
}

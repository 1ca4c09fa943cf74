package controller

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// applyRailLossPolicy sets Degraded from the rail health and the job's failure policy, and
// reports whether the workers must be restarted (onRailLoss=Restart, once per episode of being
// below minHealthyRails: the restart itself must not be retriggered while rails stay down).
func applyRailLossPolicy(job *nezhav1.MultiRailJob, h railHealth, st *statusUpdate) (restart bool) {
	total := int32(len(job.Spec.Rails))
	minHealthy := int32(1)
	if p := job.Spec.FailurePolicy.MinHealthyRails; p != nil {
		minHealthy = *p
	}
	onLoss := job.Spec.FailurePolicy.OnRailLoss
	if onLoss == "" {
		onLoss = nezhav1.ContinueDegraded
	}

	switch {
	case len(h.downRails) == 0:
		st.setCondition(nezhav1.ConditionDegraded, metav1.ConditionFalse, nezhav1.ReasonAllRailsUp,
			fmt.Sprintf("running on all %d rails", total), "")
	case h.notDown() < minHealthy:
		wasBelow := st.isTrue(nezhav1.ConditionDegraded) && st.reasonOf(nezhav1.ConditionDegraded) == nezhav1.ReasonBelowMinHealthyRails
		st.setCondition(nezhav1.ConditionDegraded, metav1.ConditionTrue, nezhav1.ReasonBelowMinHealthyRails,
			fmt.Sprintf("%d of %d rails healthy, below minHealthyRails %d (down: %s); onRailLoss=%s",
				h.notDown(), total, minHealthy, strings.Join(h.downRails, ", "), onLoss), warning)
		restart = onLoss == nezhav1.Restart && !wasBelow
	default:
		st.setCondition(nezhav1.ConditionDegraded, metav1.ConditionTrue, nezhav1.ReasonRailDown,
			fmt.Sprintf("running on %d of %d rails (down: %s)", h.notDown(), total, strings.Join(h.downRails, ", ")), warning)
	}
	return restart
}

// applyWorkerCompletion sets Failed when a worker failed and Succeeded when all did their work.
// A job fails as a whole: the ranks of a collective cannot continue without one of them.
func applyWorkerCompletion(obs observation, desired int32, st *statusUpdate) {
	switch {
	case len(obs.failed) > 0:
		st.setCondition(nezhav1.ConditionFailed, metav1.ConditionTrue, nezhav1.ReasonWorkerFailed, joinBounded(obs.failed, 5), warning)
	case desired > 0 && obs.succeeded == desired:
		st.setCondition(nezhav1.ConditionSucceeded, metav1.ConditionTrue, nezhav1.ReasonAllWorkersSucceeded,
			fmt.Sprintf("all %d workers succeeded", desired), normal)
	}
}

// finished reports whether the job reached a terminal condition.
func finished(s *nezhav1.MultiRailJobStatus) bool {
	for _, c := range s.Conditions {
		if (c.Type == nezhav1.ConditionSucceeded || c.Type == nezhav1.ConditionFailed) && c.Status == metav1.ConditionTrue {
			return true
		}
	}
	return false
}

// computePhase summarises the conditions in one word for kubectl.
func computePhase(st *statusUpdate, desired, running int32) nezhav1.JobPhase {
	switch {
	case st.isTrue(nezhav1.ConditionFailed):
		return nezhav1.PhaseFailed
	case st.isTrue(nezhav1.ConditionSucceeded):
		return nezhav1.PhaseSucceeded
	case st.isTrue(nezhav1.ConditionDegraded):
		return nezhav1.PhaseDegraded
	case desired > 0 && running >= desired:
		return nezhav1.PhaseRunning
	default:
		return nezhav1.PhasePending
	}
}

package controller_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	configapi "github.com/nezha-project/nezha/operator/api/config/v1alpha1"
	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	tu "github.com/nezha-project/nezha/operator/internal/testutil"
)

// TestStaleAgentMakesRailsUnknown: when a node's agent stops refreshing its RailNode, the job's
// RailsHealthy turns Unknown/AgentStale naming the node (with a Warning Event) even though no
// RailNode event arrives (the operator requeues for the moment the stamp expires); the job is not
// degraded and no failover is recorded; when the agent reports again, RailsHealthy is True.
func TestStaleAgentMakesRailsUnknown(t *testing.T) {
	ns := newNamespace(t)
	n0, n1 := ns+"-n0", ns+"-n1"
	r0, r1 := runningJob(t, ns, "stale", [2]string{n0, n1}, tu.MakeJob("stale", ns))
	putRailNode(t, tu.MakeRailNode(n0).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj())
	putRailNode(t, tu.MakeRailNode(n1).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj())
	eventually(t, "healthy", conditionIs(ns, "stale", nezhav1.ConditionRailsHealthy, metav1.ConditionTrue, "AllRailsUp", "all 2 rails"))

	// n1's agent writes one last time, 5 s before its stamp expires, then falls silent.
	last := metav1.NewTime(time.Now().Add(-configapi.DefaultRailNodeStaleAfter + 5*time.Second))
	putRailNode(t, tu.MakeRailNode(n1).ObservedAt(&last).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj())
	wantMsg := fmt.Sprintf("rail health unknown: rail agent on node %q last reported", n1)
	eventually(t, "stale", conditionIs(ns, "stale", nezhav1.ConditionRailsHealthy, metav1.ConditionUnknown, "AgentStale", wantMsg))
	eventually(t, "event", eventSeen(ns, "stale", corev1.EventTypeWarning, "AgentStale", n1))
	job := getJob(t, ns, "stale")
	if job.Status.Phase != nezhav1.PhaseRunning || job.Status.RailsHealthy != "0/2" || len(job.Status.FailoverHistory) != 0 {
		t.Errorf("phase %q railsHealthy %q history %+v", job.Status.Phase, job.Status.RailsHealthy, job.Status.FailoverHistory)
	}

	// The agent is back.
	putRailNode(t, tu.MakeRailNode(n1).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj())
	eventually(t, "trusted again", conditionIs(ns, "stale", nezhav1.ConditionRailsHealthy, metav1.ConditionTrue, "AllRailsUp", "all 2 rails"))
	job = getJob(t, ns, "stale")
	if job.Status.RailsHealthy != "2/2" || len(job.Status.FailoverHistory) != 0 {
		t.Errorf("railsHealthy %q history %+v", job.Status.RailsHealthy, job.Status.FailoverHistory)
	}
}

// TestRailDownStaysDownWhileAgentIsStale: a rail reported down before its agent went silent is
// neither recovered on the stale report nor lost again; it recovers once the agent says so.
func TestRailDownStaysDownWhileAgentIsStale(t *testing.T) {
	ns := newNamespace(t)
	n0, n1 := ns+"-n0", ns+"-n1"
	r0, r1 := runningJob(t, ns, "sd", [2]string{n0, n1}, tu.MakeJob("sd", ns))
	putRailNode(t, tu.MakeRailNode(n0).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj())
	putRailNode(t, tu.MakeRailNode(n1).Rail(r0, "eth1", true).Rail(r1, "eth2", false).Obj())
	eventually(t, "down", conditionIs(ns, "sd", nezhav1.ConditionDegraded, metav1.ConditionTrue, "RailDown", r1))

	// A stale RailNode claiming the rail is up does not count as a recovery.
	old := metav1.NewTime(time.Now().Add(-time.Hour))
	putRailNode(t, tu.MakeRailNode(n1).ObservedAt(&old).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj())
	eventually(t, "still down, last known", conditionIs(ns, "sd", nezhav1.ConditionRailsHealthy, metav1.ConditionFalse, "RailDown",
		fmt.Sprintf("rail %q last reported down on node %q; rail agent on node %q last reported", r1, n1, n1)))
	if job := getJob(t, ns, "sd"); len(job.Status.FailoverHistory) != 1 || job.Status.Phase != nezhav1.PhaseDegraded {
		t.Errorf("phase %q history %+v", job.Status.Phase, job.Status.FailoverHistory)
	}

	putRailNode(t, tu.MakeRailNode(n1).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj())
	eventually(t, "recovered", conditionIs(ns, "sd", nezhav1.ConditionDegraded, metav1.ConditionFalse, "AllRailsUp", ""))
	if job := getJob(t, ns, "sd"); len(job.Status.FailoverHistory) != 2 || job.Status.FailoverHistory[1].Action != nezhav1.FailoverRailRecovered {
		t.Errorf("history %+v", job.Status.FailoverHistory)
	}
}

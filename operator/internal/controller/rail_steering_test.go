package controller_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/builder"
	runtimeprober "github.com/nezha-project/nezha/operator/internal/prober"
	tu "github.com/nezha-project/nezha/operator/internal/testutil"
)

func bothHealthy(r0, r1 string) map[string]string {
	return map[string]string{r0: runtimeprober.StateHealthy, r1: runtimeprober.StateHealthy}
}

// jobCredential is the control credential of the job's own token Secret.
func jobCredential(t *testing.T, ns, job string) string {
	t.Helper()
	var s corev1.Secret
	if err := k8s.Get(context.Background(), clientKey(ns, builder.SecretName(job)), &s); err != nil {
		t.Fatal(err)
	}
	return runtimeprober.ControlCredential(s.Data[nezhav1.JobTokenKey])
}

func callsAre(ns string, want ...steerCall) func() error {
	return func() error {
		if d := cmp.Diff(want, prober.callsIn(ns), cmp.AllowUnexported(steerCall{})); d != "" {
			return fmt.Errorf("drain/restore calls (-want +got):\n%s", d)
		}
		return nil
	}
}

func drainedRailsAre(ns, job string, want ...string) func() error {
	return func() error {
		j := &nezhav1.MultiRailJob{}
		if err := k8s.Get(context.Background(), clientKey(ns, job), j); err != nil {
			return err
		}
		var got []string
		for _, d := range j.Status.DrainedRails {
			got = append(got, fmt.Sprintf("%s node=%s rank=%d", d.Rail, d.Node, d.Rank))
		}
		if !cmp.Equal(want, got, cmp.Comparer(func(a, b []string) bool { return strings.Join(a, "|") == strings.Join(b, "|") })) {
			return fmt.Errorf("status.drainedRails %v, want %v", got, want)
		}
		return nil
	}
}

// TestAgentSeenFailureIsDrainedThroughTheRuntimeAndRestored: a rail the node agent reports down
// while the runtime still uses it (a failure the pod cannot see) is drained by asking the rank on
// that node, once, with the job's control credential; when the node reports it up again the
// operator restores it. The exact call list proves idempotence: no second drain while the rail
// stays down, one restore.
func TestAgentSeenFailureIsDrainedThroughTheRuntimeAndRestored(t *testing.T) {
	ns := newNamespace(t)
	n0, n1 := ns+"-n0", ns+"-n1"
	r0, r1 := runningJob(t, ns, "steer", [2]string{n0, n1}, tu.MakeJob("steer", ns))
	prober.setStates(ns, "steer-0", bothHealthy(r0, r1))
	prober.setStates(ns, "steer-1", bothHealthy(r0, r1))
	putRailNode(t, tu.MakeRailNode(n0).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj())
	putRailNode(t, tu.MakeRailNode(n1).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj())
	eventually(t, "healthy", conditionIs(ns, "steer", nezhav1.ConditionRailsHealthy, metav1.ConditionTrue, "AllRailsUp", ""))
	cred := jobCredential(t, ns, "steer")

	putRailNode(t, tu.MakeRailNode(n1).Rail(r0, "eth1", true).Rail(r1, "eth2", false).Obj())
	eventually(t, "drain asked of rank 1", callsAre(ns, steerCall{"steer-1", r1, runtimeprober.Drain, cred}))
	eventually(t, "drained in status", drainedRailsAre(ns, "steer", fmt.Sprintf("%s node=%s rank=1", r1, n1)))
	eventually(t, "drain event", eventSeen(ns, "steer", corev1.EventTypeWarning, "RailDrained",
		fmt.Sprintf("draining rail %q: rail %q down on node %q: interface \"eth2\" operState=down carrier=false; rank 1's runtime on node %q",
			r1, r1, n1, n1)))
	eventually(t, "degraded names the rail", conditionIs(ns, "steer", nezhav1.ConditionRailsHealthy, metav1.ConditionFalse, "RailDown",
		fmt.Sprintf("rail %q down on node %q", r1, n1)))

	putRailNode(t, tu.MakeRailNode(n1).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj())
	eventually(t, "restore asked", callsAre(ns,
		steerCall{"steer-1", r1, runtimeprober.Drain, cred}, steerCall{"steer-1", r1, runtimeprober.Restore, cred}))
	eventually(t, "nothing drained in status", drainedRailsAre(ns, "steer"))
	eventually(t, "restore event", eventSeen(ns, "steer", corev1.EventTypeNormal, "RailRestored",
		fmt.Sprintf("restoring rail %q: every worker's node reports it up again; rank 1's runtime accepted", r1)))
	eventually(t, "healthy again", conditionIs(ns, "steer", nezhav1.ConditionRailsHealthy, metav1.ConditionTrue, "AllRailsUp", ""))
	// The fake runtime shows what the runtime would: the rail back in use on both ranks.
	for _, pod := range []string{"steer-0", "steer-1"} {
		rep, _ := prober.Report(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod}},
			runtimeprober.RuntimeEndpoint, 0)
		st := rep.Rails
		if st[r1] != runtimeprober.StateHealthy {
			t.Errorf("%s: %s is %q after the restore", pod, r1, st[r1])
		}
	}
}

// TestQuarantineDrainsButNeverTheLastRailNorAHumansDrain: an admin's quarantine drains the rail
// from a running job; a refused request is an Event and is retried; the runtime's last working rail
// is never asked to drain; a rail someone else drained is not the operator's to restore.
func TestQuarantineDrainsButNeverTheLastRailNorAHumansDrain(t *testing.T) {
	ns := newNamespace(t)
	n0, n1 := ns+"-n0", ns+"-n1"
	r0, r1 := runningJob(t, ns, "qdr", [2]string{n0, n1}, tu.MakeJob("qdr", ns))
	// r0 was drained by hand on the runtime's endpoint; r1 is the only rail in use.
	prober.setStates(ns, "qdr-0", map[string]string{r0: runtimeprober.StateDrained, r1: runtimeprober.StateHealthy})
	prober.setStates(ns, "qdr-1", map[string]string{r0: runtimeprober.StateDrained, r1: runtimeprober.StateHealthy})
	putRailNode(t, tu.MakeRailNode(n0).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj())
	putRailNode(t, tu.MakeRailNode(n1).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj())
	eventually(t, "healthy", conditionIs(ns, "qdr", nezhav1.ConditionRailsHealthy, metav1.ConditionTrue, "AllRailsUp", ""))

	// Quarantine r1 on n0: it is the runtime's last rail in use, so nothing is asked.
	quarantineByHand(t, n0, r1)
	eventually(t, "quarantine seen", conditionIs(ns, "qdr", nezhav1.ConditionRailsHealthy, metav1.ConditionFalse, "RailDown",
		fmt.Sprintf("rail %q quarantined on node %q", r1, n0)))
	if calls := prober.callsIn(ns); len(calls) != 0 {
		t.Errorf("asked %+v: neither the last rail in use nor a human's drain is the operator's to touch", calls)
	}
	// With r0 back in use (someone restored it), r1 is drained — through rank 0 on n0, and the
	// first answer is a refusal.
	prober.refuseOn(ns, "qdr-0", errors.New("POST http://10.0.0.1:9402/rails/x/drain: 401 Unauthorized"))
	prober.setStates(ns, "qdr-0", bothHealthy(r0, r1))
	prober.setStates(ns, "qdr-1", bothHealthy(r0, r1))
	setPodAnnotation(t, ns, "qdr-0", "test/nudge", "1")
	eventually(t, "refusal event", eventSeen(ns, "qdr", corev1.EventTypeWarning, "RailActionFailed",
		fmt.Sprintf("could not drain rail %q through pod qdr-0 (runtime): POST", r1)))
	if err := drainedRailsAre(ns, "qdr")(); err != nil {
		t.Error("a refused drain recorded as done:", err)
	}
	prober.refuseOn(ns, "qdr-0", nil)
	eventually(t, "drained after the retry", drainedRailsAre(ns, "qdr", fmt.Sprintf("%s node=%s rank=0", r1, n0)))
	calls := prober.callsIn(ns)
	for _, c := range calls {
		if c.rail != r1 || c.action != runtimeprober.Drain || c.pod != "qdr-0" {
			t.Errorf("unexpected call %+v (only drains of %s through qdr-0 were due)", c, r1)
		}
	}
	if len(calls) < 2 {
		t.Errorf("calls %+v: want the refused drain and its retry", calls)
	}
}

// quarantineByHand puts rail into node's RailNode spec.quarantinedRails, as an admin would.
func quarantineByHand(t *testing.T, node, rail string) {
	t.Helper()
	ctx := context.Background()
	rn := &nezhav1.RailNode{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: node}, rn); err != nil {
		t.Fatal(err)
	}
	rn.Spec.QuarantinedRails = append(rn.Spec.QuarantinedRails, rail)
	if err := k8s.Update(ctx, rn); err != nil {
		t.Fatal(err)
	}
}

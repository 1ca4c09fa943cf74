package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	tu "github.com/nezha-project/nezha/operator/internal/testutil"
)

func ago(d time.Duration) *metav1.Time {
	t := metav1.NewTime(t0.Add(-d))
	return &t
}

// TestStaleRailNodeIsNotTrusted: rails on a node whose agent went quiet keep their last known
// state; the ones last seen up are unknown, neither healthy nor down.
func TestStaleRailNodeIsNotTrusted(t *testing.T) {
	f := freshness{now: t0.Time, staleAfter: 90 * time.Second}
	workers := []nezhav1.WorkerStatus{worker(0, "n0", "a", "b"), worker(1, "n1", "a", "b")}
	nodes := map[string]*nezhav1.RailNode{
		"n0": tu.MakeRailNode("n0").ObservedAt(ago(10*time.Second)).Rail("a", "eth1", true).Rail("b", "eth2", true).Obj(),
		// The stale agent last said both rails are up; the previous status had b down on n1.
		"n1": tu.MakeRailNode("n1").ObservedAt(ago(5*time.Minute)).Rail("a", "eth1", true).Rail("b", "eth2", true).Obj(),
	}
	prevDown := map[railPair]bool{{"b", "n1"}: true}
	h := assessRailHealth(workers, []string{"a", "b"}, nodes, nil, prevDown, f)

	wantDown := map[railPair]string{
		{"b", "n1"}: `rail "b" last reported down on node "n1"; rail agent on node "n1" last reported 5m0s ago (stale after 1m30s)`,
	}
	if d := cmp.Diff(wantDown, h.down, cmp.AllowUnexported(railPair{})); d != "" {
		t.Errorf("down (-want +got):\n%s", d)
	}
	if !cmp.Equal(h.unknownRails, []string{"a"}) || !cmp.Equal(h.downRails, []string{"b"}) || h.healthy != 0 || h.notDown() != 1 {
		t.Errorf("unknown %v down %v healthy %d", h.unknownRails, h.downRails, h.healthy)
	}
	if len(h.stale) != 1 || !strings.Contains(h.stale[0], `node "n1"`) {
		t.Errorf("stale %v", h.stale)
	}
	if !workers[1].Rails[0].Healthy || workers[1].Rails[1].Healthy {
		t.Errorf("n1 entries should keep their last known state: %+v", workers[1].Rails)
	}
	// n0 turns stale 81 s from now, sooner than the 90 s recheck of the stale n1.
	if h.recheck != 81*time.Second {
		t.Errorf("recheck %v", h.recheck)
	}
	// Nothing was lost or recovered on a stale agent's word.
	if recs := failoverRecords(prevDown, h.down, map[string]bool{"n0": true, "n1": true}, t0); len(recs) != 0 {
		t.Errorf("records %+v", recs)
	}
}

func TestStaleRailNodeCondition(t *testing.T) {
	f := freshness{now: t0.Time, staleAfter: 90 * time.Second}
	workers := []nezhav1.WorkerStatus{worker(0, "n0", "a")}
	nodes := map[string]*nezhav1.RailNode{"n0": tu.MakeRailNode("n0").ObservedAt(nil).Rail("a", "eth1", true).Obj()}
	h := assessRailHealth(workers, []string{"a"}, nodes, nil, nil, f)
	st := newStatus()
	setRailsHealthy(h, st)
	c := meta.FindStatusCondition(st.status.Conditions, nezhav1.ConditionRailsHealthy)
	if c.Status != metav1.ConditionUnknown || c.Reason != nezhav1.ReasonAgentStale ||
		c.Message != `rail health unknown: rail agent on node "n0" never stamped status.observedTime` {
		t.Errorf("condition %+v", c)
	}
	if len(st.events) != 1 || st.events[0].reason != nezhav1.ReasonAgentStale || st.events[0].eventType != warning {
		t.Errorf("events %+v", st.events)
	}
	// Unknown rails do not degrade the job.
	job := tu.MakeJob("j", "ns", "a").Obj()
	if applyRailLossPolicy(job, h, st) || st.isTrue(nezhav1.ConditionDegraded) {
		t.Errorf("degraded on a stale agent: %+v", st.status.Conditions)
	}
}

func TestStaleRailNodeKeepsQuarantine(t *testing.T) {
	f := freshness{now: t0.Time, staleAfter: time.Minute}
	rn := tu.MakeRailNode("n0").ObservedAt(ago(time.Hour)).Rail("a", "eth1", true).Obj()
	rn.Spec.QuarantinedRails = []string{"a"}
	h := assessRailHealth([]nezhav1.WorkerStatus{worker(0, "n0", "a")}, []string{"a"}, map[string]*nezhav1.RailNode{"n0": rn}, nil, nil, f)
	if h.down[railPair{"a", "n0"}] != `rail "a" quarantined on node "n0"` {
		t.Errorf("down %v", h.down)
	}
}

func TestStalenessDisabled(t *testing.T) {
	f := freshness{now: t0.Time}
	rn := tu.MakeRailNode("n0").ObservedAt(nil).Rail("a", "eth1", true).Obj()
	h := assessRailHealth([]nezhav1.WorkerStatus{worker(0, "n0", "a")}, []string{"a"}, map[string]*nezhav1.RailNode{"n0": rn}, nil, nil, f)
	if h.healthy != 1 || len(h.stale) != 0 || h.recheck != 0 {
		t.Errorf("healthy %d stale %v recheck %v", h.healthy, h.stale, h.recheck)
	}
}

func TestEarliest(t *testing.T) {
	for _, c := range []struct{ a, b, want time.Duration }{{0, 0, 0}, {0, 5, 5}, {5, 0, 5}, {3, 5, 3}, {5, 3, 3}} {
		if got := earliest(c.a, c.b); got != c.want {
			t.Errorf("earliest(%v, %v) = %v", c.a, c.b, got)
		}
	}
}

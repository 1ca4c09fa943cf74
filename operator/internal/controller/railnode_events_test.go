package controller

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	tu "github.com/nezha-project/nezha/operator/internal/testutil"
)

// TestRailNodeHeartbeatsDoNotWakeJobs: an agent's periodic rewrite (new observedTime, counters)
// is dropped; a health change, a quarantine or an agent back from silence passes.
func TestRailNodeHeartbeatsDoNotWakeJobs(t *testing.T) {
	p := railNodeMatters(90*time.Second, clocktesting.NewFakePassiveClock(t0.Time))
	base := func(observed time.Duration, up bool) *nezhav1.RailNode {
		return tu.MakeRailNode("n0").ObservedAt(ago(observed)).Rail("a", "eth1", true).Rail("b", "eth2", up).Obj()
	}
	heartbeat := base(0, true)
	heartbeat.Status.Rails[0].RxErrors = 7
	quarantined := base(0, true)
	quarantined.Spec.QuarantinedRails = []string{"b"}
	cases := []struct {
		name     string
		old, cur *nezhav1.RailNode
		want     bool
	}{
		{"heartbeat", base(30*time.Second, true), heartbeat, false},
		{"rail down", base(30*time.Second, true), base(0, false), true},
		{"quarantine", base(30*time.Second, true), quarantined, true},
		{"agent back after silence", base(2*time.Minute, true), base(0, true), true},
		{"stamp moved back", base(10*time.Second, true), base(80*time.Second, true), true},
	}
	for _, c := range cases {
		if got := p.Update(ctrlevent.UpdateEvent{ObjectOld: c.old, ObjectNew: c.cur}); got != c.want {
			t.Errorf("%s: got %t want %t", c.name, got, c.want)
		}
	}
}

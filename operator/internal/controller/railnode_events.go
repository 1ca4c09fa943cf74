package controller

import (
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// railNodeMatters filters RailNode updates down to the ones a job can see: a rail's health or
// its description (interface, operState, carrier, message), a quarantine, or an agent coming back
// after it went stale. The agents' heartbeats (observedTime, counters every 30 s on every node:
// ~17 writes/s on 500 nodes) are dropped, so a big job is not reconciled for each; the staleness
// of the heartbeat itself is watched by the job's recheck timer (railnode_staleness.go).
func railNodeMatters(staleAfter time.Duration, clk clock.PassiveClock) predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e ctrlevent.UpdateEvent) bool {
			old, okOld := e.ObjectOld.(*nezhav1.RailNode)
			cur, okNew := e.ObjectNew.(*nezhav1.RailNode)
			if !okOld || !okNew {
				return true
			}
			if !slices.Equal(old.Spec.QuarantinedRails, cur.Spec.QuarantinedRails) || !sameRailHealth(old, cur) {
				return true
			}
			// The agent's next write after a silence brings its rails back from unknown; a stamp that
			// did not move forward can make the node stale sooner than the job's recheck expects.
			f := freshness{now: clk.Now(), staleAfter: staleAfter}
			return f.stale(old) || f.stale(cur) || !stampAdvanced(old.Status.ObservedTime, cur.Status.ObservedTime)
		},
	}
}

// stampAdvanced is true when the agent's observedTime moved forward (a heartbeat).
func stampAdvanced(old, cur *metav1.Time) bool {
	return old != nil && cur != nil && cur.After(old.Time)
}

// sameRailHealth compares what a job reads from a RailNode's rails, ignoring times and counters.
func sameRailHealth(a, b *nezhav1.RailNode) bool {
	key := func(s nezhav1.RailInterfaceStatus) nezhav1.RailInterfaceStatus {
		return nezhav1.RailInterfaceStatus{Name: s.Name, Interface: s.Interface, OperState: s.OperState, Carrier: s.Carrier, Message: s.Message}
	}
	return slices.EqualFunc(a.Status.Rails, b.Status.Rails, func(x, y nezhav1.RailInterfaceStatus) bool { return key(x) == key(y) })
}

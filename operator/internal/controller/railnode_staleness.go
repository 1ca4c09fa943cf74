package controller

import (
	"fmt"
	"time"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// A RailNode is only as good as the agent that writes it: the agent refreshes status.observedTime
// on every resync (NEZHA_AGENT_RESYNC_PERIOD, 30 s), so an old stamp means the agent died or lost
// the API server and its last word about the links may be long wrong. How old is too old is the
// configuration's railNodes.staleAfter (MultiRailJobReconciler.RailNodeStaleAfter).

// freshness judges RailNodes against the time of one reconcile.
type freshness struct {
	now time.Time
	// staleAfter is the threshold; zero disables the check (every RailNode is trusted).
	staleAfter time.Duration
}

// stale reports whether rn's agent stopped reporting. A RailNode with rails but no observedTime
// was not written by an agent that heartbeats, so its age cannot be known: it is stale too.
func (f freshness) stale(rn *nezhav1.RailNode) bool {
	if f.staleAfter <= 0 {
		return false
	}
	t := rn.Status.ObservedTime
	return t == nil || f.now.Sub(t.Time) > f.staleAfter
}

// describe says why rn is stale, for conditions and Events.
func (f freshness) describe(rn *nezhav1.RailNode) string {
	if rn.Status.ObservedTime == nil {
		return fmt.Sprintf("rail agent on node %q never stamped status.observedTime", rn.Name)
	}
	age := f.now.Sub(rn.Status.ObservedTime.Time).Truncate(time.Second)
	return fmt.Sprintf("rail agent on node %q last reported %s ago (stale after %s)", rn.Name, age, f.staleAfter)
}

// recheckAfter is how long until the state of these nodes can change without a watch event: the
// first fresh node turning stale. Stale nodes are rechecked every staleAfter as well, although the
// agent's next write of the RailNode also wakes the job. Zero means no recheck is needed.
func (f freshness) recheckAfter(nodes []*nezhav1.RailNode) time.Duration {
	if f.staleAfter <= 0 {
		return 0
	}
	var next time.Duration
	for _, rn := range nodes {
		d := f.staleAfter
		if !f.stale(rn) {
			// One second past the threshold, so the recheck surely finds the node stale.
			d = rn.Status.ObservedTime.Add(f.staleAfter + time.Second).Sub(f.now)
		}
		if next == 0 || d < next {
			next = d
		}
	}
	return next
}

// earliest merges two requeue delays where zero means "none".
func earliest(a, b time.Duration) time.Duration {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

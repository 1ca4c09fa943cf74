package controller

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// railPair is one rail on one node: the unit in which rails fail.
type railPair struct{ rail, node string }

// railHealth summarises the job's rails over the nodes its workers run on.
type railHealth struct {
	// down explains every (rail, node) pair that is down under some worker.
	down map[railPair]string
	// downRails are the rails down on at least one worker's node, in spec order.
	downRails []string
	// healthy counts rails up on every worker's node.
	healthy int32
	// unreported lists "rail on node" pairs no RailNode speaks about (no agent there yet).
	unreported []string
	// unknownRails are rails not down anywhere but up only on the word of a stale agent somewhere,
	// in spec order; they are counted neither in healthy nor in downRails.
	unknownRails []string
	// stale describes the stale RailNodes under the workers, sorted.
	stale []string
	// recheck is when a RailNode under the workers can turn stale (0: never).
	recheck time.Duration
	// placed is true when at least one worker has a node.
	placed bool
	// agentDown is the node agents' own word (fresh RailNodes, or a quarantine in a RailNode's
	// spec): the (rail, node) pairs down, in the words of describeDown. What the operator drains
	// through the runtime's control endpoint (rail_steering.go).
	agentDown map[railPair]string
	// agentUnconfirmed are rails some worker's node does not confirm up: a stale or missing
	// RailNode, or no entry for the rail. A drained rail is restored only when confirmed up.
	agentUnconfirmed map[string]bool
	// runtimeOnly are the (rail, node) pairs down only because a worker's runtime failed the rail
	// while the node does not report it down (on several nodes, the peers of a node that lost a
	// link fail the rail too): the workers' reasons say so instead of blaming the node.
	runtimeOnly map[railPair]bool
}

// agentSaysUp is true when every worker's node has a fresh RailNode reporting rail up.
func (h railHealth) agentSaysUp(rail string) bool {
	if !h.placed || h.agentUnconfirmed[rail] {
		return false
	}
	for p := range h.agentDown {
		if p.rail == rail {
			return false
		}
	}
	return true
}

// agentDownOn reports whether node's agent reports rail down (or its RailNode quarantines it),
// and why.
func (h railHealth) agentDownOn(rail, node string) (reason string, down bool) {
	reason, down = h.agentDown[railPair{rail: rail, node: node}]
	return reason, down
}

// notDown counts the rails not known to be down: what the failure policy weighs, since a silent
// agent is no evidence of a lost rail.
func (h railHealth) notDown() int32 { return h.healthy + int32(len(h.unknownRails)) }

// assessRailHealth sets Healthy on every worker's rail entries from the RailNodes of their nodes
// and from what the workers' runtimes report (runtimeFailed: rank → failed rails), and sums up.
// A rail nobody reports on counts as healthy: no evidence of failure is not a failure, but it is
// listed in unreported so RailsHealthy says Unknown rather than True.
// A RailNode whose agent went stale (f) is not believed: its rails keep their last known state
// (prevDown, the pairs the previous status recorded as down) so nothing is lost or recovered on
// hearsay, and the rails it called up are unknown rather than healthy. Quarantine is spec, not
// agent report, and holds either way.
func assessRailHealth(workers []nezhav1.WorkerStatus, railNames []string, nodes map[string]*nezhav1.RailNode,
	runtimeFailed map[int32][]string, prevDown map[railPair]bool, f freshness) railHealth {
	h := railHealth{down: map[railPair]string{}, agentDown: map[railPair]string{}, agentUnconfirmed: map[string]bool{},
		runtimeOnly: map[railPair]bool{}}
	unreported := map[string]bool{}
	unknown := map[railPair]bool{}
	stale := map[string]string{}
	judged := map[string]*nezhav1.RailNode{}
	for wi := range workers {
		w := &workers[wi]
		if w.NodeName == "" {
			continue
		}
		h.placed = true
		rn := nodes[w.NodeName]
		rnStale := rn != nil && f.stale(rn)
		if rn != nil {
			judged[rn.Name] = rn
			if rnStale {
				stale[rn.Name] = f.describe(rn)
			}
		}
		for ri := range w.Rails {
			rs := &w.Rails[ri]
			pair := railPair{rs.Name, w.NodeName}
			rs.Healthy = true
			switch {
			case rnStale && slices.Contains(rn.Spec.QuarantinedRails, rs.Name):
				rs.Healthy = false
				h.down[pair] = describeDown(rn, rs.Name)
				h.agentDown[pair] = h.down[pair]
			case rnStale && prevDown[pair]:
				rs.Healthy = false
				h.down[pair] = fmt.Sprintf("rail %q last reported down on node %q; %s", rs.Name, w.NodeName, stale[rn.Name])
				h.agentUnconfirmed[rs.Name] = true
			case rnStale:
				unknown[pair] = true
				h.agentUnconfirmed[rs.Name] = true
			case rn != nil:
				if ok, found := rn.RailHealthy(rs.Name); !found {
					unreported[fmt.Sprintf("%q on node %q", rs.Name, w.NodeName)] = true
					h.agentUnconfirmed[rs.Name] = true
				} else if !ok {
					rs.Healthy = false
					h.down[pair] = describeDown(rn, rs.Name)
					h.agentDown[pair] = h.down[pair]
				}
			default:
				unreported[fmt.Sprintf("%q on node %q", rs.Name, w.NodeName)] = true
				h.agentUnconfirmed[rs.Name] = true
			}
			for _, failed := range runtimeFailed[w.Rank] {
				if failed == rs.Name {
					rs.Healthy = false
					if _, known := h.down[pair]; !known {
						h.down[pair] = fmt.Sprintf("rail %q failed in the runtime of worker %d on node %q", rs.Name, w.Rank, w.NodeName)
						h.runtimeOnly[pair] = true
					}
				}
			}
		}
	}
	downSet, unknownSet := map[string]bool{}, map[string]bool{}
	for p := range h.down {
		downSet[p.rail] = true
	}
	for p := range unknown {
		unknownSet[p.rail] = true
	}
	for _, name := range railNames {
		switch {
		case downSet[name]:
			h.downRails = append(h.downRails, name)
		case unknownSet[name]:
			h.unknownRails = append(h.unknownRails, name)
		default:
			h.healthy++
		}
	}
	for u := range unreported {
		h.unreported = append(h.unreported, u)
	}
	sort.Strings(h.unreported)
	for _, msg := range stale {
		h.stale = append(h.stale, msg)
	}
	sort.Strings(h.stale)
	h.recheck = f.recheckAfter(slices.Collect(maps.Values(judged)))
	return h
}

func describeDown(rn *nezhav1.RailNode, rail string) string {
	for _, q := range rn.Spec.QuarantinedRails {
		if q == rail {
			return fmt.Sprintf("rail %q quarantined on node %q", rail, rn.Name)
		}
	}
	for _, s := range rn.Status.Rails {
		if s.Name == rail {
			msg := fmt.Sprintf("rail %q down on node %q: interface %q operState=%s carrier=%t", rail, rn.Name, s.Interface, s.OperState, s.Carrier)
			if s.Message != "" {
				msg += " (" + s.Message + ")"
			}
			return msg
		}
	}
	return fmt.Sprintf("rail %q down on node %q", rail, rn.Name)
}

// failoverRecords turns the change between the previous and current down pairs into history
// entries, in a stable order. A pair that disappears because its workers left the node is not a
// recovery: only nodes that still run workers (stillPlaced) can recover.
func failoverRecords(prev map[railPair]bool, now map[railPair]string, stillPlaced map[string]bool, t metav1.Time) []nezhav1.FailoverRecord {
	var recs []nezhav1.FailoverRecord
	for p, msg := range now {
		if !prev[p] {
			recs = append(recs, nezhav1.FailoverRecord{Time: t, Action: nezhav1.FailoverRailLost, Rail: p.rail, Node: p.node, Message: msg})
		}
	}
	for p := range prev {
		if _, still := now[p]; !still && stillPlaced[p.node] {
			recs = append(recs, nezhav1.FailoverRecord{Time: t, Action: nezhav1.FailoverRailRecovered, Rail: p.rail, Node: p.node,
				Message: fmt.Sprintf("rail %q up again on node %q", p.rail, p.node)})
		}
	}
	sort.Slice(recs, func(i, j int) bool {
		a, b := recs[i], recs[j]
		if a.Action != b.Action {
			return a.Action < b.Action
		}
		if a.Rail != b.Rail {
			return a.Rail < b.Rail
		}
		return a.Node < b.Node
	})
	return recs
}

// appendHistory appends records and keeps the newest MaxFailoverHistory.
func appendHistory(hist, recs []nezhav1.FailoverRecord) []nezhav1.FailoverRecord {
	hist = append(hist, recs...)
	if n := len(hist) - nezhav1.MaxFailoverHistory; n > 0 {
		hist = append([]nezhav1.FailoverRecord(nil), hist[n:]...)
	}
	return hist
}

// setRailsHealthy writes the RailsHealthy condition.
func setRailsHealthy(h railHealth, st *statusUpdate) {
	switch {
	case !h.placed:
		st.setCondition(nezhav1.ConditionRailsHealthy, metav1.ConditionUnknown, nezhav1.ReasonWaitingForWorkers, "no worker is scheduled yet", "")
	case len(h.down) > 0:
		msgs := make([]string, 0, len(h.down))
		for _, m := range h.down {
			msgs = append(msgs, m)
		}
		sort.Strings(msgs)
		st.setCondition(nezhav1.ConditionRailsHealthy, metav1.ConditionFalse, nezhav1.ReasonRailDown, joinBounded(msgs, 5), warning)
	case len(h.stale) > 0:
		st.setCondition(nezhav1.ConditionRailsHealthy, metav1.ConditionUnknown, nezhav1.ReasonAgentStale,
			"rail health unknown: "+joinBounded(h.stale, 5), warning)
	case len(h.unreported) > 0:
		st.setCondition(nezhav1.ConditionRailsHealthy, metav1.ConditionUnknown, nezhav1.ReasonRailNodeNotReported,
			"no RailNode report for rail "+joinBounded(h.unreported, 5), "")
	default:
		st.setCondition(nezhav1.ConditionRailsHealthy, metav1.ConditionTrue, nezhav1.ReasonAllRailsUp,
			fmt.Sprintf("all %d rails up on every worker's node", h.healthy), normal)
	}
}

// joinBounded keeps condition messages short on big jobs.
func joinBounded(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, "; ")
	}
	return strings.Join(items[:n], "; ") + fmt.Sprintf("; and %d more", len(items)-n)
}

// Package quarantine is quarantine by evidence: a rail that fails Failures times within Window on
// one node is put into that RailNode's spec.quarantinedRails by the operator, so new jobs keep off the node
// (nodesToAvoid) and running jobs drain the rail (rail_steering.go); it is released once it has
// been healthy and failure-free for ReleaseAfter, or when an admin removes it from the spec.
// The controller (internal/controller/railnode_quarantine.go) reads and writes RailNodes; this
// package only judges, on explicit times, so it is tested and fuzzed without an API server.
//
// Evidence is the agent's own report: each healthy→unhealthy change of a rail, stamped with the
// agent's status.rails[].lastTransitionTime (so the operator counts each failure once however
// often it reconciles, and an operator restart loses nothing: the evidence lives in the RailNode's
// annotation nezha.io/rail-evidence). Flaps faster than the agent's coalescing window (200 ms by
// default) count as one, and timestamps are whole seconds (the API's time format): two failures
// within the same second count as one.
package quarantine

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// EvidenceAnnotation holds the operator's per-rail failure evidence on a RailNode (JSON).
const EvidenceAnnotation = "nezha.io/rail-evidence"

// Policy is when a rail is quarantined and released. Failures == 0 disables it.
type Policy struct {
	Failures     int
	Window       time.Duration
	ReleaseAfter time.Duration
}

// Chart and flag defaults.
const (
	DefaultFailures     = 3
	DefaultWindow       = 10 * time.Minute
	DefaultReleaseAfter = 30 * time.Minute
)

// Event reasons (on the RailNode).
const (
	ReasonQuarantined = "RailQuarantined"
	ReasonReleased    = "RailReleased"
)

// maxEvidencePerRail bounds the annotation: more failures than this within a window change nothing.
const maxEvidencePerRail = 32

// Evidence is one rail's record in the annotation.
type Evidence struct {
	// Failures are the agent's lastTransitionTimes of the rail's failures within the window.
	Failures []metav1.Time `json:"failures,omitempty"`
	// LastFailure is the latest failure, kept after it leaves the window: a quarantined rail is
	// released only ReleaseAfter after it.
	LastFailure *metav1.Time `json:"lastFailure,omitempty"`
	// QuarantinedAt is set while the operator (not an admin) holds the rail in quarantine.
	QuarantinedAt *metav1.Time `json:"quarantinedAt,omitempty"`
}

// Parse reads the annotation; a missing one is empty evidence.
func Parse(rn *nezhav1.RailNode) (map[string]*Evidence, error) {
	ev := map[string]*Evidence{}
	raw, ok := rn.Annotations[EvidenceAnnotation]
	if !ok || raw == "" {
		return ev, nil
	}
	if err := json.Unmarshal([]byte(raw), &ev); err != nil {
		return map[string]*Evidence{}, fmt.Errorf("annotation %s: %w", EvidenceAnnotation, err)
	}
	for rail, e := range ev {
		if e == nil {
			return map[string]*Evidence{}, fmt.Errorf("annotation %s: rail %q: null record", EvidenceAnnotation, rail)
		}
	}
	return ev, nil
}

// Action is one change Judge decided on, with its Event (reason and message).
type Action struct {
	Rail, Reason, Message string
}

// Judge updates the evidence from rn's status at now and decides what to quarantine and release.
// It edits rn.Spec.QuarantinedRails in place and returns the actions taken and when to look
// again (0: only on the next change).
func (p Policy) Judge(rn *nezhav1.RailNode, ev map[string]*Evidence, now time.Time) ([]Action, time.Duration) {
	var acts []Action
	var recheck time.Duration
	status := map[string]*nezhav1.RailInterfaceStatus{}
	for i := range rn.Status.Rails {
		status[rn.Status.Rails[i].Name] = &rn.Status.Rails[i]
	}
	for rail, s := range status {
		if s.Healthy() || s.LastTransitionTime == nil {
			continue
		}
		e := ev[rail]
		if e == nil {
			e = &Evidence{}
			ev[rail] = e
		}
		if e.LastFailure == nil || s.LastTransitionTime.After(e.LastFailure.Time) {
			e.Failures = append(e.Failures, *s.LastTransitionTime)
			last := *s.LastTransitionTime
			e.LastFailure = &last
		}
	}
	rails := make([]string, 0, len(ev))
	for rail := range ev {
		rails = append(rails, rail)
	}
	sort.Strings(rails)
	for _, rail := range rails {
		e := ev[rail]
		e.Failures = slices.DeleteFunc(e.Failures, func(t metav1.Time) bool { return now.Sub(t.Time) > p.Window })
		if len(e.Failures) > maxEvidencePerRail {
			e.Failures = e.Failures[len(e.Failures)-maxEvidencePerRail:]
		}
		inSpec := slices.Contains(rn.Spec.QuarantinedRails, rail)
		switch {
		case e.QuarantinedAt != nil && !inSpec:
			// An admin released it: start afresh, or old failures would quarantine it again at once
			// (only the last failure's time stays, so the report in hand is not counted anew).
			ev[rail] = &Evidence{LastFailure: e.LastFailure}
			acts = append(acts, Action{rail, ReasonReleased, fmt.Sprintf(
				"rail %q on node %q released from quarantine by an administrator; its failure record is cleared", rail, rn.Name)})
			continue
		case e.QuarantinedAt == nil && !inSpec && len(e.Failures) >= p.Failures:
			rn.Spec.QuarantinedRails = append(rn.Spec.QuarantinedRails, rail)
			t := metav1.NewTime(now)
			e.QuarantinedAt = &t
			acts = append(acts, Action{rail, ReasonQuarantined, fmt.Sprintf(
				"rail %q on node %q failed %d times within %s (last at %s): quarantined; new jobs avoid the node, running jobs drain the rail; released after %s healthy without failure, or by removing it from spec.quarantinedRails",
				rail, rn.Name, len(e.Failures), p.Window, e.Failures[len(e.Failures)-1].UTC().Format(time.RFC3339), p.ReleaseAfter)})
		}
		if e.QuarantinedAt != nil {
			stableSince := e.QuarantinedAt.Time
			if e.LastFailure != nil && e.LastFailure.After(stableSince) {
				stableSince = e.LastFailure.Time
			}
			s := status[rail]
			healthy := s != nil && s.Healthy()
			if wait := stableSince.Add(p.ReleaseAfter).Sub(now); healthy && wait <= 0 {
				rn.Spec.QuarantinedRails = slices.DeleteFunc(rn.Spec.QuarantinedRails, func(r string) bool { return r == rail })
				delete(ev, rail)
				acts = append(acts, Action{rail, ReasonReleased, fmt.Sprintf(
					"rail %q on node %q released from quarantine: healthy without failure for %s", rail, rn.Name, p.ReleaseAfter)})
				continue
			} else if healthy {
				recheck = earliest(recheck, wait)
			}
		}
		if e.QuarantinedAt == nil && len(e.Failures) == 0 {
			// Nothing left in the window. The rail's last report may still be that old failure:
			// remember it (without the record) so it is not counted again.
			if s := status[rail]; s != nil && !s.Healthy() {
				e.LastFailure = s.LastTransitionTime
				continue
			}
			delete(ev, rail)
			continue
		}
		if e.QuarantinedAt == nil {
			// The oldest failure leaving the window changes nothing by itself, but keeps the
			// annotation short; look again then.
			recheck = earliest(recheck, e.Failures[0].Add(p.Window+time.Second).Sub(now))
		}
	}
	return acts, recheck
}

// Encode writes ev back into rn's annotations (removing the annotation when empty).
func Encode(rn *nezhav1.RailNode, ev map[string]*Evidence) error {
	if len(ev) == 0 {
		delete(rn.Annotations, EvidenceAnnotation)
		return nil
	}
	raw, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if rn.Annotations == nil {
		rn.Annotations = map[string]string{}
	}
	rn.Annotations[EvidenceAnnotation] = string(raw)
	return nil
}

// earliest is the sooner of two waits, 0 meaning none.
func earliest(a, b time.Duration) time.Duration {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

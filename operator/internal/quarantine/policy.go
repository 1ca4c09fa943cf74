package quarantine

import (
	"fmt"
	"slices"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// Policy is when a rail is quarantined and released. Failures == 0 disables it.
type Policy struct {
	Failures     int
	Window       time.Duration
	ReleaseAfter time.Duration
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
			acts = append(acts, Action{rail, nezhav1.ReasonRailReleased, fmt.Sprintf(
				"rail %q on node %q released from quarantine by an administrator; its failure record is cleared", rail, rn.Name)})
			continue
		case e.QuarantinedAt == nil && !inSpec && len(e.Failures) >= p.Failures:
			rn.Spec.QuarantinedRails = append(rn.Spec.QuarantinedRails, rail)
			t := metav1.NewTime(now)
			e.QuarantinedAt = &t
			acts = append(acts, Action{rail, nezhav1.ReasonRailQuarantined, fmt.Sprintf(
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
				acts = append(acts, Action{rail, nezhav1.ReasonRailReleased, fmt.Sprintf(
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

// earliest is the sooner of two waits, 0 meaning none.
func earliest(a, b time.Duration) time.Duration {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

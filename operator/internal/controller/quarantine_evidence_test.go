package controller

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// railAt sets rail's reported state with the agent's transition time.
func railAt(rn *nezhav1.RailNode, rail string, up bool, at time.Time) {
	t := metav1.NewTime(at)
	s := nezhav1.RailInterfaceStatus{Name: rail, Interface: "eth1", OperState: nezhav1.LinkDown, LastTransitionTime: &t}
	if up {
		s.OperState, s.Carrier = nezhav1.LinkUp, true
	}
	for i := range rn.Status.Rails {
		if rn.Status.Rails[i].Name == rail {
			rn.Status.Rails[i] = s
			return
		}
	}
	rn.Status.Rails = append(rn.Status.Rails, s)
}

// TestJudgeCountsEachFailureOnceQuarantinesAtKAndReleasesWhenStable walks one rail through flaps,
// quarantine, a flap during quarantine (which extends it) and release, on explicit times.
func TestJudgeCountsEachFailureOnceQuarantinesAtKAndReleasesWhenStable(t *testing.T) {
	p := QuarantinePolicy{Failures: 3, Window: 10 * time.Minute, ReleaseAfter: 30 * time.Minute}
	rn := &nezhav1.RailNode{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	ev := map[string]*railEvidence{}
	t0 := time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)
	step := func(at time.Time, up bool) []quarantineAction {
		railAt(rn, "r1", up, at)
		acts, _ := p.judge(rn, ev, at.Add(time.Second))
		// Judging again with nothing new changes nothing: each failure counts once.
		again, _ := p.judge(rn, ev, at.Add(2*time.Second))
		if len(again) != 0 {
			t.Fatalf("second judgement of the same report acted: %+v", again)
		}
		return acts
	}
	step(t0, false)
	step(t0.Add(time.Minute), true)
	step(t0.Add(2*time.Minute), false)
	step(t0.Add(3*time.Minute), true)
	if len(rn.Spec.QuarantinedRails) != 0 || len(ev["r1"].Failures) != 2 {
		t.Fatalf("after two failures: spec %v evidence %+v", rn.Spec.QuarantinedRails, ev["r1"])
	}
	acts := step(t0.Add(4*time.Minute), false)
	if len(acts) != 1 || acts[0].reason != ReasonRailQuarantined || !strings.Contains(acts[0].message, "failed 3 times within 10m0s") {
		t.Fatalf("third failure: %+v", acts)
	}
	if len(rn.Spec.QuarantinedRails) != 1 || rn.Spec.QuarantinedRails[0] != "r1" {
		t.Fatalf("spec %v", rn.Spec.QuarantinedRails)
	}
	// Healthy again, but a failure 20 minutes into the quarantine restarts the stable period.
	step(t0.Add(5*time.Minute), true)
	step(t0.Add(25*time.Minute), false)
	step(t0.Add(26*time.Minute), true)
	if acts, recheck := p.judge(rn, ev, t0.Add(50*time.Minute)); len(acts) != 0 || recheck != 5*time.Minute {
		t.Fatalf("25 min after the last failure: acts %+v recheck %s, want none and 5m", acts, recheck)
	}
	acts, _ = p.judge(rn, ev, t0.Add(56*time.Minute))
	if len(acts) != 1 || acts[0].reason != ReasonRailReleased || len(rn.Spec.QuarantinedRails) != 0 || ev["r1"] != nil {
		t.Fatalf("release: acts %+v spec %v evidence %+v", acts, rn.Spec.QuarantinedRails, ev["r1"])
	}
}

// TestJudgeLeavesAdminQuarantineAloneAndForgetsOnAdminRelease: a rail an admin quarantined is
// never released by the operator; one the operator quarantined and an admin released starts
// with a clean record; failures older than the window do not count.
func TestJudgeLeavesAdminQuarantineAloneAndForgetsOnAdminRelease(t *testing.T) {
	p := QuarantinePolicy{Failures: 2, Window: 10 * time.Minute, ReleaseAfter: time.Minute}
	t0 := time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)
	rn := &nezhav1.RailNode{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: nezhav1.RailNodeSpec{QuarantinedRails: []string{"admin"}}}
	railAt(rn, "admin", true, t0)
	ev := map[string]*railEvidence{}
	if acts, _ := p.judge(rn, ev, t0.Add(time.Hour)); len(acts) != 0 || len(rn.Spec.QuarantinedRails) != 1 {
		t.Fatalf("admin quarantine touched: %+v %v", acts, rn.Spec.QuarantinedRails)
	}
	// Two failures 15 minutes apart: never two within the window.
	railAt(rn, "r1", false, t0)
	p.judge(rn, ev, t0)
	railAt(rn, "r1", false, t0.Add(15*time.Minute))
	if acts, _ := p.judge(rn, ev, t0.Add(15*time.Minute)); len(acts) != 0 {
		t.Fatalf("failures outside the window quarantined: %+v", acts)
	}
	railAt(rn, "r1", false, t0.Add(16*time.Minute))
	if acts, _ := p.judge(rn, ev, t0.Add(16*time.Minute)); len(acts) != 1 || acts[0].reason != ReasonRailQuarantined {
		t.Fatalf("two failures within the window: %+v", acts)
	}
	rn.Spec.QuarantinedRails = []string{"admin"} // the admin lifts the operator's quarantine
	acts, _ := p.judge(rn, ev, t0.Add(17*time.Minute))
	if len(acts) != 1 || acts[0].reason != ReasonRailReleased || !strings.Contains(acts[0].message, "administrator") {
		t.Fatalf("admin release: %+v", acts)
	}
	if e := ev["r1"]; e != nil && (e.QuarantinedAt != nil || len(e.Failures) > 1) {
		t.Fatalf("record after admin release: %+v", e)
	}
}

// TestEvidenceAnnotationRoundTripsAndBadOnesAreNamed: the record survives an operator restart
// (it is in the annotation) and a hand-edited annotation is an error naming it.
func TestEvidenceAnnotationRoundTripsAndBadOnesAreNamed(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC))
	rn := &nezhav1.RailNode{}
	if err := encodeEvidence(rn, map[string]*railEvidence{"r1": {Failures: []metav1.Time{at}, QuarantinedAt: &at}}); err != nil {
		t.Fatal(err)
	}
	ev, err := parseEvidence(rn)
	if err != nil || len(ev["r1"].Failures) != 1 || !ev["r1"].QuarantinedAt.Equal(&at) {
		t.Fatalf("round trip: %+v %v", ev, err)
	}
	for _, bad := range []string{`{`, `{"r1": null}`, `{"r1": {"failures": ["yesterday"]}}`, `[]`} {
		rn.Annotations[RailEvidenceAnnotation] = bad
		if _, err := parseEvidence(rn); err == nil || !strings.Contains(err.Error(), RailEvidenceAnnotation) {
			t.Errorf("%s: error %v, want one naming the annotation", bad, err)
		}
	}
	if err := encodeEvidence(rn, map[string]*railEvidence{}); err != nil || rn.Annotations[RailEvidenceAnnotation] != "" {
		t.Errorf("empty evidence left the annotation: %v", rn.Annotations)
	}
}

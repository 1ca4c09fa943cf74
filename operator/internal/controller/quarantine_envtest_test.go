package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/quarantine"
	tu "github.com/nezha-project/nezha/operator/internal/testutil"
)

// Quarantine by evidence (internal/quarantine) end to end in the suite's API server: its
// Reconciler runs next to the job controller here (suite_test.go), so these tests also see a
// quarantine keep a new job's workers off the node. Its rules are unit-tested in
// internal/quarantine/policy_test.go.

// reportRail writes the agent's view of one rail with its transition time.
func reportRail(t *testing.T, node, rail string, up bool, at time.Time) {
	t.Helper()
	rn := tu.MakeRailNode(node).Rail(rail, "eth1", up).Obj()
	lt := metav1.NewTime(at)
	rn.Status.Rails[0].LastTransitionTime = &lt
	putRailNode(t, rn)
}

func getRailNode(node string) (*nezhav1.RailNode, error) {
	rn := &nezhav1.RailNode{}
	return rn, k8s.Get(context.Background(), client.ObjectKey{Name: node}, rn)
}

func failuresRecorded(node, rail string, n int) func() error {
	return func() error {
		rn, err := getRailNode(node)
		if err != nil {
			return err
		}
		var ev map[string]struct {
			Failures []metav1.Time `json:"failures"`
		}
		if raw := rn.Annotations[quarantine.EvidenceAnnotation]; raw != "" {
			if err := json.Unmarshal([]byte(raw), &ev); err != nil {
				return err
			}
		}
		if got := len(ev[rail].Failures); got != n {
			return fmt.Errorf("%d failures recorded, want %d (annotation %q)", got, n, rn.Annotations[quarantine.EvidenceAnnotation])
		}
		return nil
	}
}

func quarantinedIs(node, rail string, want bool) func() error {
	return func() error {
		rn, err := getRailNode(node)
		if err != nil {
			return err
		}
		if got := slices.Contains(rn.Spec.QuarantinedRails, rail); got != want {
			return fmt.Errorf("quarantined=%v, want %v (spec %v)", got, want, rn.Spec.QuarantinedRails)
		}
		return nil
	}
}

func railNodeEvent(node, reason, msg string) func() error {
	return func() error {
		var evs corev1.EventList
		if err := k8s.List(context.Background(), &evs); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "RailNode" && e.InvolvedObject.Name == node && e.Reason == reason && strings.Contains(e.Message, msg) {
				return nil
			}
		}
		return fmt.Errorf("no %s event on RailNode %s containing %q", reason, node, msg)
	}
}

// flapThreeTimes reports rail failing three times (a second apart, the API's time resolution),
// waiting for each failure to be recorded so none is missed, and checks the first two do not
// quarantine. It returns the base time the reports were stamped from (the third failure is
// base+6 s).
func flapThreeTimes(t *testing.T, node, rail string) time.Time {
	t.Helper()
	base := time.Now().Add(-20 * time.Second).Truncate(time.Second)
	reportRail(t, node, rail, true, base)
	for i := 1; i <= 3; i++ {
		reportRail(t, node, rail, false, base.Add(time.Duration(2*i)*time.Second))
		eventually(t, fmt.Sprintf("failure %d recorded", i), failuresRecorded(node, rail, i))
		if i < 3 {
			if err := quarantinedIs(node, rail, false)(); err != nil {
				t.Fatalf("after %d failures: %v", i, err)
			}
			reportRail(t, node, rail, true, base.Add(time.Duration(2*i+1)*time.Second))
		}
	}
	return base
}

// TestFlappingRailIsQuarantinedThenReleased: three failures within the window (suite policy: 3
// in 1 min, release after 2 s stable) put the rail into the RailNode's spec with a Warning Event;
// a new job's workers keep off that node; once healthy and stable the operator releases it.
func TestFlappingRailIsQuarantinedThenReleased(t *testing.T) {
	ns := newNamespace(t)
	node, rail := ns+"-flappy", ns+"-r0"
	base := flapThreeTimes(t, node, rail)
	eventually(t, "quarantined", quarantinedIs(node, rail, true))
	eventually(t, "quarantine event", railNodeEvent(node, "RailQuarantined", fmt.Sprintf("rail %q on node %q failed 3 times within 1m0s", rail, node)))

	// A new job avoids the node (the same scheduling rule as an admin's quarantine).
	mustCreate(t, tu.MakeRailClass(rail).Obj())
	mustCreate(t, tu.MakeJob("avoid", ns).Rails(rail).Replicas(1).Obj())
	eventually(t, "worker kept off the node", func() error {
		pod, err := getPod(ns, "avoid-0")
		if err != nil {
			return err
		}
		a := pod.Spec.Affinity
		if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
			return fmt.Errorf("no node affinity")
		}
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, f := range term.MatchFields {
				if slices.Contains(f.Values, node) {
					return nil
				}
			}
		}
		return fmt.Errorf("affinity does not exclude %s: %+v", node, a.NodeAffinity)
	})

	reportRail(t, node, rail, true, base.Add(7*time.Second))
	eventually(t, "released after the stable period", quarantinedIs(node, rail, false))
	eventually(t, "release event", railNodeEvent(node, "RailReleased", "healthy without failure for 2s"))
	eventually(t, "record cleared", failuresRecorded(node, rail, 0))
}

// TestAdminReleaseClearsTheRecord: an admin who lifts the operator's quarantine gets a clean
// slate (the old failures do not quarantine the rail again), and an admin's own quarantine is
// never lifted by the operator.
func TestAdminReleaseClearsTheRecord(t *testing.T) {
	ns := newNamespace(t)
	node, rail := ns+"-flappy", ns+"-r0"
	base := flapThreeTimes(t, node, rail)
	eventually(t, "quarantined", quarantinedIs(node, rail, true))
	// The admin lifts it while the rail is still down, and quarantines another rail by hand.
	rn, err := getRailNode(node)
	if err != nil {
		t.Fatal(err)
	}
	rn.Spec.QuarantinedRails = []string{"by-hand"}
	if err := k8s.Update(context.Background(), rn); err != nil {
		t.Fatal(err)
	}
	eventually(t, "admin release event", railNodeEvent(node, "RailReleased", "by an administrator"))
	eventually(t, "record cleared", failuresRecorded(node, rail, 0))
	if err := quarantinedIs(node, rail, false)(); err != nil {
		t.Error("quarantined again from old evidence:", err)
	}
	reportRail(t, node, rail, true, base.Add(8*time.Second))
	eventually(t, "healthy report seen", failuresRecorded(node, rail, 0))
	if err := quarantinedIs(node, "by-hand", true)(); err != nil {
		t.Error("the admin's quarantine was lifted:", err)
	}
}

package railstate

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nezha-project/nezha/cni/pkg/discovery"
	"github.com/nezha-project/nezha/cni/pkg/linkwatch"
	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

func up(ifname string) linkwatch.LinkState {
	return linkwatch.LinkState{Interface: ifname, OperState: nezhav1.LinkUp, Carrier: true, MTU: 1500}
}

func down(ifname string) linkwatch.LinkState {
	return linkwatch.LinkState{Interface: ifname, OperState: nezhav1.LinkDown, MTU: 1500}
}

func TestTransitionsAreCountedPerObservation(t *testing.T) {
	start := time.Unix(1000, 0)
	clk := clocktesting.NewFakeClock(start)
	speedReads := 0
	tr := New(clk, func(string) int64 { speedReads++; return 25000 })
	rails := []discovery.Rail{{Name: "rail0", Interface: "eth0"}, {Name: "rail1", Interface: "eth1"}}

	if !tr.SetRails(rails, map[string]linkwatch.LinkState{"eth0": up("eth0"), "eth1": up("eth1")}) {
		t.Fatal("first SetRails reported no change")
	}
	st := tr.Status()
	if st.RailCount != 2 || st.HealthyRailCount != 2 || st.Rails[0].Transitions != 0 || st.Rails[0].SpeedMbps != 25000 {
		t.Fatalf("initial status %+v", st)
	}

	// Three flaps of eth1 inside what would be one coalescing window.
	for i := 0; i < 3; i++ {
		clk.Step(10 * time.Millisecond)
		if !tr.ObserveLink(down("eth1"), false) {
			t.Fatal("going down reported no change")
		}
		clk.Step(10 * time.Millisecond)
		tr.ObserveLink(up("eth1"), false)
	}
	clk.Step(10 * time.Millisecond)
	tr.ObserveLink(down("eth1"), false)

	st = tr.Status()
	r1 := st.Rails[1]
	if r1.Name != "rail1" || r1.Transitions != 7 || r1.Healthy() || st.HealthyRailCount != 1 {
		t.Fatalf("rail1 after 3.5 flaps: %+v (healthy %d)", r1, st.HealthyRailCount)
	}
	if want := start.Add(70 * time.Millisecond); !r1.LastTransitionTime.Time.Equal(want) {
		t.Errorf("lastTransitionTime %v, want %v", r1.LastTransitionTime.Time, want)
	}
	if st.Rails[0].Transitions != 0 {
		t.Errorf("rail0 untouched but has %d transitions", st.Rails[0].Transitions)
	}
	if speedReads != 2+7 {
		t.Errorf("speed read %d times, want once per carrier change (9)", speedReads)
	}
}

func TestCounterOnlyChangesAreNotVisible(t *testing.T) {
	tr := New(clocktesting.NewFakeClock(time.Unix(0, 0)), nil)
	tr.SetRails([]discovery.Rail{{Name: "rail0", Interface: "eth0"}}, map[string]linkwatch.LinkState{"eth0": up("eth0")})
	s := up("eth0")
	s.RxErrors = 5
	if tr.ObserveLink(s, false) {
		t.Error("an error-counter change asked for a write")
	}
	if got := tr.Status().Rails[0].RxErrors; got != 5 {
		t.Errorf("rxErrors %d, want 5 (kept for the next write and metrics)", got)
	}
	if tr.ObserveLink(up("eth7"), false) {
		t.Error("an event for an interface no rail uses asked for a write")
	}
}

func TestMissingAndDeletedInterfaces(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	tr := New(clk, nil)
	tr.SetRails([]discovery.Rail{{Name: "rail0", Problem: "no interface matches pciAddress 0000:3b:00.0"}}, nil)
	r := tr.Status().Rails[0]
	if r.OperState != nezhav1.LinkNotPresent || r.Message != "no interface matches pciAddress 0000:3b:00.0" || r.Healthy() {
		t.Fatalf("unresolved rail: %+v", r)
	}

	// The interface appears (re-resolved after a link add): a transition to healthy.
	clk.Step(time.Second)
	if !tr.SetRails([]discovery.Rail{{Name: "rail0", Interface: "ens1f0"}}, map[string]linkwatch.LinkState{"ens1f0": up("ens1f0")}) {
		t.Fatal("late interface reported no change")
	}
	r = tr.Status().Rails[0]
	if !r.Healthy() || r.Transitions != 1 || r.Message != "" || r.Interface != "ens1f0" {
		t.Fatalf("after the interface appeared: %+v", r)
	}

	// Deleted: not present, unhealthy, explained.
	if !tr.ObserveLink(up("ens1f0"), true) {
		t.Fatal("deletion reported no change")
	}
	r = tr.Status().Rails[0]
	if r.OperState != nezhav1.LinkNotPresent || r.Healthy() || r.Transitions != 2 || r.Message != `interface "ens1f0" is gone` {
		t.Fatalf("after deletion: %+v", r)
	}

	// The RailClass is deleted: the rail leaves the status.
	if !tr.SetRails(nil, nil) || tr.Status().RailCount != 0 {
		t.Fatal("removed rail still reported")
	}
}

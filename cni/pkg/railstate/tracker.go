// Package railstate keeps the agent's latest view of every rail on the node: which interface backs
// it, the link facts last seen, and how often and when it last changed between healthy and
// unhealthy. Transitions are counted as they are observed, so a flap that starts and ends inside
// one coalescing window is still counted although no write shows it.
package railstate

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/nezha-project/nezha/cni/pkg/discovery"
	"github.com/nezha-project/nezha/cni/pkg/linkwatch"
	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// SpeedFunc reads an interface's link speed in Mbit/s (0 = unknown).
type SpeedFunc func(ifname string) int64

// Tracker is safe for concurrent use (the agent loop writes, metric scrapes read).
type Tracker struct {
	clock clock.PassiveClock
	speed SpeedFunc

	mu    sync.Mutex
	rails map[string]*rail // by RailClass name; mu held
}

type rail struct {
	resolved       discovery.Rail
	state          linkwatch.LinkState // zero when the interface is absent
	present        bool
	healthy        bool
	transitions    int64
	lastTransition metav1.Time
}

// New returns an empty tracker. speed may be nil (speeds then stay 0).
func New(clk clock.PassiveClock, speed SpeedFunc) *Tracker {
	if speed == nil {
		speed = func(string) int64 { return 0 }
	}
	return &Tracker{clock: clk, speed: speed, rails: map[string]*rail{}}
}

// SetRails replaces the set of rails (after a RailClass change or a re-resolution on link
// add/delete/rename) and refreshes every rail from links, the current listing by name. Counters
// and transition history of rails that stay are kept. It reports whether anything a RailNode
// shows changed.
func (t *Tracker) SetRails(resolved []discovery.Rail, links map[string]linkwatch.LinkState) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	changed := false
	keep := map[string]bool{}
	for _, r := range resolved {
		keep[r.Name] = true
		e, ok := t.rails[r.Name]
		if !ok {
			e = &rail{lastTransition: metav1.NewTime(t.clock.Now())}
			t.rails[r.Name] = e
			changed = true
		}
		if e.resolved != r {
			e.resolved = r
			changed = true
		}
		st, present := links[r.Interface]
		if r.Interface == "" {
			present = false
		}
		if t.observe(e, st, present, !ok) {
			changed = true
		}
	}
	for name := range t.rails {
		if !keep[name] {
			delete(t.rails, name)
			changed = true
		}
	}
	return changed
}

// ObserveLink applies one netlink event to the rails backed by that interface. It reports whether
// anything a RailNode shows changed. An event for an interface no rail uses changes nothing here;
// the caller re-resolves on link add/delete because a rail may now match it.
func (t *Tracker) ObserveLink(st linkwatch.LinkState, deleted bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	changed := false
	for _, e := range t.rails {
		if e.resolved.Interface == "" || e.resolved.Interface != st.Interface {
			continue
		}
		if t.observe(e, st, !deleted, false) {
			changed = true
		}
	}
	return changed
}

// observe records a new state of one rail; first is true for a rail seen for the first time
// (its initial health is not a transition). mu held.
func (t *Tracker) observe(e *rail, st linkwatch.LinkState, present, first bool) bool {
	if present {
		// Speeds change only with link state; read them then rather than on every scrape.
		if st.Carrier != e.state.Carrier || st.Interface != e.state.Interface || !e.present {
			st.SpeedMbps = t.speed(st.Interface)
		} else {
			st.SpeedMbps = e.state.SpeedMbps
		}
	} else {
		st = linkwatch.LinkState{}
	}
	healthy := present && st.Healthy()
	visible := first || present != e.present || healthy != e.healthy ||
		st.OperState != e.state.OperState || st.Carrier != e.state.Carrier ||
		st.SpeedMbps != e.state.SpeedMbps || st.MTU != e.state.MTU || st.Interface != e.state.Interface
	if !first && healthy != e.healthy {
		e.transitions++
		e.lastTransition = metav1.NewTime(t.clock.Now())
	}
	e.state, e.present, e.healthy = st, present, healthy
	return visible
}

// Status is the rails part of a RailNode status, sorted by rail name.
func (t *Tracker) Status() nezhav1.RailNodeStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := nezhav1.RailNodeStatus{}
	for _, e := range t.rails {
		s := nezhav1.RailInterfaceStatus{
			Name:        e.resolved.Name,
			Interface:   e.resolved.Interface,
			PCIAddress:  e.resolved.PCIAddress,
			OperState:   nezhav1.LinkNotPresent,
			Transitions: e.transitions,
		}
		lt := e.lastTransition
		s.LastTransitionTime = &lt
		if e.present {
			s.OperState = e.state.OperState
			s.Carrier = e.state.Carrier
			s.SpeedMbps = e.state.SpeedMbps
			s.MTU = e.state.MTU
			s.RxErrors, s.TxErrors = e.state.RxErrors, e.state.TxErrors
			s.RxDropped, s.TxDropped = e.state.RxDropped, e.state.TxDropped
		} else {
			s.Message = e.resolved.Problem
			if s.Message == "" {
				s.Message = fmt.Sprintf("interface %q is gone", e.resolved.Interface)
			}
		}
		if len(s.Message) > 1024 {
			s.Message = s.Message[:1024]
		}
		out.Rails = append(out.Rails, s)
		if s.Healthy() {
			out.HealthyRailCount++
		}
	}
	slices.SortFunc(out.Rails, func(a, b nezhav1.RailInterfaceStatus) int { return strings.Compare(a.Name, b.Name) })
	out.RailCount = int32(len(out.Rails))
	return out
}

// Interfaces lists the interfaces backing rails, for the caller to know which link events matter.
func (t *Tracker) Interfaces() map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]bool{}
	for _, e := range t.rails {
		if e.resolved.Interface != "" {
			out[e.resolved.Interface] = true
		}
	}
	return out
}

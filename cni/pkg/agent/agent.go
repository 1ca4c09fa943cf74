// Package agent is the rail agent's main loop: it resolves the node's rail interfaces from the
// RailClasses, follows them through netlink link events, and publishes a coalesced RailNode
// status, retrying with backoff while the API server is away.
package agent

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nezha-project/nezha/cni/pkg/coalesce"
	"github.com/nezha-project/nezha/cni/pkg/discovery"
	"github.com/nezha-project/nezha/cni/pkg/linkwatch"
	"github.com/nezha-project/nezha/cni/pkg/publish"
	"github.com/nezha-project/nezha/cni/pkg/railmetrics"
	"github.com/nezha-project/nezha/cni/pkg/railstate"
	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// Agent watches one node's rails. Create with New, then Run.
type Agent struct {
	opts         Options
	log          logr.Logger
	clock        clock.WithTicker
	classes      client.Reader
	classChanged <-chan struct{}

	watcher   *linkwatch.Watcher
	speed     *linkwatch.SpeedReader
	tracker   *railstate.Tracker
	coalescer *coalesce.Coalescer
	publisher *publish.Publisher
	metrics   *railmetrics.Metrics

	// startCache, when set, starts the RailClass informer cache and waits for it (NewFromConfig).
	startCache func(ctx context.Context) error

	dirtyMu    sync.Mutex
	dirtySince time.Time // first change not yet written; zero when clean; dirtyMu held

	// lastWriteOK: the most recent RailNode write succeeded. False until the first one does.
	lastWriteOK atomic.Bool
}

// New prepares an agent. writer writes RailNodes; classes reads RailClasses (an informer cache);
// classChanged signals RailClass changes (see WatchRailClasses).
func New(opts Options, log logr.Logger, writer client.Client, classes client.Reader, classChanged <-chan struct{}) (*Agent, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	w, err := linkwatch.NewWatcher(opts.NetNSPath)
	if err != nil {
		return nil, err
	}
	sp, err := linkwatch.NewSpeedReader(opts.NetNSPath)
	if err != nil {
		w.Close()
		return nil, err
	}
	clk := clock.RealClock{}
	a := &Agent{
		opts: opts, log: log, clock: clk, classes: classes, classChanged: classChanged,
		watcher: w, speed: sp,
		coalescer: coalesce.New(clk, opts.CoalesceWindow),
		publisher: &publish.Publisher{Client: writer, NodeName: opts.NodeName, AgentVersion: opts.AgentVersion, Clock: clk},
	}
	a.tracker = railstate.New(clk, func(ifname string) int64 {
		mbps, err := sp.SpeedMbps(ifname)
		if err != nil {
			log.V(1).Info("cannot read link speed", "interface", ifname, "error", err.Error())
		}
		return mbps
	})
	a.metrics = railmetrics.New(a.tracker.Status, a.coalescer.Absorbed)
	return a, nil
}

// Metrics are the agent's Prometheus metrics (register them on the metrics endpoint's registry).
func (a *Agent) Metrics() *railmetrics.Metrics { return a.metrics }

// Ready says whether the node's rail health reaches the cluster: the agent has written its
// RailNode and its latest write succeeded. An agent that observes links but cannot write them is
// alive (liveness) but not ready: the operator sees a stale RailNode, so a rolling update of a
// broken agent should stop there.
func (a *Agent) Ready() bool { return a.lastWriteOK.Load() }

// Status is the agent's current view of its rails.
func (a *Agent) Status() nezhav1.RailNodeStatus { return a.tracker.Status() }

// Run works until ctx ends. Two goroutines split the work so that a slow or unreachable API
// server never delays link observation: the observe loop (here) follows links and RailClasses and
// updates the tracker; the publish loop writes the tracker's latest state when asked, retrying
// with backoff until it succeeds.
func (a *Agent) Run(ctx context.Context) error {
	defer a.watcher.Close()
	defer func() { _ = a.speed.Close() }()
	if a.startCache != nil {
		if err := a.startCache(ctx); err != nil {
			return err
		}
	}

	events := make(chan linkwatch.Event, 256)
	go a.watcher.Run(ctx, events)
	publishReq := make(chan struct{}, 1)
	publishDone := make(chan struct{})
	go func() {
		defer close(publishDone)
		a.publishLoop(ctx, publishReq)
	}()
	defer func() { <-publishDone }()
	requestPublish := func() {
		select {
		case publishReq <- struct{}{}:
		default: // one request is pending already; it will write the latest state
		}
	}

	resync := a.clock.NewTicker(a.opts.ResyncPeriod)
	defer resync.Stop()
	changed := func() {
		a.markDirty()
		a.coalescer.Notify()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-events:
			// A resync (the first event, or after a lost subscription) is always written: it
			// creates the RailNode and repairs whatever a lost event would have changed.
			if a.handleLinkEvent(ctx, ev) || ev.Resync {
				changed()
			}
		case <-a.classChanged:
			if a.refresh(ctx) {
				changed()
			}
		case <-a.coalescer.Ready():
			requestPublish()
		case <-resync.C():
			a.refresh(ctx)
			requestPublish() // heartbeat: observedTime and error counters, changed or not
		}
	}
}

// markDirty remembers when the first unpublished change happened (for the publish delay metric).
func (a *Agent) markDirty() {
	a.dirtyMu.Lock()
	defer a.dirtyMu.Unlock()
	if a.dirtySince.IsZero() {
		a.dirtySince = a.clock.Now()
	}
}

// publishLoop writes the RailNode for every request, each time with the latest state. A failed
// write is retried with exponential backoff; requests arriving meanwhile are served by the retry.
func (a *Agent) publishLoop(ctx context.Context, req <-chan struct{}) {
	backoff := firstRetryBackoff
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-req:
		}
		for {
			a.dirtyMu.Lock()
			since := a.dirtySince
			a.dirtySince = time.Time{}
			a.dirtyMu.Unlock()
			st := a.tracker.Status()
			err := a.publisher.Publish(ctx, st)
			if err == nil {
				a.lastWriteOK.Store(true)
				a.metrics.Publishes.WithLabelValues("success").Inc()
				if !since.IsZero() {
					a.metrics.PublishDelay.Observe(a.clock.Since(since).Seconds())
				}
				if failing {
					a.log.Info("RailNode write succeeded again", "node", a.opts.NodeName)
				}
				failing, backoff = false, firstRetryBackoff
				a.log.V(1).Info("published RailNode", "node", a.opts.NodeName, "rails", st.RailCount, "healthy", st.HealthyRailCount)
				break
			}
			if ctx.Err() != nil {
				return
			}
			// Not written: the change is still unpublished.
			a.dirtyMu.Lock()
			if a.dirtySince.IsZero() || (!since.IsZero() && since.Before(a.dirtySince)) {
				a.dirtySince = since
			}
			a.dirtyMu.Unlock()
			a.lastWriteOK.Store(false) // before the counter: whoever sees the failure counted sees it here too
			a.metrics.Publishes.WithLabelValues("error").Inc()
			if !failing {
				a.log.Error(err, "RailNode write failed; keeping the latest state and retrying with backoff", "node", a.opts.NodeName)
			}
			failing = true
			t := a.clock.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
			backoff = min(2*backoff, a.opts.MaxRetryBackoff)
		}
	}
}

// handleLinkEvent applies one link event and reports whether the RailNode must change. A change
// of a rail interface is applied from the event itself (exact even during fast flaps); a link
// that appears, disappears or is renamed triggers a full re-resolution, since a rail may now
// match it or have lost its interface.
func (a *Agent) handleLinkEvent(ctx context.Context, ev linkwatch.Event) bool {
	if ev.Resync {
		return a.refresh(ctx)
	}
	known := a.tracker.Interfaces()[ev.State.Interface]
	changed := false
	if known {
		changed = a.tracker.ObserveLink(ev.State, ev.Deleted)
	}
	if ev.Deleted || !known {
		if a.refresh(ctx) {
			changed = true
		}
	}
	return changed
}

// refresh lists RailClasses and links, resolves the rails and updates the tracker.
func (a *Agent) refresh(ctx context.Context) bool {
	var classes nezhav1.RailClassList
	if err := a.classes.List(ctx, &classes); err != nil {
		a.log.Error(err, "cannot list RailClasses; keeping the rails known so far")
		return false
	}
	links, err := a.watcher.Links()
	if err != nil {
		a.log.Error(err, "cannot list links")
		return false
	}
	names := make(map[string]bool, len(links))
	for n := range links {
		names[n] = true
	}
	rails := discovery.Resolve(classes.Items, a.opts.NodeName, names, discovery.SysFS{Root: a.opts.SysClassNet})
	return a.tracker.SetRails(rails, links)
}

// Package agent is the rail agent's main loop: it resolves the node's rail interfaces from the
// RailClasses, follows them through netlink link events, and publishes a coalesced RailNode
// status, retrying with backoff while the API server is away.
package agent

import (
	"context"
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

// Status is the agent's current view of its rails.
func (a *Agent) Status() nezhav1.RailNodeStatus { return a.tracker.Status() }

// Run works until ctx ends. The first link listing and RailNode write happen as soon as the
// netlink subscription is up.
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

	resync := a.clock.NewTicker(a.opts.ResyncPeriod)
	defer resync.Stop()

	var (
		retry       clock.Timer // pending retry of a failed write, nil when none
		backoff     = firstRetryBackoff
		dirtySince  time.Time // first change not yet written; zero when clean
		retryC      <-chan time.Time
		writeFailed bool
	)
	changed := func() {
		if dirtySince.IsZero() {
			dirtySince = a.clock.Now()
		}
		a.coalescer.Notify()
	}
	publishNow := func() {
		if retry != nil {
			retry.Stop()
			retry, retryC = nil, nil
		}
		st := a.tracker.Status()
		err := a.publisher.Publish(ctx, st)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			a.metrics.Publishes.WithLabelValues("error").Inc()
			if !writeFailed {
				a.log.Error(err, "RailNode write failed; keeping the latest state and retrying with backoff", "node", a.opts.NodeName)
			}
			writeFailed = true
			retry = a.clock.NewTimer(backoff)
			retryC = retry.C()
			backoff = min(2*backoff, a.opts.MaxRetryBackoff)
			return
		}
		a.metrics.Publishes.WithLabelValues("success").Inc()
		if !dirtySince.IsZero() {
			a.metrics.PublishDelay.Observe(a.clock.Since(dirtySince).Seconds())
			dirtySince = time.Time{}
		}
		if writeFailed {
			a.log.Info("RailNode write succeeded again", "node", a.opts.NodeName)
		}
		writeFailed, backoff = false, firstRetryBackoff
		a.log.V(1).Info("published RailNode", "node", a.opts.NodeName, "rails", st.RailCount, "healthy", st.HealthyRailCount)
	}

	for {
		select {
		case <-ctx.Done():
			if retry != nil {
				retry.Stop()
			}
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
			publishNow()
		case <-retryC:
			retry, retryC = nil, nil
			publishNow()
		case <-resync.C():
			a.refresh(ctx)
			publishNow() // heartbeat: observedTime and error counters, changed or not
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

package controller

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// The job controller's metrics (quarantine's are in internal/quarantine); controller-runtime
// already exports queue, reconcile count and error metrics per controller.
var (
	jobsByPhase = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nezha_operator_jobs",
		Help: "MultiRailJobs known to the operator, by phase.",
	}, []string{"phase"})
	reconcileDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "nezha_operator_reconcile_duration_seconds",
		Help:    "Time to reconcile one MultiRailJob, including its status write.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	})
	railFailovers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nezha_operator_rail_failovers_total",
		Help: "Failover history entries recorded, by action (RailLost, RailRecovered, Restarted).",
	}, []string{"action"})
	railActions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nezha_operator_rail_actions_total",
		Help: "Drain and restore requests sent to workers' control endpoints, by action (drain, restore), result (accepted, error) and endpoint (runtime, nccl).",
	}, []string{"action", "result", "endpoint"})
	workerPodsCreated = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "nezha_operator_worker_pods_created_total",
		Help: "Worker pods created by the operator.",
	})
)

func init() {
	metrics.Registry.MustRegister(jobsByPhase, reconcileDuration, railFailovers, railActions, workerPodsCreated)
}

// phaseTracker keeps nezha_operator_jobs exact: it remembers each job's last phase so a change
// moves one job from one gauge to another and a deletion removes it.
type phaseTracker struct {
	mu     sync.Mutex
	phases map[types.NamespacedName]nezhav1.JobPhase
}

func (p *phaseTracker) set(job types.NamespacedName, phase nezhav1.JobPhase) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.phases == nil {
		p.phases = map[types.NamespacedName]nezhav1.JobPhase{}
	}
	if old, ok := p.phases[job]; ok {
		if old == phase {
			return
		}
		jobsByPhase.WithLabelValues(string(old)).Dec()
	}
	p.phases[job] = phase
	jobsByPhase.WithLabelValues(string(phase)).Inc()
}

func (p *phaseTracker) forget(job types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.phases[job]; ok {
		jobsByPhase.WithLabelValues(string(old)).Dec()
		delete(p.phases, job)
	}
}

package quarantine

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// railQuarantines counts the Reconciler's decisions; the job controller's metrics are in
// internal/controller/metrics.go.
var railQuarantines = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "nezha_operator_rail_quarantines_total",
	Help: "Rails the operator quarantined by evidence or released, by action (quarantined, released).",
}, []string{"action"})

func init() {
	metrics.Registry.MustRegister(railQuarantines)
}

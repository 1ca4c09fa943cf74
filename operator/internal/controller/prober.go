package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/nezha-project/nezha/operator/internal/prober"
)

// RuntimeProber talks to the Nezha runtime inside a running worker through its control endpoint
// (NEZHA_CONTROL_ADDR). The runtime sees failures the node agent cannot (a dead peer link, a
// stuck switch port), so its view is folded into rail health; and the operator drains through it
// the rails node agents see down that the runtime still uses (rail_steering.go).
// prober.HTTP is the implementation; envtest pods run no runtime, so the controller tests use a
// fake. nil disables both.
type RuntimeProber interface {
	// Report returns each rail's state in the runtime of pod (prober.StateHealthy, ...) and its
	// pre-flight check of the rails (preflight.go).
	Report(ctx context.Context, pod *corev1.Pod) (*prober.Report, error)
	// SetRail asks the runtime in pod to drain or restore rail, with the job's control
	// credential; nil means the runtime accepted (it applies the change on every rank).
	SetRail(ctx context.Context, pod *corev1.Pod, rail string, action prober.Action, credential string) error
}

package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/nezha-project/nezha/operator/internal/prober"
)

// RuntimeProber talks to a running worker's control endpoints: the Nezha runtime's
// (NEZHA_CONTROL_ADDR) and the NCCL plugin's (NEZHA_NCCL_CONTROL_ADDR). The runtime sees failures
// the node agent cannot (a dead peer link, a stuck switch port), so its view is folded into rail
// health; and the operator drains through both the rails node agents see down that the workers
// still use (rail_steering.go).
// prober.HTTP is the implementation; envtest pods run no runtime, so the controller tests use a
// fake. nil disables both.
type RuntimeProber interface {
	// Report returns each rail's state in endpoint ep of process process of pod (its local rank;
	// 0 for the runtime) (prober.StateHealthy, ...), the runtime's pre-flight check of the rails
	// (preflight.go), and how many processes the pod runs (the NCCL plugin's local_world_size).
	Report(ctx context.Context, pod *corev1.Pod, ep prober.Endpoint, process int) (*prober.Report, error)
	// SetRail asks endpoint ep of process process of pod to drain or restore rail, with the
	// job's control credential; nil means it accepted (prober.Endpoint.AgreedAcrossRanks says how
	// far the change reaches).
	SetRail(ctx context.Context, pod *corev1.Pod, ep prober.Endpoint, process int, rail string, action prober.Action, credential string) error
}

package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
)

// RuntimeProber asks the Nezha runtime inside a running worker which rails it has failed over
// from (its /status endpoint on NEZHA_CONTROL_ADDR). The runtime sees failures the node agent
// cannot (a dead peer link, a stuck switch port), so its view is folded into rail health.
// Tests use a fake; nil disables probing.
type RuntimeProber interface {
	// FailedRails returns the names of the rails the runtime in pod currently does not use
	// because they failed.
	FailedRails(ctx context.Context, pod *corev1.Pod) ([]string, error)
}

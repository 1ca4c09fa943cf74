package controller

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nezha-project/nezha/operator/internal/prober"
)

// processAnswers is a RuntimeProber whose process k answers as answers[k] (absent: no answer).
type processAnswers map[int]int

func (a processAnswers) Report(_ context.Context, _ *corev1.Pod, _ prober.Endpoint, process int) (*prober.Report, error) {
	as, ok := a[process]
	if !ok {
		return nil, errors.New("connection refused")
	}
	return &prober.Report{Rails: map[string]string{"r0": prober.StateHealthy}, LocalRank: as, LocalWorldSize: 40}, nil
}

func (processAnswers) SetRail(context.Context, *corev1.Pod, prober.Endpoint, int, string, prober.Action, string) error {
	return errors.New("not asked here")
}

// A pod's further processes are each read on their own port; one that does not answer, one that
// answers as another process, and those beyond the ports the NetworkPolicy opens are silent,
// each saying why; the others are read.
func TestOtherProcessesAreReadOrNamedSilent(t *testing.T) {
	answers := processAnswers{}
	for k := 1; k < 40; k++ {
		answers[k] = k
	}
	delete(answers, 2)
	answers[3] = 5
	r := &MultiRailJobReconciler{Prober: answers}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w-1"}}
	states, silent := r.probeOtherProcesses(context.Background(), pod, 1, prober.NCCLPluginEndpoint, 40)

	if len(states) != prober.MaxPluginProcesses-3 { // 1..31 less processes 2 and 3
		t.Errorf("read %d processes, want %d", len(states), prober.MaxPluginProcesses-3)
	}
	for _, p := range []workerProcess{{1, 1}, {1, 31}} {
		if states[p]["r0"] != prober.StateHealthy {
			t.Errorf("process %+v not read: %v", p, states[p])
		}
	}
	why := map[int]string{}
	for _, u := range silent {
		if u.rank != 1 || u.pod != pod || u.endpoint != prober.NCCLPluginEndpoint {
			t.Errorf("silent process %+v names another worker", u)
		}
		why[u.local] = u.err.Error()
	}
	for local, want := range map[int]string{
		2:  "its /status did not answer: connection refused",
		3:  "port 9437 answered as process 5",
		32: "the pod reports 40 processes; only the first 32 (ports 9434..9465) are reachable through the job's NetworkPolicy",
	} {
		if !strings.Contains(why[local], want) {
			t.Errorf("process %d: %q, want it to say %q", local, why[local], want)
		}
	}
	if len(why) != 3 {
		t.Errorf("silent: %v, want processes 2, 3 and 32", why)
	}
}

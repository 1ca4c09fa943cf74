package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nezha-project/nezha/operator/internal/prober"
)

// TestSteerLimiterAllowsOneRequestPerIntervalPerJobRailAndAction: the rate limit that keeps a
// busy reconcile loop from hammering a runtime, on explicit times (no clock in the test).
func TestSteerLimiterAllowsOneRequestPerIntervalPerJobRailAndAction(t *testing.T) {
	var l steerLimiter
	job := types.NamespacedName{Namespace: "ns", Name: "j"}
	t0 := time.Unix(1000, 0)
	const every = 10 * time.Second
	wide := workerProcess{rank: jobWide}
	drainB := steerKey{job, "b", prober.Drain, prober.RuntimeEndpoint, wide}
	if ok, _ := l.allow(drainB, t0, every); !ok {
		t.Fatal("first request refused")
	}
	if ok, wait := l.allow(drainB, t0.Add(4*time.Second), every); ok || wait != 6*time.Second {
		t.Errorf("repeat after 4 s: ok=%v wait=%s, want refused with 6 s to go", ok, wait)
	}
	rt := prober.RuntimeEndpoint
	for _, other := range []steerKey{
		{job, "b", prober.Restore, rt, wide}, {job, "c", prober.Drain, rt, wide},
		{types.NamespacedName{Namespace: "ns", Name: "k"}, "b", prober.Drain, rt, wide},
		// The NCCL plugin is asked per process: each process of each pod is limited on its own.
		{job, "b", prober.Drain, prober.NCCLPluginEndpoint, workerProcess{rank: 0}},
		{job, "b", prober.Drain, prober.NCCLPluginEndpoint, workerProcess{rank: 1}},
		{job, "b", prober.Drain, prober.NCCLPluginEndpoint, workerProcess{rank: 1, local: 1}},
	} {
		if ok, _ := l.allow(other, t0.Add(time.Second), every); !ok {
			t.Errorf("%+v limited by another job, rail, action, endpoint or process", other)
		}
	}
	if ok, _ := l.allow(drainB, t0.Add(every), every); !ok {
		t.Error("refused after a whole interval")
	}
	l.forget(job)
	if ok, _ := l.allow(drainB, t0.Add(every+time.Second), every); !ok {
		t.Error("a forgotten job is still limited")
	}
}

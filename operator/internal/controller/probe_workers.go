package controller

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/prober"
)

// probeParallelism bounds concurrent runtime probes per reconcile, so a big job's probes finish
// in a few timeouts rather than one per worker.
const probeParallelism = 16

// probeRuntimes asks each running worker's control endpoints (the runtime's, the NCCL plugin's:
// controlEndpoints) for their rails' states, and the runtime for its pre-flight check. Probe
// errors of a pod's process 0 are logged, not fatal: a process that is still starting has no
// /status yet. The NCCL plugin is one per process: where process 0 says the pod runs more, each
// of them is asked on its own port too, and those that do not answer are returned as silent
// (steer_targets.go).
func (r *MultiRailJobReconciler) probeRuntimes(ctx context.Context, job *nezhav1.MultiRailJob, obs observation) (
	endpointStates, []unansweredProcess, runtimePreflights) {
	if r.Prober == nil {
		return nil, nil, nil
	}
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		sem    = make(chan struct{}, probeParallelism)
		out    = endpointStates{}
		silent []unansweredProcess
		pre    = runtimePreflights{}
	)
	for _, ep := range controlEndpoints(job) {
		out[ep] = processStates{}
		for rank, pod := range obs.pods {
			if pod.Status.Phase != corev1.PodRunning {
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				rep, err := r.Prober.Report(ctx, pod, ep, 0)
				if err != nil {
					log.FromContext(ctx).V(1).Info("control endpoint status probe failed", "pod", pod.Name, "endpoint", ep, "err", err)
					return
				}
				states, quiet := r.probeOtherProcesses(ctx, pod, rank, ep, rep.LocalWorldSize)
				mu.Lock()
				defer mu.Unlock()
				out[ep][workerProcess{rank: rank}] = rep.Rails
				if rep.Preflight != nil {
					pre[rank] = rep.Preflight
				}
				for p, rails := range states {
					out[ep][p] = rails
				}
				silent = append(silent, quiet...)
			}()
		}
	}
	wg.Wait()
	return out, silent, pre
}

// probeOtherProcesses asks processes 1..size-1 of pod (at most prober.MaxPluginProcesses in
// all), each on its own port, at once: a pod's processes are its GPUs, a handful. A process
// that does not answer, or answers as another one, is silent; so are those beyond the ports the
// job's NetworkPolicy opens, as one entry.
func (r *MultiRailJobReconciler) probeOtherProcesses(ctx context.Context, pod *corev1.Pod, rank int32, ep prober.Endpoint,
	size int) (processStates, []unansweredProcess) {
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		states = processStates{}
		silent []unansweredProcess
	)
	if size > prober.MaxPluginProcesses {
		silent = append(silent, unansweredProcess{workerProcess{rank, prober.MaxPluginProcesses}, ep, pod, fmt.Errorf(
			"the pod reports %d processes; only the first %d (ports %d..%d) are reachable through the job's NetworkPolicy",
			size, prober.MaxPluginProcesses, ep.Port(), ep.ProcessPort(prober.MaxPluginProcesses-1))})
		size = prober.MaxPluginProcesses
	}
	for k := 1; k < size; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := r.Prober.Report(ctx, pod, ep, k)
			if err == nil && rep.LocalRank != k {
				err = fmt.Errorf("port %d answered as process %d", ep.ProcessPort(k), rep.LocalRank)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				silent = append(silent, unansweredProcess{workerProcess{rank, k}, ep, pod, fmt.Errorf("its /status did not answer: %w", err)})
				return
			}
			states[workerProcess{rank, k}] = rep.Rails
		}()
	}
	wg.Wait()
	return states, silent
}

package controller

// Which worker processes a drain or restore is asked of, per control endpoint.
//
// The runtime (integration: collectives) agrees a drain with every rank and applies it at the
// next operation on all of them, so one request to the lowest rank on the node that reported the
// rail down is enough (runtime/README.md "Control endpoint"). The NCCL plugin (integration: nccl)
// applies it to every connection of its own process, both ends agreeing per connection, but not
// to other processes (each NCCL connection is a two-rank engine job; docs/nccl.md "One engine"):
// so every process on a node whose agent reports the rail down is asked, and a restore goes to
// every process whose plugin reports the rail drained. A pod runs one process per GPU, each with
// its own plugin: process k serves port 9434 + k, and process 0's /status says how many there are
// (local_world_size), so the operator asks each of them (at most prober.MaxPluginProcesses, the
// ports the job's NetworkPolicy opens) and steers each as a target of its own. A process that
// does not answer is named in a RailActionFailed Event and keeps a restore pending; the others
// are steered all the same.

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/prober"
)

// workerProcess is one process of a worker: its pod's rank and its local rank in the pod.
type workerProcess struct {
	rank  int32
	local int
}

// processStates is what each process's endpoint said: process → rail → state.
type processStates map[workerProcess]map[string]string

// byRank is what process 0 of each pod said: the whole story where a request reaches every rank.
func (s processStates) byRank() runtimeStates {
	out := runtimeStates{}
	for p, states := range s {
		if p.local == 0 {
			out[p.rank] = states
		}
	}
	return out
}

// endpointStates is what each endpoint said, per process.
type endpointStates map[prober.Endpoint]processStates

// anyAnswered reports whether some worker's endpoint answered.
func (s endpointStates) anyAnswered() bool {
	for _, states := range s {
		if len(states) > 0 {
			return true
		}
	}
	return false
}

// unansweredProcess is a process a pod's process 0 said runs there whose endpoint did not answer
// (or answered as another process): it cannot be steered this time.
type unansweredProcess struct {
	workerProcess
	endpoint prober.Endpoint
	pod      *corev1.Pod
	err      error
}

// controlEndpoints lists the control endpoints the job's workers serve, by
// spec.runtime.integration (unset: collectives).
func controlEndpoints(job *nezhav1.MultiRailJob) []prober.Endpoint {
	integrations := job.Spec.Runtime.Integration
	var eps []prober.Endpoint
	if len(integrations) == 0 || containsIntegration(integrations, nezhav1.IntegrationCollectives) {
		eps = append(eps, prober.RuntimeEndpoint)
	}
	if containsIntegration(integrations, nezhav1.IntegrationNCCL) {
		eps = append(eps, prober.NCCLPluginEndpoint)
	}
	return eps
}

func containsIntegration(list []nezhav1.Integration, want nezhav1.Integration) bool {
	for _, i := range list {
		if i == want {
			return true
		}
	}
	return false
}

// steerTarget is one worker process to ask.
type steerTarget struct {
	pod *corev1.Pod
	workerProcess
}

// limited is the process the rate limit counts a request against: jobWide where one request
// reaches every rank.
func (t steerTarget) limited(ep prober.Endpoint) workerProcess {
	if ep.AgreedAcrossRanks() {
		return workerProcess{rank: jobWide}
	}
	return t.workerProcess
}

// processNoun names the endpoint's process in Events: "runtime", "NCCL plugin", or "NCCL plugin
// (process 3, port 9437)" beyond a pod's first process.
func processNoun(ep prober.Endpoint, local int) string {
	if local == 0 {
		return endpointNoun(ep)
	}
	return fmt.Sprintf("%s (process %d, port %d)", endpointNoun(ep), local, ep.ProcessPort(local))
}

// drainTargets returns the processes to ask to drain rail on endpoint ep, lowest rank first: none
// once no process reports it in use, and never a process for which it is the last rail in use
// (the endpoint would refuse; Degraded already says why the job suffers).
func drainTargets(ep prober.Endpoint, obs observation, health railHealth, states processStates, rail, node string) []steerTarget {
	if ep.AgreedAcrossRanks() {
		byRank := states.byRank()
		if !byRank.anyRank(rail, prober.StateHealthy) {
			return nil
		}
		pod, rank := podOnNode(obs, node)
		if pod == nil || !otherRailInUse(byRank[rank], rail) {
			return nil
		}
		return []steerTarget{{pod, workerProcess{rank: rank}}}
	}
	var out []steerTarget
	for p, rails := range states {
		pod := obs.pods[p.rank]
		if pod == nil || pod.Status.Phase != corev1.PodRunning {
			continue
		}
		if _, down := health.agentDownOn(rail, pod.Spec.NodeName); !down {
			continue
		}
		if rails[rail] == prober.StateHealthy && otherRailInUse(rails, rail) {
			out = append(out, steerTarget{pod, p})
		}
	}
	return inOrder(out)
}

// restoreTargets returns the processes to ask to restore rail on endpoint ep: the lowest rank on
// the node it was drained through (or any) where one request reaches every rank, else every
// running process that reports it drained.
func restoreTargets(ep prober.Endpoint, obs observation, states processStates, rail, node string) []steerTarget {
	if ep.AgreedAcrossRanks() {
		pod, rank := podOnNode(obs, node)
		if pod == nil {
			pod, rank = podOnNode(obs, "")
		}
		if pod == nil {
			return nil
		}
		return []steerTarget{{pod, workerProcess{rank: rank}}}
	}
	var out []steerTarget
	for p, rails := range states {
		if pod := obs.pods[p.rank]; pod != nil && pod.Status.Phase == corev1.PodRunning && rails[rail] == prober.StateDrained {
			out = append(out, steerTarget{pod, p})
		}
	}
	return inOrder(out)
}

// inOrder sorts targets by rank, then by process in the pod.
func inOrder(t []steerTarget) []steerTarget {
	sort.Slice(t, func(i, j int) bool {
		if t[i].rank != t[j].rank {
			return t[i].rank < t[j].rank
		}
		return t[i].local < t[j].local
	})
	return t
}

// endpointNoun names the endpoint's process in Events.
func endpointNoun(ep prober.Endpoint) string {
	if ep == prober.NCCLPluginEndpoint {
		return "NCCL plugin"
	}
	return "runtime"
}

// drainScope says in Events where an accepted drain takes effect.
func drainScope(ep prober.Endpoint) string {
	if ep.AgreedAcrossRanks() {
		return "on every rank at the next operation"
	}
	return "to every connection of that process at its next operation"
}

// otherRailInUse reports whether a process (its rail states) uses some rail besides rail.
func otherRailInUse(states map[string]string, rail string) bool {
	for name, state := range states {
		if name != rail && state == prober.StateHealthy {
			return true
		}
	}
	return false
}

// podOnNode returns the running worker with the lowest rank on node ("" = any node).
func podOnNode(obs observation, node string) (*corev1.Pod, int32) {
	var pick *corev1.Pod
	var rank int32
	for k, pod := range obs.pods {
		if pod.Status.Phase != corev1.PodRunning || (node != "" && pod.Spec.NodeName != node) {
			continue
		}
		if pick == nil || k < rank {
			pick, rank = pod, k
		}
	}
	return pick, rank
}

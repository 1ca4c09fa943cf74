package controller

// Which worker processes a drain or restore is asked of, per control endpoint.
//
// The runtime (integration: collectives) agrees a drain with every rank and applies it at the
// next operation on all of them, so one request to the lowest rank on the node that reported the
// rail down is enough (runtime/README.md "Control endpoint"). The NCCL plugin (integration: nccl)
// applies it to every connection of its own process, both ends agreeing per connection, but not
// to other processes (each NCCL connection is a two-rank engine job; docs/nccl.md "One engine"):
// so every worker on a node whose agent reports the rail down is asked, and a restore goes to
// every worker whose plugin reports the rail drained. The operator asks process 0 of each pod
// (port 9434); the plugins of further local ranks (9434 + k) are not steered.

import (
	"sort"

	corev1 "k8s.io/api/core/v1"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/prober"
)

// endpointStates is what each endpoint said: endpoint → rank → rail → state.
type endpointStates map[prober.Endpoint]runtimeStates

// anyAnswered reports whether some worker's endpoint answered.
func (s endpointStates) anyAnswered() bool {
	for _, states := range s {
		if len(states) > 0 {
			return true
		}
	}
	return false
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
	pod  *corev1.Pod
	rank int32
}

// limitRank is the rank the rate limit counts a request against: jobWide where one request
// reaches every rank.
func (t steerTarget) limitRank(ep prober.Endpoint) int32 {
	if ep.AgreedAcrossRanks() {
		return jobWide
	}
	return t.rank
}

// drainTargets returns the workers to ask to drain rail on endpoint ep, lowest rank first: none
// once no process reports it in use, and never a process for which it is the last rail in use
// (the endpoint would refuse; Degraded already says why the job suffers).
func drainTargets(ep prober.Endpoint, obs observation, health railHealth, states runtimeStates, rail, node string) []steerTarget {
	if ep.AgreedAcrossRanks() {
		if !states.anyRank(rail, prober.StateHealthy) {
			return nil
		}
		pod, rank := podOnNode(obs, node)
		if pod == nil || !otherRailInUse(states[rank], rail) {
			return nil
		}
		return []steerTarget{{pod, rank}}
	}
	var out []steerTarget
	for rank, pod := range obs.pods {
		if _, down := health.agentDownOn(rail, pod.Spec.NodeName); !down || pod.Status.Phase != corev1.PodRunning {
			continue
		}
		if states[rank][rail] == prober.StateHealthy && otherRailInUse(states[rank], rail) {
			out = append(out, steerTarget{pod, rank})
		}
	}
	return byRank(out)
}

// restoreTargets returns the workers to ask to restore rail on endpoint ep: the lowest rank on
// the node it was drained through (or any) where one request reaches every rank, else every
// running worker whose process reports it drained.
func restoreTargets(ep prober.Endpoint, obs observation, states runtimeStates, rail, node string) []steerTarget {
	if ep.AgreedAcrossRanks() {
		pod, rank := podOnNode(obs, node)
		if pod == nil {
			pod, rank = podOnNode(obs, "")
		}
		if pod == nil {
			return nil
		}
		return []steerTarget{{pod, rank}}
	}
	var out []steerTarget
	for rank, pod := range obs.pods {
		if pod.Status.Phase == corev1.PodRunning && states[rank][rail] == prober.StateDrained {
			out = append(out, steerTarget{pod, rank})
		}
	}
	return byRank(out)
}

func byRank(t []steerTarget) []steerTarget {
	sort.Slice(t, func(i, j int) bool { return t[i].rank < t[j].rank })
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

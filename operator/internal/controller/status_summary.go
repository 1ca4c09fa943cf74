package controller

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// The job's status does not hold one entry per worker: 10,000 of them (~0.4 KB each) would not
// fit etcd's 1.5 MiB object limit, and every status write would send them all. It holds counts,
// one summary per rail and the few worst workers; the per-worker detail stays where it lives
// (the pod: node, phase, Ready, Multus network-status; the node's RailNode: rail health).

// unhealthiness orders unhealthy workers, worst first; a healthy worker has none.
type unhealthiness int

const (
	healthyWorker unhealthiness = iota
	workerFailed
	workerUnknown
	workerRailDown
	workerRailMissing
	workerNotReady
	workerPendingScheduled
	workerPendingUnscheduled
)

// judgeWorker says whether a worker (its rails' Healthy already set by assessRailHealth) is
// unhealthy, how badly, and why in words. Finished workers are not unhealthy.
// runtimeOnly (from railHealth) tells a rail the node reports down from one only the worker's
// runtime failed.
func judgeWorker(w *nezhav1.WorkerStatus, pod *corev1.Pod, missing []string, runtimeOnly map[railPair]bool) (unhealthiness, string) {
	var down, nodeDown, runtimeDown []string
	if w.NodeName != "" {
		for _, rs := range w.Rails {
			if rs.Healthy {
				continue
			}
			down = append(down, rs.Name)
			if runtimeOnly[railPair{rs.Name, w.NodeName}] {
				runtimeDown = append(runtimeDown, rs.Name)
			} else {
				nodeDown = append(nodeDown, rs.Name)
			}
		}
	}
	switch {
	case w.Phase == corev1.PodSucceeded:
		return healthyWorker, ""
	case w.Phase == corev1.PodFailed:
		return workerFailed, "failed: " + podFailureReason(pod)
	case w.Phase == corev1.PodUnknown:
		return workerUnknown, "pod phase Unknown (node " + w.NodeName + " unreachable?)"
	case len(down) > 0:
		var why []string
		if len(nodeDown) > 0 {
			why = append(why, fmt.Sprintf("rail %s down on node %s", strings.Join(nodeDown, ", "), w.NodeName))
		}
		if len(runtimeDown) > 0 {
			why = append(why, fmt.Sprintf("rail %s failed in its runtime (node %s does not report it down)",
				strings.Join(runtimeDown, ", "), w.NodeName))
		}
		return workerRailDown, strings.Join(why, "; ")
	case len(missing) > 0:
		return workerRailMissing, "no interface for rail " + strings.Join(missing, ", ")
	case w.Phase == corev1.PodRunning && !w.Ready:
		return workerNotReady, "running, not Ready"
	case w.Phase == corev1.PodRunning:
		return healthyWorker, ""
	case w.NodeName != "":
		return workerPendingScheduled, "pending on node " + w.NodeName
	default:
		return workerPendingUnscheduled, "not scheduled"
	}
}

// summarizeWorkers fills the status's worker counts, rail summaries and bounded list of
// unhealthy workers from the observation (after assessRailHealth) and the rail health.
// checkAttachments is false while the rails are unresolved (no interface can be expected).
func summarizeWorkers(obs observation, railNames []string, h railHealth, checkAttachments bool, s *nezhav1.MultiRailJobStatus) {
	counts := nezhav1.WorkerCounts{}
	type ranked struct {
		how unhealthiness
		w   nezhav1.WorkerStatus
	}
	var unhealthy []ranked
	attached := make(map[string]int32, len(railNames))
	downWorkers := make(map[string]int32, len(railNames))
	for _, w := range obs.workers {
		counts.Pods++
		switch w.Phase {
		case corev1.PodRunning:
			counts.Running++
		case corev1.PodSucceeded:
			counts.Succeeded++
		case corev1.PodFailed:
			counts.Failed++
		case corev1.PodUnknown:
			counts.Unknown++
		default:
			counts.Pending++
		}
		for _, rs := range w.Rails {
			if rs.Interface != "" {
				attached[rs.Name]++
			}
			if w.NodeName != "" && !rs.Healthy {
				downWorkers[rs.Name]++
			}
		}
		var missing []string
		if checkAttachments {
			missing = obs.missing[w.Rank]
		}
		if how, why := judgeWorker(&w, obs.pods[w.Rank], missing, h.runtimeOnly); how != healthyWorker {
			counts.Unhealthy++
			w.Reason = truncate(why, 500)
			unhealthy = append(unhealthy, ranked{how, w})
		}
	}
	sort.SliceStable(unhealthy, func(i, j int) bool {
		if unhealthy[i].how != unhealthy[j].how {
			return unhealthy[i].how < unhealthy[j].how
		}
		return unhealthy[i].w.Rank < unhealthy[j].w.Rank
	})
	listed := unhealthy[:min(len(unhealthy), nezhav1.MaxListedWorkers)]
	// The list is a map keyed by rank for server-side apply; keep it sorted by severity (the order
	// users read) — rank order within a severity.
	s.UnhealthyWorkers = nil
	for _, u := range listed {
		s.UnhealthyWorkers = append(s.UnhealthyWorkers, u.w)
	}
	s.UnhealthyWorkersTruncated = int32(len(unhealthy) - len(listed))
	s.WorkerCounts = counts

	downNodes := map[string][]string{}
	for p := range h.down {
		downNodes[p.rail] = append(downNodes[p.rail], p.node)
	}
	state := map[string]nezhav1.RailState{}
	for _, r := range h.downRails {
		state[r] = nezhav1.RailStateDown
	}
	for _, r := range h.unknownRails {
		state[r] = nezhav1.RailStateUnknown
	}
	s.Rails = make([]nezhav1.RailSummary, 0, len(railNames))
	for _, name := range railNames {
		sum := nezhav1.RailSummary{Name: name, State: nezhav1.RailStateHealthy, AttachedWorkers: attached[name], DownWorkers: downWorkers[name]}
		if st, ok := state[name]; ok {
			sum.State = st
		}
		if !h.placed {
			sum.State = nezhav1.RailStateUnknown
		}
		nodes := downNodes[name]
		sort.Strings(nodes)
		if len(nodes) > nezhav1.MaxListedNodes {
			sum.DownNodesTruncated = int32(len(nodes) - nezhav1.MaxListedNodes)
			nodes = nodes[:nezhav1.MaxListedNodes]
		}
		sum.DownNodes = nodes
		s.Rails = append(s.Rails, sum)
	}
}

// downMemory remembers, per job, the (rail, node) pairs its last written status recorded as
// down, so failover records and a stale agent's last word can be judged without a per-worker
// status. After an operator restart it is seeded from status.rails[].downNodes, exact unless a
// rail was down on more than MaxListedNodes nodes (the pairs left out are then reported lost
// once more).
type downMemory struct {
	mu   sync.Mutex
	jobs map[types.NamespacedName]map[railPair]bool
}

func (d *downMemory) get(job types.NamespacedName, s *nezhav1.MultiRailJobStatus) map[railPair]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if m, ok := d.jobs[job]; ok {
		return m
	}
	return downFromStatus(s)
}

func (d *downMemory) set(job types.NamespacedName, down map[railPair]string) {
	m := make(map[railPair]bool, len(down))
	for p := range down {
		m[p] = true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.jobs == nil {
		d.jobs = map[types.NamespacedName]map[railPair]bool{}
	}
	d.jobs[job] = m
}

func (d *downMemory) forget(job types.NamespacedName) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.jobs, job)
}

// downFromStatus reads back which (rail, node) pairs a written status recorded as down.
func downFromStatus(s *nezhav1.MultiRailJobStatus) map[railPair]bool {
	out := map[railPair]bool{}
	for _, r := range s.Rails {
		for _, n := range r.DownNodes {
			out[railPair{r.Name, n}] = true
		}
	}
	return out
}

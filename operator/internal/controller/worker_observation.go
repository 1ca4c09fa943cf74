package controller

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	corev1 "k8s.io/api/core/v1"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/builder"
	"github.com/nezha-project/nezha/operator/internal/netstatus"
)

// observation is what the job's pods say, before rail health is folded in.
type observation struct {
	// workers by rank, each with one rail entry per job rail (interface empty when Multus did
	// not report it).
	workers   []nezhav1.WorkerStatus
	pods      map[int32]*corev1.Pod
	running   int32
	ready     int32
	succeeded int32
	// failed describes failed workers ("worker 2 (pod x): reason").
	failed []string
	// unattached describes running workers missing a rail interface.
	unattached []string
	// missing are the rails a running worker has no interface on, by rank.
	missing map[int32][]string
	// badStatus describes running workers whose network-status annotation is unreadable.
	badStatus []string
}

// podRank returns a worker's rank: from nezha.io/rank on plain workers; for PyTorchJob pods
// Master 0 is rank 0 and Worker i is rank i+1, the order torchrun assigns.
func podRank(pod *corev1.Pod) (int32, bool) {
	if v, ok := pod.Labels[nezhav1.RankLabel]; ok {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 0 {
			return 0, false
		}
		return int32(n), true
	}
	idx, err := strconv.ParseInt(pod.Labels[kubeflowv1.ReplicaIndexLabel], 10, 32)
	if err != nil || idx < 0 {
		return 0, false
	}
	switch strings.ToLower(pod.Labels[kubeflowv1.ReplicaTypeLabel]) {
	case "master":
		return int32(idx), true
	case "worker":
		return int32(idx) + 1, true
	}
	return 0, false
}

// observePods builds worker statuses (in memory only: the job's status keeps a summary,
// status_summary.go) from the job's pods. Pods without a readable rank are
// ignored; when two pods claim a rank (a terminating one and its replacement) the newest wins.
func observePods(pods []corev1.Pod, rails []builder.Rail) observation {
	obs := observation{pods: map[int32]*corev1.Pod{}, missing: map[int32][]string{}}
	for i := range pods {
		p := &pods[i]
		rank, ok := podRank(p)
		if !ok {
			continue
		}
		if prev, dup := obs.pods[rank]; dup && prev.CreationTimestamp.After(p.CreationTimestamp.Time) {
			continue
		}
		obs.pods[rank] = p
	}
	ranks := make([]int32, 0, len(obs.pods))
	for rank := range obs.pods {
		ranks = append(ranks, rank)
	}
	sort.Slice(ranks, func(i, j int) bool { return ranks[i] < ranks[j] })

	for _, rank := range ranks {
		p := obs.pods[rank]
		w := nezhav1.WorkerStatus{
			Rank: rank, PodName: p.Name, NodeName: p.Spec.NodeName,
			Phase: p.Status.Phase, Ready: podReady(p),
		}
		who := fmt.Sprintf("worker %d (pod %s)", rank, p.Name)
		switch p.Status.Phase {
		case corev1.PodRunning:
			obs.running++
		case corev1.PodSucceeded:
			obs.succeeded++
		case corev1.PodFailed:
			obs.failed = append(obs.failed, who+": "+podFailureReason(p))
		}
		if w.Ready {
			obs.ready++
		}

		statuses, err := netstatus.Parse(p.Annotations[nadv1.NetworkStatusAnnot])
		if err != nil && p.Status.Phase == corev1.PodRunning {
			obs.badStatus = append(obs.badStatus, who+": "+err.Error())
		}
		found, missing := netstatus.RailAttachments(statuses, rails)
		byName := map[string]nezhav1.WorkerRailStatus{}
		for _, f := range found {
			byName[f.Name] = f
		}
		for _, rail := range rails {
			rs, ok := byName[rail.Name]
			if !ok {
				rs = nezhav1.WorkerRailStatus{Name: rail.Name}
			}
			w.Rails = append(w.Rails, rs)
		}
		if len(missing) > 0 && err == nil && p.Status.Phase == corev1.PodRunning {
			obs.missing[rank] = missing
			if len(statuses) == 0 {
				obs.unattached = append(obs.unattached, who+": no "+nadv1.NetworkStatusAnnot+" annotation")
			} else {
				obs.unattached = append(obs.unattached, fmt.Sprintf("%s: no interface for rail %s", who, strings.Join(missing, ", ")))
			}
		}
		obs.workers = append(obs.workers, w)
	}
	return obs
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podFailureReason is the most specific explanation a failed pod carries.
func podFailureReason(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			msg := fmt.Sprintf("container %s exited with code %d", cs.Name, t.ExitCode)
			if t.Reason != "" {
				msg += " (" + t.Reason + ")"
			}
			if last := lastLine(t.Message); last != "" {
				msg += ": " + truncate(last, 300)
			}
			return msg
		}
	}
	if p.Status.Reason != "" {
		return p.Status.Reason + ": " + p.Status.Message
	}
	return "pod failed"
}

// lastLine is the last non-empty line of a termination message (with FallbackToLogsOnError, the
// tail of the container's log: where a runtime that could not start says why).
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

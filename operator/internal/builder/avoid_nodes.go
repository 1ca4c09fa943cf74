package builder

import (
	corev1 "k8s.io/api/core/v1"
)

// AvoidNodes keeps a pod off the given nodes (nodes where one of the job's rails is down or quarantined) with a
// required node affinity on metadata.name. Required terms are ORed, so the exclusion is added to
// every term the user wrote (ANDed inside each) rather than as a term of its own.
func AvoidNodes(spec *corev1.PodSpec, nodes []string) {
	if len(nodes) == 0 {
		return
	}
	req := corev1.NodeSelectorRequirement{
		Key:      "metadata.name",
		Operator: corev1.NodeSelectorOpNotIn,
		Values:   append([]string(nil), nodes...),
	}
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
	}
	sel := na.RequiredDuringSchedulingIgnoredDuringExecution
	if len(sel.NodeSelectorTerms) == 0 {
		sel.NodeSelectorTerms = []corev1.NodeSelectorTerm{{}}
	}
	for i := range sel.NodeSelectorTerms {
		sel.NodeSelectorTerms[i].MatchFields = append(sel.NodeSelectorTerms[i].MatchFields, req)
	}
}

// AvoidedNodesAnnotation on a worker pod lists, comma-separated and sorted, the nodes it was
// built to avoid (absent when none). Node affinity is immutable, so the operator compares it with
// the current set to find unscheduled workers whose exclusion went stale.
const AvoidedNodesAnnotation = "nezha.io/avoided-nodes"

// AvoidedNodesOf returns the avoided-node set a pod was built with, in the annotation's form.
func AvoidedNodesOf(pod *corev1.Pod) string {
	return pod.Annotations[AvoidedNodesAnnotation]
}

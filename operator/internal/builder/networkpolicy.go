package builder

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// MaxProcessesPerPod bounds the control ports a worker pod may use: process k of a pod listens on
// ControlPort + k (NEZHA_LOCAL_RANK), so the policy opens ControlPort..ControlPort+63.
const MaxProcessesPerPod = 64

// NetworkPolicyOptions says who besides the job's own pods may reach its workers.
type NetworkPolicyOptions struct {
	// OperatorNamespace and OperatorPodLabels select the operator's pods (drain/restore, status).
	OperatorNamespace string
	OperatorPodLabels map[string]string
	// MonitoringNamespace may scrape the runtime's /metrics (empty: nobody else).
	MonitoringNamespace string
}

// NetworkPolicy isolates a job's worker pods on the pod network: the job's own pods may reach
// everything (rendezvous, torch's store, the training's own traffic), the operator and the
// monitoring namespace only the runtime's control ports, everybody else nothing. Rail interfaces
// (Multus secondary networks) are outside Kubernetes NetworkPolicy: their isolation is the rail
// network's, plus the runtime's token handshake (docs/security.md).
func NetworkPolicy(job *nezhav1.MultiRailJob, o NetworkPolicyOptions) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: objectMeta(job, NetworkPolicyName(job.Name)),
		Spec:       WorkersPolicySpec(map[string]string{nezhav1.JobNameLabel: job.Name}, o),
	}
}

// WorkersPolicySpec is the rules of NetworkPolicy for the pods workers selects: they may reach
// each other on every port; the operator and monitoring only the control ports. The pod webhook
// uses it for the pods of a JobSet or PyTorchJob (selected by that controller's own label).
func WorkersPolicySpec(workers map[string]string, o NetworkPolicyOptions) networkingv1.NetworkPolicySpec {
	tcp := ptr.To(corev1.ProtocolTCP)
	controlPorts := []networkingv1.NetworkPolicyPort{{
		Protocol: tcp,
		Port:     ptr.To(intstr.FromInt32(nezhav1.ControlPort)),
		EndPort:  ptr.To(int32(nezhav1.ControlPort + MaxProcessesPerPod - 1)),
	}}
	control := []networkingv1.NetworkPolicyPeer{{
		NamespaceSelector: namespaceNamed(o.OperatorNamespace),
		PodSelector:       &metav1.LabelSelector{MatchLabels: o.OperatorPodLabels},
	}}
	if o.MonitoringNamespace != "" {
		control = append(control, networkingv1.NetworkPolicyPeer{NamespaceSelector: namespaceNamed(o.MonitoringNamespace)})
	}
	return networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: workers},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{
			{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: workers}}}},
			{Ports: controlPorts, From: control},
		},
	}
}

// NetworkPolicyName is the name of a job's NetworkPolicy.
func NetworkPolicyName(job string) string { return job + "-workers" }

func namespaceNamed(ns string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}
}

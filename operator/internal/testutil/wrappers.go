// Package testutil holds builder wrappers for tests: MakeX(...).Y(...).Obj().
package testutil

import (
	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// MacvlanConfig is a CNI config for a test rail on host interface master.
func MacvlanConfig(master string) string {
	return `{"cniVersion":"1.0.0","type":"macvlan","master":"` + master + `","mode":"bridge","ipam":{"type":"host-local","subnet":"10.77.0.0/24"}}`
}

// RailClassWrapper builds RailClasses.
type RailClassWrapper struct{ nezhav1.RailClass }

// MakeRailClass returns a valid tcp RailClass with an inline macvlan config on "eth1".
func MakeRailClass(name string) *RailClassWrapper {
	return &RailClassWrapper{nezhav1.RailClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: nezhav1.RailClassSpec{
			Network:       nezhav1.RailNetwork{Config: MacvlanConfig("eth1")},
			Transport:     nezhav1.TransportTCP,
			HostInterface: nezhav1.HostInterfaceSelector{Name: "eth1"},
		},
	}}
}

func (w *RailClassWrapper) Obj() *nezhav1.RailClass { return w.RailClass.DeepCopy() }

func (w *RailClassWrapper) Config(c string) *RailClassWrapper {
	w.Spec.Network = nezhav1.RailNetwork{Config: c}
	return w
}

func (w *RailClassWrapper) NADRef(ns, name string) *RailClassWrapper {
	w.Spec.Network = nezhav1.RailNetwork{NADRef: &nezhav1.NADReference{Namespace: ns, Name: name}}
	return w
}

// Network sets the network verbatim (to build invalid combinations).
func (w *RailClassWrapper) Network(n nezhav1.RailNetwork) *RailClassWrapper {
	w.Spec.Network = n
	return w
}

func (w *RailClassWrapper) Transport(t nezhav1.Transport) *RailClassWrapper {
	w.Spec.Transport = t
	return w
}

func (w *RailClassWrapper) SRIOV(resourceName string) *RailClassWrapper {
	w.Spec.SRIOVResourceName = resourceName
	return w
}

func (w *RailClassWrapper) HostInterface(h nezhav1.HostInterfaceSelector) *RailClassWrapper {
	w.Spec.HostInterface = h
	return w
}

func (w *RailClassWrapper) MTU(m int32) *RailClassWrapper {
	w.Spec.MTU = &m
	return w
}

func (w *RailClassWrapper) BandwidthMbps(b int64) *RailClassWrapper {
	w.Spec.ExpectedBandwidthMbps = &b
	return w
}

// JobWrapper builds MultiRailJobs.
type JobWrapper struct{ nezhav1.MultiRailJob }

// WorkerTemplate is a minimal worker pod template.
func WorkerTemplate() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "trainer", Image: "trainer:1"}},
	}}
}

// MakeJob returns a valid job with one worker on the given rails.
func MakeJob(name, ns string, rails ...string) *JobWrapper {
	return &JobWrapper{nezhav1.MultiRailJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: nezhav1.MultiRailJobSpec{
			Rails:   rails,
			Workers: &nezhav1.WorkerSpec{Replicas: 1, Template: WorkerTemplate()},
		},
	}}
}

func (w *JobWrapper) Obj() *nezhav1.MultiRailJob { return w.MultiRailJob.DeepCopy() }

func (w *JobWrapper) Rails(r ...string) *JobWrapper {
	w.Spec.Rails = r
	return w
}

func (w *JobWrapper) Replicas(n int32) *JobWrapper {
	if w.Spec.Workers == nil {
		w.Spec.Workers = &nezhav1.WorkerSpec{Template: WorkerTemplate()}
	}
	w.Spec.Workers.Replicas = n
	return w
}

func (w *JobWrapper) Template(t corev1.PodTemplateSpec) *JobWrapper {
	w.Spec.Workers.Template = t
	return w
}

func (w *JobWrapper) NoWorkers() *JobWrapper {
	w.Spec.Workers = nil
	return w
}

func (w *JobWrapper) Policy(p nezhav1.RailPolicy) *JobWrapper {
	w.Spec.Runtime.Policy = p
	return w
}

func (w *JobWrapper) ColdThreshold(q string) *JobWrapper {
	v := resource.MustParse(q)
	w.Spec.Runtime.ColdThreshold = &v
	return w
}

func (w *JobWrapper) RailTimeout(d metav1.Duration) *JobWrapper {
	w.Spec.Runtime.Failover.RailTimeout = &d
	return w
}

// Integration sets spec.runtime.integration.
func (w *JobWrapper) Integration(i ...nezhav1.Integration) *JobWrapper {
	w.Spec.Runtime.Integration = i
	return w
}

func (w *JobWrapper) InjectRuntime() *JobWrapper {
	w.Spec.Runtime.InjectRuntime = true
	return w
}

func (w *JobWrapper) Annotation(k, v string) *JobWrapper {
	if w.Annotations == nil {
		w.Annotations = map[string]string{}
	}
	w.Annotations[k] = v
	return w
}

func (w *JobWrapper) MinHealthyRails(n int32) *JobWrapper {
	w.Spec.FailurePolicy.MinHealthyRails = &n
	return w
}

func (w *JobWrapper) OnRailLoss(a nezhav1.RailLossAction) *JobWrapper {
	w.Spec.FailurePolicy.OnRailLoss = a
	return w
}

// OnPreflightFailure sets spec.failurePolicy.onPreflightFailure.
func (w *JobWrapper) OnPreflightFailure(a nezhav1.PreflightAction) *JobWrapper {
	w.Spec.FailurePolicy.OnPreflightFailure = a
	return w
}

// PyTorchJob switches the job to pytorchJob mode with a Master and workers Worker replicas.
func (w *JobWrapper) PyTorchJob(workers int32) *JobWrapper {
	w.Spec.Workers = nil
	w.Spec.PyTorchJob = &kubeflowv1.PyTorchJobSpec{
		PyTorchReplicaSpecs: map[kubeflowv1.ReplicaType]*kubeflowv1.ReplicaSpec{
			kubeflowv1.PyTorchJobReplicaTypeMaster: {
				Replicas: ptr.To[int32](1),
				Template: pytorchTemplate(),
			},
			kubeflowv1.PyTorchJobReplicaTypeWorker: {
				Replicas: ptr.To(workers),
				Template: pytorchTemplate(),
			},
		},
	}
	return w
}

func pytorchTemplate() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "pytorch", Image: "trainer:1"}},
	}}
}

// RailNodeWrapper builds RailNodes.
type RailNodeWrapper struct{ nezhav1.RailNode }

// MakeRailNode starts a RailNode as a live agent writes it: observedTime is now.
func MakeRailNode(node string) *RailNodeWrapper {
	now := metav1.Now()
	return &RailNodeWrapper{nezhav1.RailNode{ObjectMeta: metav1.ObjectMeta{Name: node},
		Status: nezhav1.RailNodeStatus{ObservedTime: &now}}}
}

// ObservedAt sets status.observedTime (nil: never stamped), to play an agent gone quiet.
func (w *RailNodeWrapper) ObservedAt(t *metav1.Time) *RailNodeWrapper {
	w.Status.ObservedTime = t
	return w
}

func (w *RailNodeWrapper) Obj() *nezhav1.RailNode { return w.RailNode.DeepCopy() }

// Rail adds a rail entry; up sets operState up with carrier, otherwise down without carrier.
func (w *RailNodeWrapper) Rail(name, iface string, up bool) *RailNodeWrapper {
	s := nezhav1.RailInterfaceStatus{Name: name, Interface: iface, OperState: nezhav1.LinkDown, SpeedMbps: 10000}
	if up {
		s.OperState, s.Carrier = nezhav1.LinkUp, true
	}
	w.Status.Rails = append(w.Status.Rails, s)
	return w
}

package v1alpha1

import (
	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxRails bounds spec.rails; more rails than NIC ports on a server makes no sense and the
// bound keeps CEL cost estimates small.
const MaxRails = 16

// MaxFailoverHistory bounds status.failoverHistory; older entries are dropped first.
const MaxFailoverHistory = 32

// MaxReplicas bounds spec.workers.replicas. The status does not grow with the workers (it keeps
// counts, per-rail summaries and at most MaxListedWorkers workers), so the bound is the worker
// hostname: "<name>-<rank>" must fit a 63-character DNS label with a 57-character job name.
const MaxReplicas = 65536

// MaxListedWorkers bounds status.unhealthyWorkers: the worst workers are listed, the rest counted
// in status.unhealthyWorkersTruncated.
const MaxListedWorkers = 16

// MaxListedNodes bounds status.rails[].downNodes; the rest are counted in downNodesTruncated.
const MaxListedNodes = 32

// RailPolicy is how the runtime spreads a collective over the rails.
// +kubebuilder:validation:Enum=adaptive;static;single
type RailPolicy string

const (
	// PolicyAdaptive splits large collectives by ratios learned online (hot start) and sends small
	// ones whole on the lowest-latency rail (cold start).
	PolicyAdaptive RailPolicy = "adaptive"
	// PolicyStatic splits every collective by fixed bandwidth-proportional ratios.
	PolicyStatic RailPolicy = "static"
	// PolicySingle uses only the best rail; the others are failover spares.
	PolicySingle RailPolicy = "single"
)

// Integration is a way training code reaches the job's rails.
// +kubebuilder:validation:Enum=collectives;nccl
type Integration string

const (
	// IntegrationCollectives: Nezha's own collectives (C API, Python package, the
	// torch.distributed backend "nezha" for CPU tensors).
	IntegrationCollectives Integration = "collectives"
	// IntegrationNCCL: the NCCL net plugin libnccl-net-nezha.so, so an unchanged
	// backend="nccl" job stripes every NCCL connection over the rails.
	IntegrationNCCL Integration = "nccl"
)

// RailLossAction is what the operator does when fewer rails than needed stay healthy.
// +kubebuilder:validation:Enum=ContinueDegraded;Restart
type RailLossAction string

const (
	// ContinueDegraded keeps the job running on the surviving rails and marks it Degraded.
	ContinueDegraded RailLossAction = "ContinueDegraded"
	// Restart deletes the workers so they are recreated (with the same ranks) once enough rails
	// are healthy again.
	Restart RailLossAction = "Restart"
)

// PreflightAction is what a job does when a rail fails the runtime's start-up check (every rank
// connects every rail to its peers and checks a short transfer before the first collective).
// +kubebuilder:validation:Enum=Fail;StartWithoutRail;Wait
type PreflightAction string

const (
	// PreflightFail stops the start on every rank with one error naming the failing pairs.
	PreflightFail PreflightAction = "Fail"
	// PreflightStartWithoutRail starts on the rails that passed; a failing rail joins later
	// through the runtime's re-admission (an end-to-end probe) once it is healthy.
	PreflightStartWithoutRail PreflightAction = "StartWithoutRail"
	// PreflightWait holds the start until every rail passes (the runtime's re-admission), for at
	// most the runtime's NEZHA_PREFLIGHT_WAIT_MS (10 minutes), then fails like Fail.
	PreflightWait PreflightAction = "Wait"
)

// MultiRailJob is a distributed training job whose workers get one interface on every rail and
// run the Nezha runtime over all of them.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mrj,categories=nezha
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.workersReady`,description="ready workers / workers"
// +kubebuilder:printcolumn:name="Rails",type=string,JSONPath=`.status.railsHealthy`,description="healthy rails / rails"
// +kubebuilder:printcolumn:name="Unhealthy",type=integer,JSONPath=`.status.workerCounts.unhealthy`,description="workers not running ready on every rail (not finished ones)"
// +kubebuilder:printcolumn:name="Pending",type=integer,JSONPath=`.status.workerCounts.pending`,priority=1
// +kubebuilder:printcolumn:name="Running",type=integer,JSONPath=`.status.workerCounts.running`,priority=1
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.workerCounts.failed`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 57 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS-1035 label of at most 57 characters: it names the headless Service and the worker hostnames <name>-<rank>"
type MultiRailJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec MultiRailJobSpec `json:"spec"`
	// +optional
	Status MultiRailJobStatus `json:"status,omitempty"`
}

// MultiRailJobSpec is the desired state of a MultiRailJob.
// +kubebuilder:validation:XValidation:rule="has(self.workers) != has(self.pytorchJob)",message="spec: exactly one of workers or pytorchJob must be set"
// +kubebuilder:validation:XValidation:rule="!has(self.failurePolicy) || !has(self.failurePolicy.minHealthyRails) || self.failurePolicy.minHealthyRails <= size(self.rails)",message="spec.failurePolicy.minHealthyRails must not exceed the number of spec.rails"
// +kubebuilder:validation:XValidation:rule="self.rails == oldSelf.rails",message="spec.rails is immutable"
type MultiRailJobSpec struct {
	// rails names the RailClasses every worker attaches to, in order: rail i gets the pod
	// interface "nz<i>".
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.all(r, self.exists_one(s, s == r))",message="spec.rails must not contain duplicates"
	Rails []string `json:"rails"`

	// workers runs plain pods, one per rank. Exactly one of workers and pytorchJob is set.
	// +optional
	Workers *WorkerSpec `json:"workers,omitempty"`

	// pytorchJob runs the job as a Kubeflow PyTorchJob (kubeflow.org/v1) owned by this
	// MultiRailJob; the operator injects the rails into its Master and Worker templates. Its
	// schema is left to the PyTorchJob CRD, which validates it when the operator creates the
	// PyTorchJob (embedding it here would push this CRD past etcd's object size limit).
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	PyTorchJob *kubeflowv1.PyTorchJobSpec `json:"pytorchJob,omitempty"`

	// runtime configures the Nezha runtime in every worker.
	// +optional
	Runtime RuntimeSpec `json:"runtime,omitempty"`

	// failurePolicy says how much rail loss the job tolerates.
	// +optional
	FailurePolicy FailurePolicy `json:"failurePolicy,omitempty"`
}

// WorkerSpec is a set of identical worker pods, one per rank.
// +kubebuilder:validation:XValidation:rule="!has(self.template.spec.restartPolicy) || self.template.spec.restartPolicy in ['Never', 'OnFailure']",message="spec.workers.template.spec.restartPolicy must be Never or OnFailure"
type WorkerSpec struct {
	// replicas is the number of workers (the world size), at most 65536 (worker hostnames are
	// "<name>-<rank>"; the status does not grow with the workers).
	// Immutable: every worker's NEZHA_WORLD_SIZE is fixed when it is created.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.workers.replicas is immutable"
	Replicas int32 `json:"replicas"`

	// template of every worker pod. The operator adds the rail networks, SR-IOV resources and
	// the NEZHA_* environment; restartPolicy must be Never or OnFailure (unset means Never).
	// +required
	Template corev1.PodTemplateSpec `json:"template"`
}

// RuntimeSpec configures the Nezha runtime inside the workers.
type RuntimeSpec struct {
	// policy for spreading collectives over rails (NEZHA_POLICY).
	// +optional
	// +kubebuilder:default=adaptive
	Policy RailPolicy `json:"policy,omitempty"`

	// coldThreshold is the message size below which a collective goes whole over the
	// lowest-latency rail (NEZHA_COLD_THRESHOLD, bytes). Unset lets the runtime choose ("auto").
	// +optional
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : !self.startsWith('-')",message="spec.runtime.coldThreshold must not be negative"
	ColdThreshold *resource.Quantity `json:"coldThreshold,omitempty"`

	// rendezvousPort is the TCP port rank 0 listens on for the runtime rendezvous.
	// +optional
	// +kubebuilder:default=29400
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=65535
	RendezvousPort int32 `json:"rendezvousPort,omitempty"`

	// failover timeouts of the runtime.
	// +optional
	Failover FailoverTimeouts `json:"failover,omitempty"`

	// injectRuntime adds an init container that copies libnezha and its Python package from the
	// operator's runtime image (its configuration's runtime.image) into the workers, for user
	// images that do not ship the runtime. The annotation nezha.io/inject-runtime: "true" does the
	// same.
	// +optional
	InjectRuntime bool `json:"injectRuntime,omitempty"`

	// integration lists how the workers' training code uses the rails: "collectives" (the
	// default: Nezha's collectives and torch backend) and/or "nccl" (the NCCL net plugin: the
	// operator sets NCCL_NET_PLUGIN=nezha, NCCL_NET=nezha so NCCL fails rather than quietly
	// using its own transports, puts /opt/nezha/lib first on LD_LIBRARY_PATH, and points
	// NCCL_SOCKET_IFNAME at the pod network for NCCL's bootstrap unless the template sets it).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=2
	Integration []Integration `json:"integration,omitempty"`
}

// UsesNCCL reports whether the job asks for the NCCL net plugin.
func (r RuntimeSpec) UsesNCCL() bool {
	for _, i := range r.Integration {
		if i == IntegrationNCCL {
			return true
		}
	}
	return false
}

// FailoverTimeouts bound how long the runtime waits before it declares a rail dead.
type FailoverTimeouts struct {
	// railTimeout is how long a transfer on a rail may stall before the rail is declared failed
	// and its share is replayed on the others (NEZHA_IO_TIMEOUT_MS, 100ms to 1h; runtime
	// default 30s).
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('100ms') && duration(self) <= duration('1h')",message="spec.runtime.failover.railTimeout must be between 100ms and 1h"
	RailTimeout *metav1.Duration `json:"railTimeout,omitempty"`

	// probeInterval is how often a failed rail is probed to bring it back. Reserved: the runtime
	// does not bring failed rails back yet (a failed rail stays failed for the job's life), so
	// the operator does not pass this on.
	// +optional
	ProbeInterval *metav1.Duration `json:"probeInterval,omitempty"`
}

// FailurePolicy is the job's tolerance of rail loss.
type FailurePolicy struct {
	// minHealthyRails is the fewest healthy rails the job runs on; below it onRailLoss applies.
	// Defaults to 1. Must not exceed len(spec.rails).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	MinHealthyRails *int32 `json:"minHealthyRails,omitempty"`

	// onRailLoss is what happens when fewer than minHealthyRails rails are healthy on some worker.
	// +optional
	// +kubebuilder:default=ContinueDegraded
	OnRailLoss RailLossAction `json:"onRailLoss,omitempty"`

	// onPreflightFailure is what happens when a rail fails the start-up check between some pair
	// of ranks (status: the RailsVerified condition lists the failing rank, rail and peer).
	// +optional
	// +kubebuilder:default=StartWithoutRail
	OnPreflightFailure PreflightAction `json:"onPreflightFailure,omitempty"`
}

// JobPhase is a one-word summary of a MultiRailJob, for kubectl; conditions carry the detail.
// +kubebuilder:validation:Enum=Pending;Running;Degraded;Succeeded;Failed
type JobPhase string

const (
	PhasePending   JobPhase = "Pending"
	PhaseRunning   JobPhase = "Running"
	PhaseDegraded  JobPhase = "Degraded"
	PhaseSucceeded JobPhase = "Succeeded"
	PhaseFailed    JobPhase = "Failed"
)

// MultiRailJobStatus is the observed state of a MultiRailJob.
type MultiRailJobStatus struct {
	// observedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase summarises the conditions.
	// +optional
	Phase JobPhase `json:"phase,omitempty"`

	// conditions: NetworksReady, RailsVerified, RailsHealthy, Degraded, Succeeded, Failed.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// workers is the desired number of workers (world size).
	// +optional
	Workers int32 `json:"workers,omitempty"`
	// readyWorkers counts workers whose pod is Ready.
	// +optional
	ReadyWorkers int32 `json:"readyWorkers,omitempty"`
	// workersReady is "readyWorkers/workers", for kubectl get.
	// +optional
	WorkersReady string `json:"workersReady,omitempty"`

	// healthyRails is the number of rails healthy on every node that runs a worker.
	// +optional
	HealthyRails int32 `json:"healthyRails,omitempty"`
	// railsHealthy is "healthyRails/len(spec.rails)", for kubectl get.
	// +optional
	RailsHealthy string `json:"railsHealthy,omitempty"`

	// workerCounts counts the workers by the phase of their pod, and the unhealthy ones. The
	// status does not hold one entry per worker (10,000 would not fit etcd's object size limit):
	// per-worker detail is each pod's own (node, phase, Ready, Multus network-status) and its
	// node's RailNode (rail health); see docs/operator-scale.md.
	// +optional
	WorkerCounts WorkerCounts `json:"workerCounts,omitempty"`

	// rails summarises each of spec.rails over the workers, in spec order.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Rails []RailSummary `json:"rails,omitempty"`

	// unhealthyWorkers describes the worst unhealthy workers (failed first, then rail down, rail
	// interface missing, not ready, pending), by rank within each; at most 16.
	// +optional
	// +listType=map
	// +listMapKey=rank
	// +kubebuilder:validation:MaxItems=16
	UnhealthyWorkers []WorkerStatus `json:"unhealthyWorkers,omitempty"`
	// unhealthyWorkersTruncated counts the unhealthy workers left out of unhealthyWorkers.
	// +optional
	UnhealthyWorkersTruncated int32 `json:"unhealthyWorkersTruncated,omitempty"`

	// failoverHistory records rail losses and recoveries, newest last, at most 32 entries.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	FailoverHistory []FailoverRecord `json:"failoverHistory,omitempty"`

	// drainedRails are the rails the operator drained through the runtime's control endpoint
	// because node agents report them down (or an admin quarantined them) while the runtime still
	// used them; each is restored, and leaves this list, once every worker's node reports it up.
	// +optional
	// +listType=map
	// +listMapKey=rail
	// +kubebuilder:validation:MaxItems=64
	DrainedRails []DrainedRail `json:"drainedRails,omitempty"`

	// restarts counts how often onRailLoss=Restart recreated the workers.
	// +optional
	Restarts int32 `json:"restarts,omitempty"`

	// startTime is when the operator first created the workers.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// completionTime is when the job reached Succeeded or Failed.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
}

// WorkerCounts counts a job's workers by the phase of their pod.
type WorkerCounts struct {
	// pods is the number of worker pods that exist (at most one per rank).
	// +optional
	Pods int32 `json:"pods,omitempty"`
	// pending, running, succeeded, failed, unknown count the pods by phase.
	// +optional
	Pending int32 `json:"pending,omitempty"`
	// +optional
	Running int32 `json:"running,omitempty"`
	// +optional
	Succeeded int32 `json:"succeeded,omitempty"`
	// +optional
	Failed int32 `json:"failed,omitempty"`
	// +optional
	Unknown int32 `json:"unknown,omitempty"`
	// unhealthy counts the workers that have not finished and are not running Ready with an
	// interface on every rail that is up: the ones status.unhealthyWorkers picks from.
	// +optional
	Unhealthy int32 `json:"unhealthy,omitempty"`
}

// RailState is one rail's state over all of a job's workers.
// +kubebuilder:validation:Enum=Healthy;Down;Unknown
type RailState string

const (
	// RailStateHealthy: up on every node that runs a worker (as far as anyone reports).
	RailStateHealthy RailState = "Healthy"
	// RailStateDown: down (or quarantined, or failed in a runtime) under at least one worker.
	RailStateDown RailState = "Down"
	// RailStateUnknown: not down anywhere but up only on the word of a stale agent somewhere.
	RailStateUnknown RailState = "Unknown"
)

// RailSummary is one rail of a job over all its workers.
type RailSummary struct {
	// name of the RailClass.
	// +required
	Name string `json:"name"`
	// state of the rail over the workers' nodes.
	// +optional
	State RailState `json:"state,omitempty"`
	// attachedWorkers counts workers with an interface on the rail (Multus network-status).
	// +optional
	AttachedWorkers int32 `json:"attachedWorkers,omitempty"`
	// downWorkers counts scheduled workers on whose node (or in whose runtime) the rail is down.
	// +optional
	DownWorkers int32 `json:"downWorkers,omitempty"`
	// downNodes lists nodes that run a worker and report the rail down (or quarantined, or whose
	// runtime reports it failed), sorted, at most 32.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	DownNodes []string `json:"downNodes,omitempty"`
	// downNodesTruncated counts the nodes left out of downNodes.
	// +optional
	DownNodesTruncated int32 `json:"downNodesTruncated,omitempty"`
}

// WorkerStatus is one worker (rank) as observed from its pod.
type WorkerStatus struct {
	// rank of the worker.
	// +required
	Rank int32 `json:"rank"`
	// podName of the worker's pod.
	// +optional
	PodName string `json:"podName,omitempty"`
	// nodeName the pod runs on.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// phase of the pod.
	// +optional
	Phase corev1.PodPhase `json:"phase,omitempty"`
	// ready is the pod's Ready condition.
	// +optional
	Ready bool `json:"ready,omitempty"`
	// reason says why the worker is listed as unhealthy.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Reason string `json:"reason,omitempty"`
	// rails holds the worker's interface on each rail, from Multus network-status.
	// +optional
	// +listType=map
	// +listMapKey=name
	Rails []WorkerRailStatus `json:"rails,omitempty"`
}

// WorkerRailStatus is a worker's attachment to one rail.
type WorkerRailStatus struct {
	// name of the RailClass.
	// +required
	Name string `json:"name"`
	// interface name inside the pod (e.g. nz0).
	// +optional
	Interface string `json:"interface,omitempty"`
	// ips of the interface.
	// +optional
	// +listType=atomic
	IPs []string `json:"ips,omitempty"`
	// mac address of the interface.
	// +optional
	MAC string `json:"mac,omitempty"`
	// pciAddress of the device (SR-IOV VF or host device), from network-status device-info.
	// +optional
	PCIAddress string `json:"pciAddress,omitempty"`
	// rdmaDevice is the RDMA device name (e.g. mlx5_3), from network-status device-info.
	// +optional
	RDMADevice string `json:"rdmaDevice,omitempty"`
	// healthy is false when the node's RailNode reports this rail down or quarantined.
	// +optional
	Healthy bool `json:"healthy,omitempty"`
}

// DrainedRail is a rail the operator took out of a running job through the runtime's control
// endpoint.
type DrainedRail struct {
	// rail is the RailClass name.
	// +required
	Rail string `json:"rail"`
	// node whose agent reported the rail down (the first one found).
	// +optional
	Node string `json:"node,omitempty"`
	// rank whose runtime was asked to drain (the runtime applies it on every rank).
	// +optional
	Rank int32 `json:"rank,omitempty"`
	// reason is what the node's RailNode said about the rail.
	// +optional
	Reason string `json:"reason,omitempty"`
	// time the drain was accepted by the runtime.
	// +optional
	Time metav1.Time `json:"time,omitempty"`
}

// FailoverAction says what a FailoverRecord records.
// +kubebuilder:validation:Enum=RailLost;RailRecovered;Restarted
type FailoverAction string

const (
	FailoverRailLost      FailoverAction = "RailLost"
	FailoverRailRecovered FailoverAction = "RailRecovered"
	FailoverRestarted     FailoverAction = "Restarted"
)

// FailoverRecord is one entry of the failover history.
type FailoverRecord struct {
	// time the operator observed the change.
	// +required
	Time metav1.Time `json:"time"`
	// action taken or observed.
	// +required
	Action FailoverAction `json:"action"`
	// rail (RailClass name) concerned; empty for Restarted.
	// +optional
	Rail string `json:"rail,omitempty"`
	// node where the rail changed state.
	// +optional
	Node string `json:"node,omitempty"`
	// message in words.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// +kubebuilder:object:root=true

// MultiRailJobList is a list of MultiRailJobs.
type MultiRailJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MultiRailJob `json:"items"`
}

func init() {
	SchemeBuilder.Register(&MultiRailJob{}, &MultiRailJobList{})
}

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Transport is how the runtime moves bytes over a rail.
// +kubebuilder:validation:Enum=tcp;rdma;sharp
type Transport string

const (
	// TransportTCP uses kernel TCP sockets bound to the rail interface.
	TransportTCP Transport = "tcp"
	// TransportRDMA uses RDMA verbs on the rail's RDMA device (RoCE or InfiniBand).
	TransportRDMA Transport = "rdma"
	// TransportSHARP offloads reductions to the switch (in-network aggregation).
	TransportSHARP Transport = "sharp"
)

// RailClass describes one rail: a network every worker of a MultiRailJob gets an interface on.
// It is cluster-scoped, like a StorageClass: administrators define the rails of a cluster once and
// jobs name them in spec.rails.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=rclass,categories=nezha
// +kubebuilder:printcolumn:name="Transport",type=string,JSONPath=`.spec.transport`
// +kubebuilder:printcolumn:name="SR-IOV",type=string,JSONPath=`.spec.sriovResourceName`,priority=1
// +kubebuilder:printcolumn:name="Mbit/s",type=integer,JSONPath=`.spec.expectedBandwidthMbps`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RailClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec RailClassSpec `json:"spec"`
}

// RailClassSpec is the administrator's description of a rail.
type RailClassSpec struct {
	// allowedNamespaces selects the namespaces whose jobs and pods may use this rail (their
	// namespace's labels, e.g. kubernetes.io/metadata.name). Unset: every namespace. The operator
	// refuses a job (condition NetworksReady=False, RailClassNotAllowed) and the pod webhook a pod
	// in a namespace it does not select, naming the RailClass and the namespace: with an inline
	// config the operator creates the rail's NAD in the job's namespace, so Multus' own namespace
	// isolation does not apply (docs/security.md "Tenant model").
	// +optional
	AllowedNamespaces *metav1.LabelSelector `json:"allowedNamespaces,omitempty"`

	// network is the secondary network (Multus NetworkAttachmentDefinition) that attaches a
	// worker to this rail.
	// +required
	Network RailNetwork `json:"network"`

	// sriovResourceName is the device-plugin resource (e.g. "nvidia.com/mlnx_rail0") a worker must
	// request to get a virtual function on this rail. Empty for rails without SR-IOV (macvlan,
	// ipvlan, host-device).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	SRIOVResourceName string `json:"sriovResourceName,omitempty"`

	// transport the runtime uses on this rail.
	// +optional
	// +kubebuilder:default=tcp
	Transport Transport `json:"transport,omitempty"`

	// hostInterface tells the rail agent and the nezha-rail CNI plugin which host NIC backs this
	// rail on each node.
	// +required
	HostInterface HostInterfaceSelector `json:"hostInterface"`

	// expectedBandwidthMbps is the rail's nominal bandwidth in Mbit/s. The rail agent compares it
	// with the link speed it reads; the runtime (NEZHA_RAILS "@Mbit/s") reports the rail degraded
	// when it measures less than half of it, and seeds its split with it when it runs no probe.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ExpectedBandwidthMbps *int64 `json:"expectedBandwidthMbps,omitempty"`

	// mtu of the rail interface inside the pod, set by the nezha-rail CNI plugin (the operator
	// puts it on the config's nezha-rail entry, chaining one if there is none). Needs
	// spec.network.config; unset keeps what the network's CNI config sets.
	// +optional
	// +kubebuilder:validation:Minimum=576
	// +kubebuilder:validation:Maximum=65535
	MTU *int32 `json:"mtu,omitempty"`
}

// RailNetwork is the Multus network of a rail: either a CNI config the operator turns into a
// NetworkAttachmentDefinition in each job's namespace, or a reference to an existing one.
// +kubebuilder:validation:XValidation:rule="has(self.config) != has(self.nadRef)",message="spec.network: exactly one of config or nadRef must be set"
type RailNetwork struct {
	// config is the CNI configuration (JSON, as in NetworkAttachmentDefinition spec.config). The
	// operator creates a NetworkAttachmentDefinition with it in the namespace of every job that
	// uses this rail, owned by the job.
	// +optional
	// +kubebuilder:validation:MinLength=2
	Config string `json:"config,omitempty"`

	// nadRef names an existing NetworkAttachmentDefinition. An empty namespace means the job's
	// own namespace.
	// +optional
	NADRef *NADReference `json:"nadRef,omitempty"`
}

// NADReference points at a NetworkAttachmentDefinition.
type NADReference struct {
	// name of the NetworkAttachmentDefinition.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// namespace of the NetworkAttachmentDefinition; empty means the job's namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
}

// HostInterfaceSelector finds a rail's host NIC on a node. Exactly one field is set.
// +kubebuilder:validation:XValidation:rule="[has(self.name), has(self.pciAddress), has(self.perNode)].filter(x, x).size() == 1",message="spec.hostInterface: exactly one of name, pciAddress or perNode must be set"
type HostInterfaceSelector struct {
	// name is the interface name, the same on every node (e.g. "ens1f0").
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[^\s/:]+$`
	Name string `json:"name,omitempty"`

	// pciAddress is the NIC's PCI address in domain:bus:device.function form
	// (e.g. "0000:3b:00.0"), resolved through /sys/class/net/*/device on each node.
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`
	PCIAddress string `json:"pciAddress,omitempty"`

	// perNode maps a node name to the interface name on that node, for clusters whose nodes
	// name their NICs differently. Nodes missing from the map have no interface on this rail.
	// +optional
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(self[k]) > 0 && size(self[k]) <= 15)",message="spec.hostInterface.perNode: every interface name must be 1-15 characters"
	PerNode map[string]string `json:"perNode,omitempty"`
}

// +kubebuilder:object:root=true

// RailClassList is a list of RailClasses.
type RailClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RailClass `json:"items"`
}

func init() {
	SchemeBuilder.Register(&RailClass{}, &RailClassList{})
}

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LinkOperState is the kernel's RFC 2863 operational state of an interface, as read from
// /sys/class/net/<if>/operstate or netlink IFLA_OPERSTATE.
// +kubebuilder:validation:Enum=up;down;unknown;dormant;lowerlayerdown;notpresent;testing
type LinkOperState string

const (
	LinkUp             LinkOperState = "up"
	LinkDown           LinkOperState = "down"
	LinkUnknown        LinkOperState = "unknown"
	LinkDormant        LinkOperState = "dormant"
	LinkLowerLayerDown LinkOperState = "lowerlayerdown"
	LinkNotPresent     LinkOperState = "notpresent"
	LinkTesting        LinkOperState = "testing"
)

// RailNode reports the health of every rail's host interface on one node. There is one RailNode
// per Node, with the same name; the rail agent on that node writes its status and the operator
// reads it to mark jobs degraded when a rail dies under one of their workers.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=rn,categories=nezha
// +kubebuilder:printcolumn:name="Rails",type=integer,JSONPath=`.status.railCount`
// +kubebuilder:printcolumn:name="Healthy",type=integer,JSONPath=`.status.healthyRailCount`
// +kubebuilder:printcolumn:name="Quarantined",type=string,JSONPath=`.spec.quarantinedRails`
// +kubebuilder:printcolumn:name="Agent",type=string,JSONPath=`.status.agentVersion`,priority=1
// +kubebuilder:printcolumn:name="Observed",type=date,JSONPath=`.status.observedTime`
type RailNode struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec RailNodeSpec `json:"spec,omitempty"`
	// +optional
	Status RailNodeStatus `json:"status,omitempty"`
}

// RailNodeSpec is intentionally minimal: the node is named by metadata.name and the rails come
// from the cluster's RailClasses.
type RailNodeSpec struct {
	// quarantinedRails lists RailClass names taken out of service on this node, by an
	// administrator or by the operator (a rail that failed too often: see the annotation
	// nezha.io/rail-evidence); the operator treats them as down whatever their link state, keeps
	// new workers off the node and drains the rail from running jobs.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	QuarantinedRails []string `json:"quarantinedRails,omitempty"`
}

// RailNodeStatus is written by the rail agent.
type RailNodeStatus struct {
	// observedTime is when the agent last read the links (it refreshes it periodically even when
	// nothing changes, so a stale value means the agent is gone).
	// +optional
	ObservedTime *metav1.Time `json:"observedTime,omitempty"`

	// agentVersion is the version of the rail agent that wrote this status.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	AgentVersion string `json:"agentVersion,omitempty"`

	// railCount is len(rails), for kubectl get.
	// +optional
	RailCount int32 `json:"railCount,omitempty"`

	// healthyRailCount is the number of rails whose interface is up with carrier.
	// +optional
	HealthyRailCount int32 `json:"healthyRailCount,omitempty"`

	// rails holds one entry per RailClass that has a host interface on this node.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Rails []RailInterfaceStatus `json:"rails,omitempty"`

	// conditions about the node's rails as a whole (e.g. agent errors resolving interfaces).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RailInterfaceStatus is the state of one rail's host interface on a node.
type RailInterfaceStatus struct {
	// name of the RailClass.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// interface is the host interface name backing the rail on this node (empty when the
	// selector matched nothing; then operState is notpresent).
	// +optional
	// +kubebuilder:validation:MaxLength=15
	Interface string `json:"interface,omitempty"`

	// pciAddress of the NIC, when it has one.
	// +optional
	PCIAddress string `json:"pciAddress,omitempty"`

	// operState is the kernel operational state.
	// +required
	OperState LinkOperState `json:"operState"`

	// carrier is true when the link has carrier (/sys/class/net/<if>/carrier == 1).
	// +optional
	Carrier bool `json:"carrier"`

	// speedMbps is the negotiated link speed in Mbit/s; 0 when the driver does not report one.
	// +optional
	// +kubebuilder:validation:Minimum=0
	SpeedMbps int64 `json:"speedMbps,omitempty"`

	// mtu of the host interface.
	// +optional
	MTU int32 `json:"mtu,omitempty"`

	// rxErrors, txErrors, rxDropped and txDropped are the kernel's cumulative interface counters.
	// +optional
	RxErrors int64 `json:"rxErrors,omitempty"`
	// +optional
	TxErrors int64 `json:"txErrors,omitempty"`
	// +optional
	RxDropped int64 `json:"rxDropped,omitempty"`
	// +optional
	TxDropped int64 `json:"txDropped,omitempty"`

	// transitions counts health changes (healthy <-> unhealthy) the agent has seen since it started.
	// +optional
	Transitions int64 `json:"transitions,omitempty"`

	// lastTransitionTime is when the rail last changed between healthy and unhealthy.
	// +optional
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`

	// message explains an unhealthy state in words (e.g. "no interface matches pciAddress
	// 0000:3b:00.0").
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// +kubebuilder:object:root=true

// RailNodeList is a list of RailNodes.
type RailNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RailNode `json:"items"`
}

func init() {
	SchemeBuilder.Register(&RailNode{}, &RailNodeList{})
}

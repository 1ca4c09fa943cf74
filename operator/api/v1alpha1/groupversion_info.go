// Package v1alpha1 holds Nezha's API: RailClass (a rail network, cluster-scoped), MultiRailJob
// (a training job whose workers use several rails) and RailNode (per-node rail health, written by
// the rail agent).
//
// +kubebuilder:object:generate=true
// +groupName=nezha.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every Nezha object.
	GroupVersion = schema.GroupVersion{Group: "nezha.io", Version: "v1alpha1"}

	// SchemeBuilder registers the Nezha types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the Nezha types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

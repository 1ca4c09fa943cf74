// Package v1alpha1 is the nezha-operator's configuration file, config.nezha.io/v1alpha1
// Configuration, in the shape of the JobSet and Kueue Configuration APIs: a versioned type with
// apiVersion and kind, defaults applied by SetDefaults_Configuration when the file is decoded,
// and validation (operator/pkg/config) that names each bad field. The operator reads it from
// --config; the Helm chart renders it from its values into a ConfigMap.
//
// It is not served by the API server: no CRD is generated for it.
//
// +kubebuilder:object:generate=true
// +kubebuilder:skip
// +groupName=config.nezha.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the configuration file.
	GroupVersion = schema.GroupVersion{Group: "config.nezha.io", Version: "v1alpha1"}

	// SchemeBuilder registers the Configuration type and its defaulting function.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes, addDefaultingFuncs)

	// AddToScheme adds the Configuration type and its defaults to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Configuration{})
	return nil
}

// addDefaultingFuncs lets a decoder built from the scheme (operator/pkg/config) default what it
// decodes, as defaulter-gen's RegisterDefaults does for Kueue's and JobSet's configurations.
func addDefaultingFuncs(s *runtime.Scheme) error {
	s.AddTypeDefaultingFunc(&Configuration{}, func(obj any) { SetDefaults_Configuration(obj.(*Configuration)) })
	return nil
}

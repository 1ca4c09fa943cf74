// Package scheme builds the runtime.Scheme the operator and its tests share.
package scheme

import (
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// New returns a scheme with core Kubernetes, Nezha, Multus NAD and Kubeflow types.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, nezhav1.AddToScheme, nadv1.AddToScheme, kubeflowv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err) // only on programming errors (duplicate registrations)
		}
	}
	return s
}

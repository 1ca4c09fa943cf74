// Package tenancy holds the checks that keep one namespace's jobs off what an administrator gave
// to others (docs/security.md "Tenant model"). The MultiRailJob controller and the pod webhook
// call the same check, so both paths refuse the same thing with the same words.
package tenancy

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// NotAllowedError says that a RailClass's spec.allowedNamespaces does not select a namespace.
type NotAllowedError struct {
	RailClass, Namespace string
}

func (e *NotAllowedError) Error() string {
	return fmt.Sprintf("RailClass %q does not allow namespace %q: its spec.allowedNamespaces does not select it "+
		"(an administrator may label the namespace or widen the selector)", e.RailClass, e.Namespace)
}

// CheckRailClassAllowed returns a *NotAllowedError when rc's spec.allowedNamespaces does not
// select namespace ns, nil when it does or is unset. It reads the Namespace (its labels) through r.
func CheckRailClassAllowed(ctx context.Context, r client.Reader, rc *nezhav1.RailClass, ns string) error {
	if rc.Spec.AllowedNamespaces == nil {
		return nil
	}
	sel, err := metav1.LabelSelectorAsSelector(rc.Spec.AllowedNamespaces)
	if err != nil {
		return fmt.Errorf("RailClass %q: spec.allowedNamespaces: %w", rc.Name, err)
	}
	var namespace corev1.Namespace
	if err := r.Get(ctx, client.ObjectKey{Name: ns}, &namespace); err != nil {
		return fmt.Errorf("RailClass %q: read namespace %q for spec.allowedNamespaces: %w", rc.Name, ns, err)
	}
	if !sel.Matches(labels.Set(namespace.Labels)) {
		return &NotAllowedError{RailClass: rc.Name, Namespace: ns}
	}
	return nil
}

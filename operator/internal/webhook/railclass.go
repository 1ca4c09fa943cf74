package webhook

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// RailClassPath is where the apiserver sends RailClass admission reviews (the chart's
// ValidatingWebhookConfiguration names it).
const RailClassPath = "/validate-nezha-io-v1alpha1-railclass"

// RailClassValidator refuses, at admission, a RailClass whose spec.network.config is not a CNI
// configuration (so the mistake surfaces on `kubectl apply` instead of minutes later when Multus
// reads the NetworkAttachmentDefinition built from it), and one whose spec.transport the runtime
// this operator injects does not have (so a job on it is not created only to fail at start).
// Everything CEL can say stays in the CRD.
type RailClassValidator struct {
	// Transports the injected runtime supports (the configuration's runtime.transports).
	Transports []nezhav1.Transport
}

var _ admission.CustomValidator = RailClassValidator{}

// SetupRailClassWebhook registers the validator with the manager's webhook server.
func SetupRailClassWebhook(mgr ctrl.Manager, transports []nezhav1.Transport) error {
	return ctrl.NewWebhookManagedBy(mgr).For(&nezhav1.RailClass{}).WithValidator(RailClassValidator{Transports: transports}).Complete()
}

func (v RailClassValidator) ValidateCreate(_ context.Context, obj runtime.Object) (admission.Warnings, error) {
	return nil, v.validate(obj)
}

func (v RailClassValidator) ValidateUpdate(_ context.Context, _, obj runtime.Object) (admission.Warnings, error) {
	return nil, v.validate(obj)
}

func (RailClassValidator) ValidateDelete(context.Context, runtime.Object) (admission.Warnings, error) {
	return nil, nil
}

func (v RailClassValidator) validate(obj runtime.Object) error {
	rc, ok := obj.(*nezhav1.RailClass)
	if !ok {
		return fmt.Errorf("expected a RailClass, got %T", obj)
	}
	var errs field.ErrorList
	if t := rc.Spec.Transport; t != "" && !slices.Contains(v.Transports, t) {
		errs = append(errs, field.Invalid(field.NewPath("spec", "transport"), string(t),
			fmt.Sprintf("the runtime this operator injects has no %s transport (it has: %s; the operator's configuration, runtime.transports)",
				t, joinTransports(v.Transports))))
	}
	if rc.Spec.Network.Config != "" { // else nadRef (the CRD's CEL rule requires exactly one)
		errs = append(errs, ValidateCNIConfig(field.NewPath("spec", "network", "config"), rc.Spec.Network.Config)...)
	}
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(nezhav1.GroupVersion.WithKind("RailClass").GroupKind(), rc.Name, errs)
}

func joinTransports(ts []nezhav1.Transport) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = string(t)
	}
	return strings.Join(parts, ", ")
}

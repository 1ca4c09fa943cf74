package webhook

import (
	"context"
	"fmt"

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

// RailClassValidator refuses a RailClass whose spec.network.config is not a CNI configuration,
// at admission, so the mistake surfaces on `kubectl apply` instead of minutes later when Multus
// reads the NetworkAttachmentDefinition built from it. Everything CEL can say stays in the CRD.
type RailClassValidator struct{}

var _ admission.CustomValidator = RailClassValidator{}

// SetupRailClassWebhook registers the validator with the manager's webhook server.
func SetupRailClassWebhook(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr).For(&nezhav1.RailClass{}).WithValidator(RailClassValidator{}).Complete()
}

func (RailClassValidator) ValidateCreate(_ context.Context, obj runtime.Object) (admission.Warnings, error) {
	return nil, validate(obj)
}

func (RailClassValidator) ValidateUpdate(_ context.Context, _, obj runtime.Object) (admission.Warnings, error) {
	return nil, validate(obj)
}

func (RailClassValidator) ValidateDelete(context.Context, runtime.Object) (admission.Warnings, error) {
	return nil, nil
}

func validate(obj runtime.Object) error {
	rc, ok := obj.(*nezhav1.RailClass)
	if !ok {
		return fmt.Errorf("expected a RailClass, got %T", obj)
	}
	if rc.Spec.Network.Config == "" {
		return nil // nadRef (the CRD's CEL rule requires exactly one of the two)
	}
	errs := ValidateCNIConfig(field.NewPath("spec", "network", "config"), rc.Spec.Network.Config)
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(nezhav1.GroupVersion.WithKind("RailClass").GroupKind(), rc.Name, errs)
}

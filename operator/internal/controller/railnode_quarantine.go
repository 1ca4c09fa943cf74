package controller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/quarantine"
)

// The controller package's names for the quarantine policy (flags and tests use these).
type QuarantinePolicy = quarantine.Policy

const (
	RailEvidenceAnnotation        = quarantine.EvidenceAnnotation
	DefaultQuarantineFailures     = quarantine.DefaultFailures
	DefaultQuarantineWindow       = quarantine.DefaultWindow
	DefaultQuarantineReleaseAfter = quarantine.DefaultReleaseAfter
)

// RailQuarantineReconciler quarantines rails by evidence (internal/quarantine): it keeps the
// failure record in each RailNode's annotation and edits spec.quarantinedRails. The agent writes
// only the status subresource, so the two never overwrite each other.
type RailQuarantineReconciler struct {
	client.Client
	Recorder record.EventRecorder
	Clock    clock.PassiveClock
	Policy   QuarantinePolicy
}

// +kubebuilder:rbac:groups=nezha.io,resources=railnodes,verbs=get;list;watch;update

// Reconcile judges one RailNode.
func (r *RailQuarantineReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	rn := &nezhav1.RailNode{}
	if err := r.Get(ctx, req.NamespacedName, rn); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := rn.DeepCopy()
	ev, err := quarantine.Parse(rn)
	if err != nil {
		// Someone edited the annotation by hand: say so and start a fresh record rather than
		// stop quarantining this node.
		r.Recorder.Event(rn, warning, ReasonInvalidRailEvidence, err.Error()+"; starting a new failure record")
	}
	acts, recheck := r.Policy.Judge(rn, ev, r.Clock.Now())
	if err := quarantine.Encode(rn, ev); err != nil {
		return ctrl.Result{}, err
	}
	if !equality.Semantic.DeepEqual(before.Spec, rn.Spec) || !equality.Semantic.DeepEqual(before.Annotations, rn.Annotations) {
		if err := r.Update(ctx, rn); err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{RequeueAfter: conflictRetry}, nil // the agent or an admin wrote first
			}
			return ctrl.Result{}, err
		}
	}
	for _, a := range acts {
		eventType := normal
		if a.Reason == ReasonRailQuarantined {
			eventType = warning
			railQuarantines.WithLabelValues("quarantined").Inc()
		} else {
			railQuarantines.WithLabelValues("released").Inc()
		}
		log.FromContext(ctx).Info(a.Message, "rail", a.Rail)
		r.Recorder.Event(rn, eventType, a.Reason, a.Message)
	}
	return ctrl.Result{RequeueAfter: recheck}, nil
}

// SetupWithManager registers the controller; it does nothing when the policy is off.
func (r *RailQuarantineReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Policy.Failures <= 0 {
		return nil
	}
	if r.Policy.Window <= 0 || r.Policy.ReleaseAfter <= 0 {
		return fmt.Errorf("rail quarantine: window (%s) and release-after (%s) must be positive", r.Policy.Window, r.Policy.ReleaseAfter)
	}
	return ctrl.NewControllerManagedBy(mgr).For(&nezhav1.RailNode{}).Named("railquarantine").Complete(r)
}

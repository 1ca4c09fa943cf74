package quarantine

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// conflictRetry is how soon a RailNode is judged again after its update lost a race with the
// agent or an admin.
const conflictRetry = 200 * time.Millisecond

// Reconciler quarantines rails by evidence: it keeps the failure record in each RailNode's
// annotation and edits spec.quarantinedRails. The agent writes only the status subresource, so
// the two never overwrite each other.
type Reconciler struct {
	client.Client
	Recorder record.EventRecorder
	Clock    clock.PassiveClock
	Policy   Policy
}

// +kubebuilder:rbac:groups=nezha.io,resources=railnodes,verbs=get;list;watch;update

// Reconcile judges one RailNode.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	rn := &nezhav1.RailNode{}
	if err := r.Get(ctx, req.NamespacedName, rn); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := rn.DeepCopy()
	ev, err := Parse(rn)
	if err != nil {
		// Someone edited the annotation by hand: say so and start a fresh record rather than
		// stop quarantining this node.
		r.Recorder.Event(rn, corev1.EventTypeWarning, nezhav1.ReasonInvalidRailEvidence, err.Error()+"; starting a new failure record")
	}
	acts, recheck := r.Policy.Judge(rn, ev, r.Clock.Now())
	if err := Encode(rn, ev); err != nil {
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
		eventType := corev1.EventTypeNormal
		if a.Reason == nezhav1.ReasonRailQuarantined {
			eventType = corev1.EventTypeWarning
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
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Policy.Failures <= 0 {
		return nil
	}
	if r.Policy.Window <= 0 || r.Policy.ReleaseAfter <= 0 {
		return fmt.Errorf("rail quarantine: window (%s) and release-after (%s) must be positive", r.Policy.Window, r.Policy.ReleaseAfter)
	}
	return ctrl.NewControllerManagedBy(mgr).For(&nezhav1.RailNode{}).Named("railquarantine").Complete(r)
}

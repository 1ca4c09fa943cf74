package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/builder"
	"github.com/nezha-project/nezha/operator/internal/tenancy"
)

// railsResult is the outcome of resolving a job's rails. When ready is false NetworksReady has
// been set False with the reason, and retry > 0 asks for a poll (for what no watch covers).
type railsResult struct {
	rails []builder.Rail
	ready bool
	retry time.Duration
}

// resolveRails loads the job's RailClasses, puts the NetworkAttachmentDefinitions it owns in
// place, checks referenced ones exist and that some node advertises each SR-IOV resource.
func (r *MultiRailJobReconciler) resolveRails(ctx context.Context, job *nezhav1.MultiRailJob, st *statusUpdate) (railsResult, error) {
	classes := make([]*nezhav1.RailClass, 0, len(job.Spec.Rails))
	var missing []string
	for _, name := range job.Spec.Rails {
		rc := &nezhav1.RailClass{}
		if err := r.Get(ctx, client.ObjectKey{Name: name}, rc); err != nil {
			if !apierrors.IsNotFound(err) {
				return railsResult{}, err
			}
			missing = append(missing, fmt.Sprintf("%q", name))
			continue
		}
		classes = append(classes, rc)
	}
	if len(missing) > 0 {
		// No retry: the RailClass watch brings the job back when an administrator creates it.
		st.setCondition(nezhav1.ConditionNetworksReady, metav1.ConditionFalse, nezhav1.ReasonRailClassNotFound,
			fmt.Sprintf("RailClass %s not found", strings.Join(missing, ", ")), warning)
		return railsResult{}, nil
	}
	for _, rc := range classes {
		err := tenancy.CheckRailClassAllowed(ctx, r.Client, rc, job.Namespace)
		var notAllowed *tenancy.NotAllowedError
		if errors.As(err, &notAllowed) {
			// No retry: an administrator's change to the RailClass brings the job back.
			st.setCondition(nezhav1.ConditionNetworksReady, metav1.ConditionFalse, nezhav1.ReasonRailClassNotAllowed, err.Error(), warning)
			return railsResult{}, nil
		}
		if err != nil {
			return railsResult{}, err
		}
	}
	rails, err := builder.ResolveRails(job, classes)
	if err != nil {
		st.setCondition(nezhav1.ConditionNetworksReady, metav1.ConditionFalse, nezhav1.ReasonInvalidRailClass, err.Error(), warning)
		return railsResult{}, nil
	}

	for _, rail := range rails {
		if rail.OwnNAD {
			if msg, err := r.ensureNAD(ctx, job, rail); err != nil {
				return railsResult{}, err
			} else if msg != "" {
				st.setCondition(nezhav1.ConditionNetworksReady, metav1.ConditionFalse, nezhav1.ReasonNetworkAttachmentConflict, msg, warning)
				return railsResult{}, nil
			}
			continue
		}
		nad := &nadv1.NetworkAttachmentDefinition{}
		err := r.Get(ctx, client.ObjectKey{Namespace: rail.NetworkNamespace, Name: rail.NetworkName}, nad)
		if apierrors.IsNotFound(err) {
			st.setCondition(nezhav1.ConditionNetworksReady, metav1.ConditionFalse, nezhav1.ReasonNetworkAttachmentNotFound,
				fmt.Sprintf("rail %q: NetworkAttachmentDefinition %s/%s not found", rail.Name, rail.NetworkNamespace, rail.NetworkName), warning)
			return railsResult{retry: st.retryAfter(nezhav1.ConditionNetworksReady)}, nil
		}
		if err != nil {
			return railsResult{}, err
		}
	}

	if unavailable, err := r.unadvertisedSRIOVResources(ctx, rails); err != nil {
		return railsResult{}, err
	} else if len(unavailable) > 0 {
		st.setCondition(nezhav1.ConditionNetworksReady, metav1.ConditionFalse, nezhav1.ReasonSRIOVResourceUnavailable,
			"no node advertises SR-IOV resource "+strings.Join(unavailable, ", "), warning)
		return railsResult{retry: st.retryAfter(nezhav1.ConditionNetworksReady)}, nil
	}

	st.setCondition(nezhav1.ConditionNetworksReady, metav1.ConditionTrue, nezhav1.ReasonNetworksReady,
		fmt.Sprintf("%d rails resolved and attached networks in place", len(rails)), "")
	return railsResult{rails: rails, ready: true}, nil
}

// ensureNAD creates or updates a NetworkAttachmentDefinition the job owns. A non-empty message
// means a NAD of that name exists and belongs to someone else.
func (r *MultiRailJobReconciler) ensureNAD(ctx context.Context, job *nezhav1.MultiRailJob, rail builder.Rail) (string, error) {
	want := builder.NetworkAttachmentDefinition(job, rail)
	have := &nadv1.NetworkAttachmentDefinition{}
	err := r.Get(ctx, client.ObjectKeyFromObject(want), have)
	if apierrors.IsNotFound(err) {
		if err := r.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("create NetworkAttachmentDefinition %s: %w", want.Name, err)
		}
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if !metav1.IsControlledBy(have, job) {
		return fmt.Sprintf("rail %q: NetworkAttachmentDefinition %s/%s exists and is not owned by this job",
			rail.Name, have.Namespace, have.Name), nil
	}
	// The RailClass may have changed: new workers must get the new config. Running pods keep the
	// interfaces they were created with.
	if have.Spec.Config != want.Spec.Config || !maps.Equal(have.Annotations, want.Annotations) {
		have.Spec.Config = want.Spec.Config
		have.Annotations = want.Annotations
		if err := r.Update(ctx, have); err != nil {
			return "", fmt.Errorf("update NetworkAttachmentDefinition %s: %w", have.Name, err)
		}
	}
	return "", nil
}

// unadvertisedSRIOVResources returns the SR-IOV resource names no node has allocatable.
func (r *MultiRailJobReconciler) unadvertisedSRIOVResources(ctx context.Context, rails []builder.Rail) ([]string, error) {
	need := map[corev1.ResourceName]bool{}
	for _, rail := range rails {
		if rail.SRIOVResourceName != "" {
			need[corev1.ResourceName(rail.SRIOVResourceName)] = true
		}
	}
	if len(need) == 0 {
		return nil, nil
	}
	var nodes corev1.NodeList
	if err := r.List(ctx, &nodes); err != nil {
		return nil, err
	}
	for i := range nodes.Items {
		for res := range need {
			if q, ok := nodes.Items[i].Status.Allocatable[res]; ok && q.Value() > 0 {
				delete(need, res)
			}
		}
	}
	var out []string
	for _, rail := range rails {
		if need[corev1.ResourceName(rail.SRIOVResourceName)] {
			out = append(out, fmt.Sprintf("%q (rail %q)", rail.SRIOVResourceName, rail.Name))
		}
	}
	return out, nil
}

package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/builder"
)

// tokenBytes is the entropy of a job token (256 bits, hex-encoded in the Secret).
const tokenBytes = 32

// ensureSecret creates the job's token Secret once. It reads through the uncached API reader so
// the operator needs neither list nor watch on Secrets cluster-wide; it is called only when
// workers are about to be created. A Secret of that name that this job does not control (no
// controller reference to it) is never adopted: its token could be known to whoever made it.
// The job then gets a SecretConflict condition and no workers (ok = false).
func (r *MultiRailJobReconciler) ensureSecret(ctx context.Context, job *nezhav1.MultiRailJob, st *statusUpdate) (bool, error) {
	key := client.ObjectKey{Namespace: job.Namespace, Name: builder.SecretName(job.Name)}
	var existing corev1.Secret
	err := r.APIReader.Get(ctx, key, &existing)
	if err == nil {
		if metav1.IsControlledBy(&existing, job) {
			return true, nil
		}
		st.setCondition(nezhav1.ConditionWorkersCreated, metav1.ConditionFalse, nezhav1.ReasonSecretConflict,
			fmt.Sprintf("Secret %s/%s exists but was not created by this MultiRailJob (it has no controller "+
				"reference to the job); Nezha never adopts a token Secret it did not create: delete or "+
				"rename that Secret (the job retries on its next change or resync)", key.Namespace, key.Name), warning)
		return false, nil
	}
	if !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("get Secret %s: %w", key.Name, err)
	}
	buf := make([]byte, tokenBytes)
	if _, err := rand.Read(buf); err != nil {
		return false, fmt.Errorf("generate job token: %w", err)
	}
	if err := r.Create(ctx, builder.Secret(job, hex.EncodeToString(buf))); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return false, fmt.Errorf("Secret %s appeared while creating it; retrying", key.Name)
		}
		return false, fmt.Errorf("create Secret %s: %w", key.Name, err)
	}
	return true, nil
}

// ensureService creates the headless Service, or puts back its ports and selector if they
// drifted (e.g. spec.runtime.rendezvousPort changed).
func (r *MultiRailJobReconciler) ensureService(ctx context.Context, job *nezhav1.MultiRailJob) error {
	want := builder.Service(job)
	have := &corev1.Service{}
	err := r.Get(ctx, client.ObjectKeyFromObject(want), have)
	if apierrors.IsNotFound(err) {
		if err := r.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create Service %s: %w", want.Name, err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if equality.Semantic.DeepEqual(have.Spec.Selector, want.Spec.Selector) && portsEqual(have.Spec.Ports, want.Spec.Ports) {
		return nil
	}
	have.Spec.Selector = want.Spec.Selector
	have.Spec.Ports = want.Spec.Ports
	if err := r.Update(ctx, have); err != nil {
		return fmt.Errorf("update Service %s: %w", have.Name, err)
	}
	return nil
}

// portsEqual compares what the operator sets; the API server defaults TargetPort.
func portsEqual(a, b []corev1.ServicePort) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Port != b[i].Port || a[i].Protocol != b[i].Protocol {
			return false
		}
	}
	return true
}

// ensureNetworkPolicy creates the job's NetworkPolicy, or puts its rules back if they drifted.
func (r *MultiRailJobReconciler) ensureNetworkPolicy(ctx context.Context, job *nezhav1.MultiRailJob) error {
	if r.NetworkPolicy == nil {
		return nil
	}
	want := builder.NetworkPolicy(job, *r.NetworkPolicy)
	have := &networkingv1.NetworkPolicy{}
	err := r.Get(ctx, client.ObjectKeyFromObject(want), have)
	if apierrors.IsNotFound(err) {
		if err := r.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create NetworkPolicy %s: %w", want.Name, err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if equality.Semantic.DeepEqual(have.Spec, want.Spec) {
		return nil
	}
	have.Spec = want.Spec
	if err := r.Update(ctx, have); err != nil {
		return fmt.Errorf("update NetworkPolicy %s: %w", have.Name, err)
	}
	return nil
}

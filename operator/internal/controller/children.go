package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

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
// drifted (e.g. spec.runtime.rendezvousPort changed). A Service of that name the job does not
// control is never taken over (its selector would be pointed at the job's pods): the job gets a
// ServiceConflict condition naming it and no workers (ok = false).
func (r *MultiRailJobReconciler) ensureService(ctx context.Context, job *nezhav1.MultiRailJob, st *statusUpdate) (bool, error) {
	want := builder.Service(job)
	have := &corev1.Service{}
	if found, err := r.createOrGetOwn(ctx, job, want, have, nezhav1.ReasonServiceConflict, st); found != childOwned {
		return found == childCreated, err
	}
	if equality.Semantic.DeepEqual(have.Spec.Selector, want.Spec.Selector) && portsEqual(have.Spec.Ports, want.Spec.Ports) {
		return true, nil
	}
	have.Spec.Selector = want.Spec.Selector
	have.Spec.Ports = want.Spec.Ports
	if err := r.Update(ctx, have); err != nil {
		return false, fmt.Errorf("update Service %s: %w", have.Name, err)
	}
	return true, nil
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
// A NetworkPolicy of that name the job does not control is never taken over: the job gets a
// NetworkPolicyConflict condition naming it and no workers (ok = false), since they would run
// without the policy docs/security.md promises.
func (r *MultiRailJobReconciler) ensureNetworkPolicy(ctx context.Context, job *nezhav1.MultiRailJob, st *statusUpdate) (bool, error) {
	if r.NetworkPolicy == nil {
		return true, nil
	}
	want := builder.NetworkPolicy(job, *r.NetworkPolicy)
	have := &networkingv1.NetworkPolicy{}
	if found, err := r.createOrGetOwn(ctx, job, want, have, nezhav1.ReasonNetworkPolicyConflict, st); found != childOwned {
		return found == childCreated, err
	}
	if equality.Semantic.DeepEqual(have.Spec, want.Spec) {
		return true, nil
	}
	have.Spec = want.Spec
	if err := r.Update(ctx, have); err != nil {
		return false, fmt.Errorf("update NetworkPolicy %s: %w", have.Name, err)
	}
	return true, nil
}

// childFound says what createOrGetOwn found under a child's name.
type childFound int

const (
	childCreated childFound = iota // nothing was there; want was created
	childOwned                     // the job's own child, read into have
	childForeign                   // someone else's object: left alone, conflict condition set
)

// createOrGetOwn reads the child named like want into have, creating want when there is none.
// An object of that name without the job's controller reference belongs to someone else (a
// user's Service, another team's policy): it is never updated, and the job's WorkersCreated
// condition names it with conflictReason so its owner can rename one of the two.
func (r *MultiRailJobReconciler) createOrGetOwn(ctx context.Context, job *nezhav1.MultiRailJob, want, have client.Object,
	conflictReason string, st *statusUpdate) (childFound, error) {
	kind := fmt.Sprintf("%T", want)
	kind = kind[strings.LastIndex(kind, ".")+1:]
	err := r.Get(ctx, client.ObjectKeyFromObject(want), have)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.Create(ctx, want); err != nil {
			return childCreated, fmt.Errorf("create %s %s: %w", kind, want.GetName(), err)
		}
		return childCreated, nil
	case err != nil:
		return childCreated, fmt.Errorf("get %s %s: %w", kind, want.GetName(), err)
	case metav1.IsControlledBy(have, job):
		return childOwned, nil
	}
	st.setCondition(nezhav1.ConditionWorkersCreated, metav1.ConditionFalse, conflictReason,
		fmt.Sprintf("%s %s/%s exists but was not created by this MultiRailJob (it has no controller "+
			"reference to the job); Nezha never takes over an object it did not create: delete or rename "+
			"that %s, or rename the job", kind, want.GetNamespace(), want.GetName(), kind), warning)
	return childForeign, nil
}

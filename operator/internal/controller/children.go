package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/builder"
)

// tokenBytes is the entropy of a job token (256 bits, hex-encoded in the Secret).
const tokenBytes = 32

// ensureSecret creates the job's token Secret once. It reads through the uncached API reader so
// the operator needs neither list nor watch on Secrets cluster-wide; it is called only when
// workers are about to be created.
func (r *MultiRailJobReconciler) ensureSecret(ctx context.Context, job *nezhav1.MultiRailJob) error {
	key := client.ObjectKey{Namespace: job.Namespace, Name: builder.SecretName(job.Name)}
	err := r.APIReader.Get(ctx, key, &corev1.Secret{})
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("get Secret %s: %w", key.Name, err)
	}
	buf := make([]byte, tokenBytes)
	if _, err := rand.Read(buf); err != nil {
		return fmt.Errorf("generate job token: %w", err)
	}
	if err := r.Create(ctx, builder.Secret(job, hex.EncodeToString(buf))); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Secret %s: %w", key.Name, err)
	}
	return nil
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

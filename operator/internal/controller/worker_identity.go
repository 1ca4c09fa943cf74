package controller

import (
	"context"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// Workers are recognised by controller reference, never by label: anyone who may create pods in
// the namespace can copy the job-name and rank labels, and a pod taken for a worker would get a
// rank, the job's control credential, a say in its health (its /status) and possibly a delete
// (docs/security.md "Tenant model"). A worker is a pod whose controller is the job itself or,
// for spec.pytorchJob, the PyTorchJob the job controls.

// workerControllers returns the UIDs a worker pod's controller reference may name: the job's,
// plus its PyTorchJob's when the job has one that it controls.
func (r *MultiRailJobReconciler) workerControllers(ctx context.Context, job *nezhav1.MultiRailJob) (map[types.UID]bool, error) {
	uids := map[types.UID]bool{job.UID: true}
	if job.Spec.PyTorchJob == nil || !r.PyTorchJobEnabled {
		return uids, nil
	}
	var ptj kubeflowv1.PyTorchJob
	err := r.Get(ctx, client.ObjectKey{Namespace: job.Namespace, Name: job.Name}, &ptj)
	switch {
	case apierrors.IsNotFound(err):
		return uids, nil
	case err != nil:
		return nil, err
	case metav1.IsControlledBy(&ptj, job):
		uids[ptj.UID] = true
	}
	return uids, nil
}

// onlyWorkers keeps the pods whose controller reference names one of controllers; pods carrying
// the job's labels without it are someone else's and are ignored (not ranked, probed or deleted).
func onlyWorkers(pods []corev1.Pod, controllers map[types.UID]bool) []corev1.Pod {
	kept := pods[:0:0]
	for i := range pods {
		if ref := metav1.GetControllerOfNoCopy(&pods[i]); ref != nil && controllers[ref.UID] {
			kept = append(kept, pods[i])
		}
	}
	return kept
}

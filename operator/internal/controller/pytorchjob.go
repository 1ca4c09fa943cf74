package controller

import (
	"context"
	"fmt"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/builder"
)

// pyTorchWorldSize is the number of pods a PyTorchJob runs (all replica types).
func pyTorchWorldSize(spec *kubeflowv1.PyTorchJobSpec) int32 {
	var n int32
	for _, rs := range spec.PyTorchReplicaSpecs {
		if rs == nil {
			continue
		}
		if rs.Replicas == nil {
			n++ // the training operator defaults replicas to 1
		} else {
			n += *rs.Replicas
		}
	}
	return n
}

// ensurePyTorchJob creates the job's PyTorchJob once (the training operator owns its pods from
// then on) and returns it, or nil when it could not be created (condition set).
func (r *MultiRailJobReconciler) ensurePyTorchJob(ctx context.Context, job *nezhav1.MultiRailJob, rails []builder.Rail,
	avoid []string, st *statusUpdate) (*kubeflowv1.PyTorchJob, error) {
	if !r.PyTorchJobEnabled {
		st.setCondition(nezhav1.ConditionWorkersCreated, metav1.ConditionFalse, nezhav1.ReasonPyTorchJobCRDMissing,
			"spec.pytorchJob is set but the PyTorchJob CRD (kubeflow.org/v1) was not installed when the operator started", warning)
		return nil, nil
	}
	have := &kubeflowv1.PyTorchJob{}
	err := r.Get(ctx, client.ObjectKey{Namespace: job.Namespace, Name: job.Name}, have)
	if err == nil {
		if !metav1.IsControlledBy(have, job) {
			st.setCondition(nezhav1.ConditionWorkersCreated, metav1.ConditionFalse, nezhav1.ReasonInvalidWorkerSpec,
				fmt.Sprintf("PyTorchJob %s exists and is not owned by this job", have.Name), warning)
			return nil, nil
		}
		st.setCondition(nezhav1.ConditionWorkersCreated, metav1.ConditionTrue, nezhav1.ReasonPyTorchJobCreated,
			fmt.Sprintf("PyTorchJob %s exists", have.Name), "")
		return have, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	want, err := builder.PyTorchJob(job, rails, builder.WorkerOptions{RuntimeImage: r.RuntimeImage, AvoidNodes: avoid})
	if err != nil {
		st.setCondition(nezhav1.ConditionWorkersCreated, metav1.ConditionFalse, nezhav1.ReasonInvalidWorkerSpec, err.Error(), warning)
		return nil, nil
	}
	if ok, err := r.ensureSecret(ctx, job, st); !ok || err != nil {
		return nil, err
	}
	if err := r.Create(ctx, want); err != nil {
		if meta.IsNoMatchError(err) {
			st.setCondition(nezhav1.ConditionWorkersCreated, metav1.ConditionFalse, nezhav1.ReasonPyTorchJobCRDMissing, err.Error(), warning)
			return nil, nil
		}
		if apierrors.IsInvalid(err) {
			// The PyTorchJob CRD validates what this CRD leaves schemaless.
			st.setCondition(nezhav1.ConditionWorkersCreated, metav1.ConditionFalse, nezhav1.ReasonInvalidWorkerSpec,
				"spec.pytorchJob rejected: "+err.Error(), warning)
			return nil, nil
		}
		return nil, fmt.Errorf("create PyTorchJob %s: %w", want.Name, err)
	}
	st.setCondition(nezhav1.ConditionWorkersCreated, metav1.ConditionTrue, nezhav1.ReasonPyTorchJobCreated,
		fmt.Sprintf("PyTorchJob %s created", want.Name), normal)
	if st.status.StartTime == nil {
		st.status.StartTime = &st.now
	}
	return want, nil
}

// mirrorPyTorchJob copies the PyTorchJob's terminal state into the job's conditions: the
// training operator, not the pods, decides when a PyTorchJob succeeded (e.g. when the Master
// exits) or failed (after its own restarts).
func mirrorPyTorchJob(ptj *kubeflowv1.PyTorchJob, st *statusUpdate) {
	for _, c := range ptj.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case kubeflowv1.JobSucceeded:
			st.setCondition(nezhav1.ConditionSucceeded, metav1.ConditionTrue, nezhav1.ReasonPyTorchJobSucceeded,
				"PyTorchJob succeeded: "+c.Message, normal)
		case kubeflowv1.JobFailed:
			st.setCondition(nezhav1.ConditionFailed, metav1.ConditionTrue, nezhav1.ReasonPyTorchJobFailed,
				"PyTorchJob failed: "+c.Message, warning)
		}
	}
}

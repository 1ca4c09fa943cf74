package builder

import (
	"fmt"
	"sort"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// PyTorchJob builds the Kubeflow PyTorchJob of a job in pytorchJob mode: the user's spec with the
// rails and runtime environment injected into every replica template (Master and Worker). The
// training operator sets RANK and WORLD_SIZE per pod; the runtime falls back to those.
func PyTorchJob(job *nezhav1.MultiRailJob, rails []Rail, opts WorkerOptions) (*kubeflowv1.PyTorchJob, error) {
	if job.Spec.PyTorchJob == nil {
		return nil, fmt.Errorf("spec.pytorchJob is not set")
	}
	spec := job.Spec.PyTorchJob.DeepCopy()
	if len(spec.PyTorchReplicaSpecs) == 0 {
		return nil, fmt.Errorf("spec.pytorchJob.pytorchReplicaSpecs is empty")
	}
	if _, ok := spec.PyTorchReplicaSpecs[kubeflowv1.PyTorchJobReplicaTypeMaster]; !ok {
		return nil, fmt.Errorf("spec.pytorchJob.pytorchReplicaSpecs: a Master replica is required (it hosts the rendezvous)")
	}
	in := Injection{
		Rails:       rails,
		TokenSecret: SecretName(job.Name),
		Env: RuntimeEnv(RuntimeEnvOptions{
			Job: job, Rails: rails,
			Rendezvous: PyTorchMasterAddress(job.Name, job.Namespace, rendezvousPort(job)),
		}),
		Labels:     JobLabels(job),
		AvoidNodes: opts.AvoidNodes,
		NCCL:       job.Spec.Runtime.UsesNCCL(),
	}
	if WantsRuntimeInjection(job) {
		if opts.RuntimeImage == "" {
			return nil, fmt.Errorf("the job asks for runtime injection but the operator has no runtime image (its configuration's runtime.image)")
		}
		in.RuntimeImage = opts.RuntimeImage
	}
	// Sorted so errors (and tests) are deterministic.
	types := make([]string, 0, len(spec.PyTorchReplicaSpecs))
	for t := range spec.PyTorchReplicaSpecs {
		types = append(types, string(t))
	}
	sort.Strings(types)
	for _, t := range types {
		rs := spec.PyTorchReplicaSpecs[kubeflowv1.ReplicaType(t)]
		if rs == nil {
			return nil, fmt.Errorf("spec.pytorchJob.pytorchReplicaSpecs[%s] is null", t)
		}
		if err := InjectTemplate(&rs.Template, in); err != nil {
			return nil, fmt.Errorf("spec.pytorchJob.pytorchReplicaSpecs[%s].template: %w", t, err)
		}
	}
	return &kubeflowv1.PyTorchJob{
		ObjectMeta: objectMeta(job, job.Name),
		Spec:       *spec,
	}, nil
}

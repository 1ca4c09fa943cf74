package builder

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// WorkerOptions are the operator-level inputs to worker pods.
type WorkerOptions struct {
	// RuntimeImage is the operator's runtime image (configuration runtime.image), used when the
	// job asks for injection.
	RuntimeImage string
	// AvoidNodes are nodes where one of the job's rails is down; new workers stay off them.
	AvoidNodes []string
}

// WantsRuntimeInjection reports whether job asks for the runtime init container, by field or
// annotation.
func WantsRuntimeInjection(job *nezhav1.MultiRailJob) bool {
	return job.Spec.Runtime.InjectRuntime || job.Annotations[nezhav1.InjectRuntimeAnnotation] == "true"
}

// WorkerPod builds the pod of worker rank from the job's template.
func WorkerPod(job *nezhav1.MultiRailJob, rails []Rail, rank int32, opts WorkerOptions) (*corev1.Pod, error) {
	if job.Spec.Workers == nil {
		return nil, fmt.Errorf("spec.workers is not set")
	}
	world := job.Spec.Workers.Replicas
	if rank < 0 || rank >= world {
		return nil, fmt.Errorf("rank %d outside [0, %d)", rank, world)
	}
	t := job.Spec.Workers.Template.DeepCopy()
	labels := JobLabels(job)
	labels[nezhav1.RankLabel] = strconv.Itoa(int(rank))
	in := Injection{
		Rails:       rails,
		TokenSecret: SecretName(job.Name),
		Env: RuntimeEnv(RuntimeEnvOptions{
			Job: job, Rails: rails,
			Rendezvous: RendezvousAddress(job.Name, job.Namespace, rendezvousPort(job)),
			WorldSize:  &world, Rank: &rank,
		}),
		Labels:     labels,
		AvoidNodes: opts.AvoidNodes,
		NCCL:       job.Spec.Runtime.UsesNCCL(),
	}
	if WantsRuntimeInjection(job) {
		if opts.RuntimeImage == "" {
			return nil, fmt.Errorf("the job asks for runtime injection but the operator has no runtime image (its configuration's runtime.image)")
		}
		in.RuntimeImage = opts.RuntimeImage
	}
	if err := InjectTemplate(t, in); err != nil {
		return nil, fmt.Errorf("spec.workers.template: %w", err)
	}

	if len(opts.AvoidNodes) > 0 {
		t.Annotations[AvoidedNodesAnnotation] = strings.Join(opts.AvoidNodes, ",")
	}
	t.Annotations[nezhav1.TemplateHashAnnotation] = templateHash(t)

	meta := objectMeta(job, PodName(job.Name, rank))
	meta.Labels = t.Labels
	meta.Annotations = t.Annotations
	pod := &corev1.Pod{ObjectMeta: meta, Spec: t.Spec}
	pod.Spec.Hostname = PodName(job.Name, rank)
	pod.Spec.Subdomain = ServiceName(job.Name)
	if pod.Spec.RestartPolicy == "" {
		// A worker that exits is a job-level event (the ranks must restart together), so the
		// kubelet must not restart it behind the runtime's back.
		pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	}
	return pod, nil
}

// templateHash fingerprints what the operator built from the job and its RailClasses (spec and
// annotations, rank-specific values included), so pods built from an older RailClass can be told
// apart from current ones.
func templateHash(t *corev1.PodTemplateSpec) string {
	raw, err := json.Marshal(struct {
		Spec        corev1.PodSpec
		Annotations map[string]string
	}{t.Spec, t.Annotations})
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])[:16]
}

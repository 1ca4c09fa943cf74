package webhook

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/builder"
	"github.com/nezha-project/nezha/operator/internal/tenancy"
)

// Pods made by other controllers (Kubeflow Trainer v2's JobSets, plain JobSets, PyTorchJobs)
// get their rails from this mutating webhook: Trainer's plugins are in-tree and its
// runtimePatches cannot add resources or init containers, so, like SR-IOV's
// network-resources-injector, the pod is changed at admission. The pod asks for it with a label
// (the webhook's objectSelector) and names its RailClasses in an annotation; a
// ClusterTrainingRuntime puts both on its `node` pod template.
const (
	// PodRailsPath is where the apiserver sends pod admission reviews.
	PodRailsPath = "/mutate-v1-pod-nezha-rails"
	// InjectLabel = "true" selects a pod (the chart's objectSelector).
	InjectLabel = "nezha.io/inject"
	// RailClassesAnnotation lists the pod's RailClasses in rail order: "rail0,rail1".
	RailClassesAnnotation = "nezha.io/railclasses"
	// RuntimeAnnotation = "inject" adds the runtime init container (images without libnezha).
	RuntimeAnnotation = "nezha.io/runtime"

	jobSetNameLabel     = "jobset.sigs.k8s.io/jobset-name"
	pyTorchJobNameLabel = "training.kubeflow.org/job-name"
)

// PodRailInjector adds rails, the runtime environment and (optionally) the runtime to a
// selected pod. The pods of one job share a group, named by their JobSet (Trainer: the
// TrainJob's name) or PyTorchJob (group_owner.go): its token Secret "<key>-token" and the rails'
// NADs "<key>-<railclass>" in the pod's namespace, created on the first pod with the group's
// object (the JobSet or PyTorchJob) as controller, so they go away with it. A pod whose
// controller chain does not lead to that object, or an existing Secret or NAD that object does
// not control, is refused: nothing is adopted. RailClasses are checked against their
// spec.allowedNamespaces (internal/tenancy).
type PodRailInjector struct {
	Client client.Client
	// Reader reads the pod's Job and an existing Secret or NAD uncached (the Job was created a
	// moment ago; the cache may not hold it yet); nil: Client.
	Reader       client.Reader
	Decoder      admission.Decoder
	RuntimeImage string
	// NetworkPolicy, when set (configuration networkPolicy.enabled), gives each group the
	// NetworkPolicy a MultiRailJob gets, "<key>-workers", selecting the group's pods by their
	// controller's label.
	NetworkPolicy *builder.NetworkPolicyOptions
}

var _ admission.Handler = &PodRailInjector{}

// The pod's Job is read (uncached, Reader) to follow its controller chain to the JobSet.
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get

func (h *PodRailInjector) Handle(ctx context.Context, req admission.Request) admission.Response {
	pod := &corev1.Pod{}
	if err := h.Decoder.Decode(req, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace
	}
	dryRun := req.DryRun != nil && *req.DryRun
	if err := h.inject(ctx, pod, dryRun); err != nil {
		return admission.Denied(err.Error())
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, raw)
}

func (h *PodRailInjector) inject(ctx context.Context, pod *corev1.Pod, dryRun bool) error {
	names := splitList(pod.Annotations[RailClassesAnnotation])
	if len(names) == 0 {
		return fmt.Errorf("pod labelled %s=true needs annotation %s (RailClass names, comma-separated)", InjectLabel, RailClassesAnnotation)
	}
	g, ok := groupOf(pod)
	if !ok {
		return fmt.Errorf("pod labelled %s=true needs label %s (Trainer v2, JobSet) or %s (PyTorchJob) to name its job", InjectLabel, jobSetNameLabel, pyTorchJobNameLabel)
	}
	if len(pod.Spec.Containers) == 0 {
		return fmt.Errorf("pod has no containers")
	}
	host := envValue(pod.Spec.Containers[0].Env, g.masterEnv)
	if host == "" {
		return fmt.Errorf("container %q has no literal %s to put the Nezha rendezvous on", pod.Spec.Containers[0].Name, g.masterEnv)
	}
	// An in-memory job carries the group's name and the runtime defaults the builder reads.
	job := &nezhav1.MultiRailJob{ObjectMeta: metav1.ObjectMeta{Name: g.key, Namespace: pod.Namespace}, Spec: nezhav1.MultiRailJobSpec{Rails: names}}
	classes := make([]*nezhav1.RailClass, 0, len(names))
	for _, n := range names {
		rc := &nezhav1.RailClass{}
		if err := h.Client.Get(ctx, types.NamespacedName{Name: n}, rc); err != nil {
			return fmt.Errorf("annotation %s: RailClass %q: %w", RailClassesAnnotation, n, err)
		}
		if err := tenancy.CheckRailClassAllowed(ctx, h.Client, rc, pod.Namespace); err != nil {
			return err
		}
		classes = append(classes, rc)
	}
	rails, err := builder.ResolveRails(job, classes)
	if err != nil {
		return err
	}
	owner, err := h.groupOwner(ctx, pod, g)
	if err != nil {
		return err
	}
	if !dryRun {
		for _, r := range rails {
			if r.OwnNAD {
				if err := h.ensureNAD(ctx, r, owner); err != nil {
					return err
				}
			}
		}
		if err := h.ensureSecret(ctx, job, owner); err != nil {
			return err
		}
		if err := h.ensureNetworkPolicy(ctx, job, g, owner); err != nil {
			return err
		}
	}
	in := builder.Injection{
		Rails:       rails,
		TokenSecret: builder.SecretName(job.Name),
		Env: builder.RuntimeEnv(builder.RuntimeEnvOptions{
			Job: job, Rails: rails, Rendezvous: fmt.Sprintf("%s:%d", host, nezhav1.DefaultRendezvousPort),
		}),
	}
	if pod.Annotations[RuntimeAnnotation] == "inject" {
		if h.RuntimeImage == "" {
			return fmt.Errorf("annotation %s=inject: the operator has no runtime image (its configuration's runtime.image)", RuntimeAnnotation)
		}
		in.RuntimeImage = h.RuntimeImage
	}
	t := corev1.PodTemplateSpec{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec}
	if err := builder.InjectTemplate(&t, in); err != nil {
		return err
	}
	pod.ObjectMeta, pod.Spec = t.ObjectMeta, t.Spec
	return nil
}

func (h *PodRailInjector) ensureNAD(ctx context.Context, r builder.Rail, owner metav1.OwnerReference) error {
	nad := &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: r.NetworkName, Namespace: r.NetworkNamespace, OwnerReferences: []metav1.OwnerReference{owner}},
		Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: r.Config},
	}
	if err := h.createOrCheckOwned(ctx, nad, &nadv1.NetworkAttachmentDefinition{}, owner); err != nil {
		return fmt.Errorf("NetworkAttachmentDefinition for RailClass %q: %w", r.Name, err)
	}
	return nil
}

// ensureSecret creates the group's token once; later pods of the group find it (the Secret is
// immutable, so every rank shares one token).
func (h *PodRailInjector) ensureSecret(ctx context.Context, job *nezhav1.MultiRailJob, owner metav1.OwnerReference) error {
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: builder.SecretName(job.Name), Namespace: job.Namespace, OwnerReferences: []metav1.OwnerReference{owner}},
		Type:       corev1.SecretTypeOpaque,
		Immutable:  ptr.To(true),
		Data:       map[string][]byte{nezhav1.JobTokenKey: []byte(hex.EncodeToString(buf))},
	}
	return h.createOrCheckOwned(ctx, s, &corev1.Secret{}, owner)
}

// ensureNetworkPolicy creates the group's NetworkPolicy once (never adopting one of that name).
func (h *PodRailInjector) ensureNetworkPolicy(ctx context.Context, job *nezhav1.MultiRailJob, g group, owner metav1.OwnerReference) error {
	if h.NetworkPolicy == nil {
		return nil
	}
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: builder.NetworkPolicyName(job.Name), Namespace: job.Namespace, OwnerReferences: []metav1.OwnerReference{owner}},
		Spec:       builder.WorkersPolicySpec(map[string]string{g.label: g.name}, *h.NetworkPolicy),
	}
	return h.createOrCheckOwned(ctx, np, &networkingv1.NetworkPolicy{}, owner)
}

// createOrCheckOwned creates obj, or, when it exists, accepts it only if the group's owner
// controls it (checkOwned): a planted Secret or NAD is refused, never adopted.
func (h *PodRailInjector) createOrCheckOwned(ctx context.Context, obj, existing client.Object, owner metav1.OwnerReference) error {
	err := h.Client.Create(ctx, obj)
	if err == nil || !apierrors.IsAlreadyExists(err) {
		return err
	}
	if err := h.reader().Get(ctx, client.ObjectKeyFromObject(obj), existing); err != nil {
		return err
	}
	return checkOwned(existing, owner)
}

func envValue(env []corev1.EnvVar, name string) string {
	for _, e := range env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func (h *PodRailInjector) reader() client.Reader {
	if h.Reader != nil {
		return h.Reader
	}
	return h.Client
}

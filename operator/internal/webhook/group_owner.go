package webhook

import (
	"context"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A pod is given its group's token only when its controller chain leads to the group's object:
// a PyTorchJob pod's controller is the PyTorchJob its label names; a JobSet pod's controller is
// a Job whose controller is the JobSet its label names. Labels alone can be copied by anyone who
// may create pods (docs/security.md "Tenant model").

// groupOwner returns a controller reference to the object that owns the pod's group (the
// JobSet or PyTorchJob named by the pod's label), for the Secret and NADs made for the group,
// or an error naming what does not match.
func (h *PodRailInjector) groupOwner(ctx context.Context, pod *corev1.Pod, g group) (metav1.OwnerReference, error) {
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil {
		return metav1.OwnerReference{}, fmt.Errorf("pod has no controller; Nezha gives rails and a job token only to pods of a %s (label %s=%s)", g.kind, g.label, g.name)
	}
	if g.kind == kindPyTorchJob {
		if ref.Kind != kindPyTorchJob || ref.Name != g.name {
			return metav1.OwnerReference{}, fmt.Errorf("pod's controller is %s %q, not the PyTorchJob %q its label %s names", ref.Kind, ref.Name, g.name, g.label)
		}
		return asController(*ref), nil
	}
	if ref.Kind != "Job" || ref.APIVersion != "batch/v1" {
		return metav1.OwnerReference{}, fmt.Errorf("pod's controller is %s %q, not a Job of the JobSet %q its label %s names", ref.Kind, ref.Name, g.name, g.label)
	}
	var job batchv1.Job
	if err := h.reader().Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: ref.Name}, &job); err != nil {
		return metav1.OwnerReference{}, fmt.Errorf("read the pod's Job %s/%s: %w", pod.Namespace, ref.Name, err)
	}
	if job.UID != ref.UID {
		return metav1.OwnerReference{}, fmt.Errorf("pod's controller reference names Job %q with UID %s, which is not that Job", ref.Name, ref.UID)
	}
	js := metav1.GetControllerOfNoCopy(&job)
	if js == nil || js.Kind != kindJobSet || js.Name != g.name {
		return metav1.OwnerReference{}, fmt.Errorf("the pod's Job %q is not controlled by the JobSet %q its label %s names", job.Name, g.name, g.label)
	}
	return asController(*js), nil
}

func asController(ref metav1.OwnerReference) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, UID: ref.UID, Controller: ptr.To(true)}
}

// checkOwned refuses an object the group's owner does not control: it was not made for this
// group (planted, or another kind's group of the same name), so its token or network could be
// known to or chosen by someone else. Nezha never adopts it.
func checkOwned(obj client.Object, owner metav1.OwnerReference) error {
	if ref := metav1.GetControllerOfNoCopy(obj); ref != nil && ref.UID == owner.UID {
		return nil
	}
	kind := fmt.Sprintf("%T", obj)
	kind = kind[strings.LastIndex(kind, ".")+1:]
	return fmt.Errorf("%s %s/%s exists but is not controlled by %s %q; Nezha never adopts an object it did not create "+
		"for this group: delete or rename it", kind, obj.GetNamespace(), obj.GetName(), owner.Kind, owner.Name)
}

const (
	kindJobSet     = "JobSet"
	kindPyTorchJob = "PyTorchJob"
)

// group is the job a selected pod belongs to, from its labels.
type group struct {
	kind, label, name string
	// key names the group's objects ("<key>-token", "<key>-<railclass>"). A PyTorchJob's key
	// carries its kind, so a JobSet and a PyTorchJob of one name never share a token.
	key string
	// masterEnv is the container variable holding the rank-0 host.
	masterEnv string
}

func groupOf(pod *corev1.Pod) (group, bool) {
	if n := pod.Labels[jobSetNameLabel]; n != "" {
		return group{kind: kindJobSet, label: jobSetNameLabel, name: n, key: n, masterEnv: "PET_MASTER_ADDR"}, true
	}
	if n := pod.Labels[pyTorchJobNameLabel]; n != "" {
		return group{kind: kindPyTorchJob, label: pyTorchJobNameLabel, name: n, key: n + "-pytorchjob", masterEnv: "MASTER_ADDR"}, true
	}
	return group{}, false
}

package webhook

import (
	"context"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/nezha-project/nezha/operator/internal/scheme"
)

// TestGroupOwnerFollowsTheControllerChain: a pod gets its group's token only when its controller
// chain leads to the object its label names; a pod that copies the label does not.
func TestGroupOwnerFollowsTheControllerChain(t *testing.T) {
	js := metav1.OwnerReference{APIVersion: "jobset.x-k8s.io/v1alpha2", Kind: "JobSet", Name: "mnist", UID: "js-uid", Controller: ptr.To(true)}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "mnist-node-0", Namespace: "team", UID: "job-uid",
		OwnerReferences: []metav1.OwnerReference{js}}}
	other := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: "team", UID: "mine-uid"}}
	h := &PodRailInjector{Client: fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(job, other).Build()}
	pod := func(labels map[string]string, ctrl *metav1.OwnerReference) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team", Labels: labels}}
		if ctrl != nil {
			p.OwnerReferences = []metav1.OwnerReference{*ctrl}
		}
		return p
	}
	jobRef := func(name string, uid string) *metav1.OwnerReference {
		return &metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: name, UID: k8stypes.UID(uid), Controller: ptr.To(true)}
	}
	jsLabel := map[string]string{jobSetNameLabel: "mnist"}
	ctx := context.Background()

	p := pod(jsLabel, jobRef("mnist-node-0", "job-uid"))
	g, _ := groupOf(p)
	owner, err := h.groupOwner(ctx, p, g)
	if err != nil || owner.UID != "js-uid" || owner.Kind != "JobSet" || !*owner.Controller {
		t.Fatalf("a JobSet's pod: owner %+v, %v", owner, err)
	}
	for name, c := range map[string]struct {
		pod  *corev1.Pod
		want string
	}{
		"no controller":    {pod(jsLabel, nil), "pod has no controller"},
		"forged Job UID":   {pod(jsLabel, jobRef("mnist-node-0", "forged")), "which is not that Job"},
		"another Job":      {pod(jsLabel, jobRef("mine", "mine-uid")), `Job "mine" is not controlled by the JobSet "mnist"`},
		"PyTorchJob label": {pod(map[string]string{pyTorchJobNameLabel: "mnist"}, jobRef("mnist-node-0", "job-uid")), "not the PyTorchJob"},
	} {
		g, _ := groupOf(c.pod)
		if _, err := h.groupOwner(ctx, c.pod, g); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to say %q", name, err, c.want)
		}
	}

	// Groups of different kinds with one name never share objects.
	a, _ := groupOf(pod(jsLabel, nil))
	b, _ := groupOf(pod(map[string]string{pyTorchJobNameLabel: "mnist"}, nil))
	if a.key == b.key {
		t.Errorf("JobSet and PyTorchJob groups named mnist share the key %q", a.key)
	}

	// An object the owner does not control is refused, naming it.
	planted := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "mnist-token", Namespace: "team"}}
	if err := checkOwned(planted, owner); err == nil || !strings.Contains(err.Error(), `Secret team/mnist-token exists but is not controlled by JobSet "mnist"`) {
		t.Errorf("planted Secret: %v", err)
	}
	planted.OwnerReferences = []metav1.OwnerReference{owner}
	if err := checkOwned(planted, owner); err != nil {
		t.Errorf("the group's own Secret: %v", err)
	}
}

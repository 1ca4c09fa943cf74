package controller_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nezha-project/nezha/operator/internal/builder"
	tu "github.com/nezha-project/nezha/operator/internal/testutil"
)

// restrictedNamespace is a fresh namespace whose Pod Security level is enforced as "restricted"
// by the apiserver's built-in PodSecurity admission.
func restrictedNamespace(t *testing.T) string {
	t.Helper()
	ns := newNamespace(t)
	var n corev1.Namespace
	if err := k8s.Get(context.Background(), clientKey("", ns), &n); err != nil {
		t.Fatal(err)
	}
	n.Labels = map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}
	if err := k8s.Update(context.Background(), &n); err != nil {
		t.Fatal(err)
	}
	return ns
}

// compliantTemplate is a worker template that is itself "restricted"-compliant (the user's part).
func compliantTemplate() corev1.PodTemplateSpec {
	t := tu.WorkerTemplate()
	for i := range t.Spec.Containers {
		t.Spec.Containers[i].SecurityContext = builder.RestrictedSecurityContext()
	}
	return t
}

// TestPodSecurityAdmissionIsActive proves the test below can fail: the real apiserver rejects a
// pod that breaks "restricted" in such a namespace.
func TestPodSecurityAdmissionIsActive(t *testing.T) {
	ns := restrictedNamespace(t)
	tmpl := tu.WorkerTemplate()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns}, Spec: tmpl.Spec}
	pod.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
	err := k8s.Create(context.Background(), pod)
	if err == nil || !strings.Contains(err.Error(), "violates PodSecurity") {
		t.Fatalf("want PodSecurity to reject a privileged pod in a restricted namespace, got %v", err)
	}
}

// TestWorkersAdmittedUnderRestricted: a MultiRailJob's pods — with the runtime init container the
// operator injects — are accepted in a namespace that enforces Pod Security "restricted".
func TestWorkersAdmittedUnderRestricted(t *testing.T) {
	ns := restrictedNamespace(t)
	r0 := ns + "-r0"
	mustCreate(t, tu.MakeRailClass(r0).Obj())
	mustCreate(t, tu.MakeJob("psa", ns, r0).Replicas(2).Template(compliantTemplate()).InjectRuntime().Obj())
	eventually(t, "both workers admitted", podExists(ns, "psa-1"))
	pod, err := getPod(ns, "psa-0")
	if err != nil {
		t.Fatal(err)
	}
	if len(pod.Spec.InitContainers) != 1 || pod.Spec.InitContainers[0].SecurityContext == nil {
		t.Fatalf("want the runtime init container with a security context, got %+v", pod.Spec.InitContainers)
	}
	ic := pod.Spec.InitContainers[0]
	if ic.Resources.Limits.Memory().IsZero() || ic.Resources.Requests.Cpu().IsZero() {
		t.Errorf("init container without requests and limits: %+v", ic.Resources)
	}
}

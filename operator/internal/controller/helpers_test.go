package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/testenv"
)

const sriovResource = "example.com/rail_vf"

func mustCreate(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

func getJob(t *testing.T, ns, name string) *nezhav1.MultiRailJob {
	t.Helper()
	job := &nezhav1.MultiRailJob{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, job); err != nil {
		t.Fatal(err)
	}
	return job
}

// conditionIs checks a job condition's status and reason, and that the message contains msg.
func conditionIs(ns, name, condType string, status metav1.ConditionStatus, reason, msg string) func() error {
	return func() error {
		job := &nezhav1.MultiRailJob{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, job); err != nil {
			return err
		}
		c := meta.FindStatusCondition(job.Status.Conditions, condType)
		if c == nil {
			return fmt.Errorf("no %s condition yet (conditions: %+v)", condType, job.Status.Conditions)
		}
		if c.Status != status || c.Reason != reason || !strings.Contains(c.Message, msg) {
			return fmt.Errorf("%s = %s/%s %q, want %s/%s containing %q", condType, c.Status, c.Reason, c.Message, status, reason, msg)
		}
		if c.ObservedGeneration != job.Generation {
			return fmt.Errorf("%s observedGeneration %d, job generation %d", condType, c.ObservedGeneration, job.Generation)
		}
		return nil
	}
}

// eventSeen checks that an Event with reason and a message containing msg was recorded for the job.
func eventSeen(ns, job, eventType, reason, msg string) func() error {
	return func() error {
		var evs corev1.EventList
		if err := k8s.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		var seen []string
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "MultiRailJob" && e.InvolvedObject.Name == job {
				if e.Type == eventType && e.Reason == reason && strings.Contains(e.Message, msg) {
					return nil
				}
				seen = append(seen, e.Reason+": "+e.Message)
			}
		}
		return fmt.Errorf("no %s event %s containing %q; events: %v", eventType, reason, msg, seen)
	}
}

func getPod(ns, name string) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	return pod, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pod)
}

func podExists(ns, name string) func() error {
	return func() error { _, err := getPod(ns, name); return err }
}

// bindPod schedules a pod onto node through the binding subresource, as the scheduler does.
func bindPod(t *testing.T, ns, name, node string) {
	t.Helper()
	pod, err := getPod(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}
	if err := k8s.SubResource("binding").Create(context.Background(), pod, b); err != nil {
		t.Fatalf("bind %s to %s: %v", name, node, err)
	}
}

// attachment is one network-status entry Multus would write.
type attachment struct {
	network, iface, ip, pci, rdma string
}

// runPod plays kubelet and Multus for a worker: bind to node, write network-status, set Running
// and Ready.
func runPod(t *testing.T, ns, name, node string, atts ...attachment) {
	t.Helper()
	bindPod(t, ns, name, node)
	setNetworkStatus(t, ns, name, atts...)
	setPodPhase(t, ns, name, corev1.PodRunning, true, nil)
}

func setNetworkStatus(t *testing.T, ns, name string, atts ...attachment) {
	t.Helper()
	st := []nadv1.NetworkStatus{{Name: "cbr0", Interface: "eth0", IPs: []string{"10.244.0.5"}, Default: true}}
	for i, a := range atts {
		s := nadv1.NetworkStatus{Name: a.network, Interface: a.iface, IPs: []string{a.ip}, Mac: fmt.Sprintf("02:00:00:00:00:%02x", i+1)}
		if a.pci != "" {
			s.DeviceInfo = &nadv1.DeviceInfo{Type: nadv1.DeviceInfoTypePCI, Version: "1.1.0",
				Pci: &nadv1.PciDevice{PciAddress: a.pci, RdmaDevice: a.rdma}}
		}
		st = append(st, s)
	}
	raw, _ := json.Marshal(st)
	setPodAnnotation(t, ns, name, nadv1.NetworkStatusAnnot, string(raw))
}

func setPodAnnotation(t *testing.T, ns, name, key, value string) {
	t.Helper()
	pod, err := getPod(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(pod.DeepCopy())
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[key] = value
	if err := k8s.Patch(context.Background(), pod, patch); err != nil {
		t.Fatal(err)
	}
}

func setPodPhase(t *testing.T, ns, name string, phase corev1.PodPhase, ready bool, terminated *corev1.ContainerStateTerminated) {
	t.Helper()
	pod, err := getPod(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	readyStatus := corev1.ConditionFalse
	if ready {
		readyStatus = corev1.ConditionTrue
	}
	pod.Status.Phase = phase
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: readyStatus, LastTransitionTime: metav1.Now()}}
	pod.Status.ContainerStatuses = nil
	if terminated != nil {
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
			Name: pod.Spec.Containers[0].Name, Image: pod.Spec.Containers[0].Image,
			State: corev1.ContainerState{Terminated: terminated},
		}}
	}
	if err := k8s.Status().Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
}

// forceDelete removes a pod at once, as the kubelet does after a graceful deletion (envtest has
// no kubelet, so bound pods would stay terminating forever).
func forceDelete(t *testing.T, ns, name string) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := k8s.Delete(context.Background(), pod, client.GracePeriodSeconds(0)); err != nil && !strings.Contains(err.Error(), "not found") {
		t.Fatal(err)
	}
}

func putRailNode(t *testing.T, rn *nezhav1.RailNode) {
	t.Helper()
	ctx := context.Background()
	have := &nezhav1.RailNode{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: rn.Name}, have); err != nil {
		if err := k8s.Create(ctx, rn.DeepCopy()); err != nil {
			t.Fatal(err)
		}
		if err := k8s.Get(ctx, client.ObjectKey{Name: rn.Name}, have); err != nil {
			t.Fatal(err)
		}
	}
	have.Status = rn.Status
	if err := k8s.Status().Update(ctx, have); err != nil {
		t.Fatal(err)
	}
}

func envOf(c corev1.Container) map[string]corev1.EnvVar {
	out := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		out[e.Name] = e
	}
	return out
}

// ownedByJob checks obj has the job as its controlling owner with blockOwnerDeletion, which is
// what lets the garbage collector delete it with the job (envtest runs no garbage collector).
func ownedByJob(obj client.Object, job *nezhav1.MultiRailJob) error {
	for _, o := range obj.GetOwnerReferences() {
		if o.UID == job.UID && o.Kind == "MultiRailJob" && o.APIVersion == nezhav1.GroupVersion.String() &&
			o.Controller != nil && *o.Controller && o.BlockOwnerDeletion != nil && *o.BlockOwnerDeletion {
			return nil
		}
	}
	return fmt.Errorf("%T %s is not controlled by job %s: %+v", obj, obj.GetName(), job.Name, obj.GetOwnerReferences())
}

func clientKey(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }

func readCRD(t *testing.T, file string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "crd", "bases", file))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(raw, crd); err != nil {
		t.Fatal(err)
	}
	return crd
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// tokenMounted checks that container c mounts the job's token Secret read-only at the directory
// of NEZHA_JOB_TOKEN_FILE, from a volume holding only the token key.
func tokenMounted(spec corev1.PodSpec, c corev1.Container, secret string) error {
	for _, v := range spec.Volumes {
		if v.Secret == nil || v.Secret.SecretName != secret {
			continue
		}
		if len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != "token" || v.Secret.Items[0].Path != "token" {
			return fmt.Errorf("token volume items %+v", v.Secret.Items)
		}
		for _, m := range c.VolumeMounts {
			if m.Name == v.Name && m.MountPath == "/var/run/nezha/job-token" && m.ReadOnly {
				return nil
			}
		}
		return fmt.Errorf("container %s does not mount volume %s read-only at /var/run/nezha/job-token: %+v", c.Name, v.Name, c.VolumeMounts)
	}
	return fmt.Errorf("no volume from Secret %s: %+v", secret, spec.Volumes)
}

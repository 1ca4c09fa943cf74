package controller_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	tu "github.com/nezha-project/nezha/operator/internal/testutil"
)

// TestPyTorchJobMode: the operator creates a PyTorchJob (CRD from the training-operator module)
// owned by the job, with the rails injected into Master and Worker templates, and mirrors its
// terminal conditions.
func TestPyTorchJobMode(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	r0 := ns + "-r0"
	mustCreate(t, tu.MakeRailClass(r0).SRIOV(sriovResource).Obj())
	mustCreate(t, tu.MakeJob("ptj", ns, r0).PyTorchJob(3).Obj())

	ptj := &kubeflowv1.PyTorchJob{}
	eventually(t, "PyTorchJob", func() error { return k8s.Get(ctx, clientKey(ns, "ptj"), ptj) })
	eventually(t, "condition", conditionIs(ns, "ptj", nezhav1.ConditionWorkersCreated, metav1.ConditionTrue, "PyTorchJobCreated", "ptj"))
	job := getJob(t, ns, "ptj")
	if err := ownedByJob(ptj, job); err != nil {
		t.Error(err)
	}
	if job.Status.Workers != 4 {
		t.Errorf("world size %d, want 4 (1 master + 3 workers)", job.Status.Workers)
	}
	for _, rt := range []kubeflowv1.ReplicaType{kubeflowv1.PyTorchJobReplicaTypeMaster, kubeflowv1.PyTorchJobReplicaTypeWorker} {
		tmpl := ptj.Spec.PyTorchReplicaSpecs[rt].Template
		var nets []nadv1.NetworkSelectionElement
		if err := json.Unmarshal([]byte(tmpl.Annotations[nadv1.NetworkAttachmentAnnot]), &nets); err != nil {
			t.Fatalf("%s: %v", rt, err)
		}
		if d := cmp.Diff([]nadv1.NetworkSelectionElement{{Name: "ptj-" + r0, Namespace: ns, InterfaceRequest: "nz0"}}, nets); d != "" {
			t.Errorf("%s networks (-want +got):\n%s", rt, d)
		}
		env := envOf(tmpl.Spec.Containers[0])
		if env["NEZHA_RENDEZVOUS"].Value != "ptj-master-0."+ns+".svc:29400" || env["NEZHA_RAILS"].Value != r0+"=nz0:tcp" {
			t.Errorf("%s env: %v", rt, tmpl.Spec.Containers[0].Env)
		}
		// The training operator sets RANK/WORLD_SIZE per pod; the runtime falls back to them.
		if _, ok := env["NEZHA_RANK"]; ok {
			t.Errorf("%s: NEZHA_RANK must not be fixed in a shared template", rt)
		}
		if q := tmpl.Spec.Containers[0].Resources.Limits[sriovResource]; q.Value() != 1 {
			t.Errorf("%s SR-IOV limit %s", rt, q.String())
		}
		if tmpl.Labels[nezhav1.JobNameLabel] != "ptj" {
			t.Errorf("%s labels %v", rt, tmpl.Labels)
		}
	}

	// A pod the training operator would create: rank from its replica labels, status from it.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "ptj-worker-0", Namespace: ns, Labels: map[string]string{
			nezhav1.JobNameLabel: "ptj", nezhav1.ManagedByLabel: nezhav1.ManagedByValue,
			kubeflowv1.ReplicaTypeLabel: "worker", kubeflowv1.ReplicaIndexLabel: "0",
		}, OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ptj, kubeflowv1.SchemeGroupVersion.WithKind("PyTorchJob"))}},
		Spec: *ptj.Spec.PyTorchReplicaSpecs[kubeflowv1.PyTorchJobReplicaTypeWorker].Template.Spec.DeepCopy(),
	}
	mustCreate(t, pod)
	eventually(t, "worker status", func() error {
		job := getJob(t, ns, "ptj")
		// Not scheduled: counted, and listed among the unhealthy workers.
		if u := job.Status.UnhealthyWorkers; job.Status.WorkerCounts.Pods != 1 || len(u) != 1 || u[0].Rank != 1 || u[0].PodName != "ptj-worker-0" || u[0].Reason != "not scheduled" {
			return errorf("worker counts %+v unhealthy workers %+v", job.Status.WorkerCounts, job.Status.UnhealthyWorkers)
		}
		return nil
	})

	ptj.Status.Conditions = []kubeflowv1.JobCondition{{Type: kubeflowv1.JobSucceeded, Status: corev1.ConditionTrue,
		Reason: "PyTorchJobSucceeded", Message: "PyTorchJob ptj is successfully completed."}}
	if err := k8s.Status().Update(ctx, ptj); err != nil {
		t.Fatal(err)
	}
	eventually(t, "mirrored", conditionIs(ns, "ptj", nezhav1.ConditionSucceeded, metav1.ConditionTrue, "PyTorchJobSucceeded", "successfully completed"))
	if job := getJob(t, ns, "ptj"); job.Status.Phase != nezhav1.PhaseSucceeded {
		t.Errorf("phase %q", job.Status.Phase)
	}
}

// TestPyTorchJobWithoutMaster: the builder's check surfaces as a condition naming the field.
func TestPyTorchJobWithoutMaster(t *testing.T) {
	ns := newNamespace(t)
	r0 := ns + "-r0"
	mustCreate(t, tu.MakeRailClass(r0).Obj())
	job := tu.MakeJob("nomaster", ns, r0).PyTorchJob(2).Obj()
	delete(job.Spec.PyTorchJob.PyTorchReplicaSpecs, kubeflowv1.PyTorchJobReplicaTypeMaster)
	mustCreate(t, job)
	eventually(t, "condition", conditionIs(ns, "nomaster", nezhav1.ConditionWorkersCreated, metav1.ConditionFalse, "InvalidWorkerSpec",
		"spec.pytorchJob.pytorchReplicaSpecs: a Master replica is required"))
	eventually(t, "event", eventSeen(ns, "nomaster", corev1.EventTypeWarning, "InvalidWorkerSpec", "Master"))
}

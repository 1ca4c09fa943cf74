package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	tu "github.com/nezha-project/nezha/operator/internal/testutil"
)

// TestWorkersGetRailsEnvAndChildren: a two-rail job (one rail with an inline config and SR-IOV,
// one referencing an existing NAD) gets its token Secret, headless Service, owned NAD and worker
// pods carrying the networks annotation, SR-IOV resources and the runtime contract.
func TestWorkersGetRailsEnvAndChildren(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	shared := newNamespace(t)
	r0, r1 := ns+"-r0", ns+"-r1"
	mustCreate(t, tu.MakeRailClass(r0).SRIOV(sriovResource).Transport(nezhav1.TransportRDMA).Obj())
	mustCreate(t, tu.MakeRailClass(r1).NADRef(shared, "rail1").Obj())
	mustCreate(t, &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: shared, Name: "rail1"},
		Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: tu.MacvlanConfig("eth2")}})
	job := tu.MakeJob("train", ns, r0, r1).Replicas(2).Policy(nezhav1.PolicyStatic).ColdThreshold("64Ki").Obj()
	mustCreate(t, job)

	eventually(t, "worker pods", func() error {
		if err := podExists(ns, "train-0")(); err != nil {
			return err
		}
		return podExists(ns, "train-1")()
	})
	eventually(t, "conditions", conditionIs(ns, "train", nezhav1.ConditionNetworksReady, metav1.ConditionTrue, "NetworksReady", "2 rails"))
	eventually(t, "workers created", conditionIs(ns, "train", nezhav1.ConditionWorkersCreated, metav1.ConditionTrue, "AllWorkersCreated", ""))
	eventually(t, "event", eventSeen(ns, "train", corev1.EventTypeNormal, "CreatedWorkers", "created 2 worker pods"))
	job = getJob(t, ns, "train")

	// Secret: random 256-bit token, immutable, owned.
	secret := &corev1.Secret{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "train-token"}, secret); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).Match(secret.Data[nezhav1.JobTokenKey]) {
		t.Errorf("token %q is not 64 hex characters", secret.Data[nezhav1.JobTokenKey])
	}
	if secret.Immutable == nil || !*secret.Immutable {
		t.Error("token Secret is not immutable")
	}

	// Headless Service publishing not-ready workers.
	svc := &corev1.Service{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "train"}, svc); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses ||
		svc.Spec.Selector[nezhav1.JobNameLabel] != "train" || svc.Spec.Ports[0].Port != nezhav1.DefaultRendezvousPort {
		t.Errorf("service spec: %+v", svc.Spec)
	}

	// Owned NAD for the inline rail, annotated with its SR-IOV resource; none for the reference.
	nad := &nadv1.NetworkAttachmentDefinition{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "train-" + r0}, nad); err != nil {
		t.Fatal(err)
	}
	if nad.Spec.Config != tu.MacvlanConfig("eth1") || nad.Annotations["k8s.v1.cni.cncf.io/resourceName"] != sriovResource ||
		nad.Labels[nezhav1.RailLabel] != r0 {
		t.Errorf("NAD: %+v", nad)
	}
	var nads nadv1.NetworkAttachmentDefinitionList
	if err := k8s.List(ctx, &nads, client.InNamespace(ns)); err != nil || len(nads.Items) != 1 {
		t.Errorf("want exactly one NAD in the job namespace, got %d (%v)", len(nads.Items), err)
	}

	for _, obj := range []client.Object{secret, svc, nad} {
		if err := ownedByJob(obj, job); err != nil {
			t.Error(err)
		}
	}

	for rank := 0; rank < 2; rank++ {
		pod, err := getPod(ns, fmt.Sprintf("train-%d", rank))
		if err != nil {
			t.Fatal(err)
		}
		if err := ownedByJob(pod, job); err != nil {
			t.Error(err)
		}
		var nets []nadv1.NetworkSelectionElement
		if err := json.Unmarshal([]byte(pod.Annotations[nadv1.NetworkAttachmentAnnot]), &nets); err != nil {
			t.Fatal(err)
		}
		wantNets := []nadv1.NetworkSelectionElement{
			{Name: "train-" + r0, Namespace: ns, InterfaceRequest: "nz0"},
			{Name: "rail1", Namespace: shared, InterfaceRequest: "nz1"},
		}
		if d := cmp.Diff(wantNets, nets); d != "" {
			t.Errorf("rank %d networks (-want +got):\n%s", rank, d)
		}
		rails := r0 + "=nz0:rdma," + r1 + "=nz1:tcp"
		if pod.Annotations[nezhav1.RailsAnnotation] != rails {
			t.Errorf("rails annotation %q", pod.Annotations[nezhav1.RailsAnnotation])
		}
		c := pod.Spec.Containers[0]
		wantEnv := map[string]string{
			"NEZHA_RAILS":          rails,
			"NEZHA_RANK":           fmt.Sprint(rank),
			"NEZHA_WORLD_SIZE":     "2",
			"NEZHA_RENDEZVOUS":     "train-0.train." + ns + ".svc:29400",
			"NEZHA_CONTROL_ADDR":   ":9402",
			"NEZHA_POLICY":         "static",
			"NEZHA_COLD_THRESHOLD": "65536",
		}
		env := envOf(c)
		for k, v := range wantEnv {
			if env[k].Value != v {
				t.Errorf("rank %d env %s = %q, want %q", rank, k, env[k].Value, v)
			}
		}
		// The token is a file on the job's Secret, mounted read-only; never an env variable.
		if _, ok := env["NEZHA_JOB_TOKEN"]; ok || env["NEZHA_JOB_TOKEN_FILE"].Value != "/var/run/nezha/job-token/token" {
			t.Errorf("token env: NEZHA_JOB_TOKEN %+v NEZHA_JOB_TOKEN_FILE %+v", env["NEZHA_JOB_TOKEN"], env["NEZHA_JOB_TOKEN_FILE"])
		}
		if err := tokenMounted(pod.Spec, c, "train-token"); err != nil {
			t.Errorf("rank %d: %v", rank, err)
		}
		one := resource.MustParse("1")
		if q := c.Resources.Limits[sriovResource]; q.Cmp(one) != 0 {
			t.Errorf("SR-IOV limit %v", q.String())
		}
		if q := c.Resources.Requests[sriovResource]; q.Cmp(one) != 0 {
			t.Errorf("SR-IOV request %v", q.String())
		}
		if pod.Spec.Hostname != fmt.Sprintf("train-%d", rank) || pod.Spec.Subdomain != "train" {
			t.Errorf("hostname %q subdomain %q", pod.Spec.Hostname, pod.Spec.Subdomain)
		}
		if pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
			t.Errorf("restartPolicy %q", pod.Spec.RestartPolicy)
		}
		if pod.Labels[nezhav1.RankLabel] != fmt.Sprint(rank) || pod.Labels[nezhav1.JobNameLabel] != "train" {
			t.Errorf("labels %v", pod.Labels)
		}
		if len(pod.Spec.InitContainers) != 0 {
			t.Errorf("unexpected init containers %v", pod.Spec.InitContainers)
		}
	}
}

// TestRuntimeInjectionByAnnotation: the inject-runtime annotation adds the init container from the
// operator's runtime image and points LD_LIBRARY_PATH/PYTHONPATH at the copy.
func TestRuntimeInjectionByAnnotation(t *testing.T) {
	ns := newNamespace(t)
	r0 := ns + "-r0"
	mustCreate(t, tu.MakeRailClass(r0).Obj())
	mustCreate(t, tu.MakeJob("inj", ns, r0).Annotation(nezhav1.InjectRuntimeAnnotation, "true").Obj())
	eventually(t, "pod", podExists(ns, "inj-0"))
	pod, _ := getPod(ns, "inj-0")
	if len(pod.Spec.InitContainers) != 1 || pod.Spec.InitContainers[0].Image != testRuntimeImage {
		t.Fatalf("init containers: %+v", pod.Spec.InitContainers)
	}
	env := envOf(pod.Spec.Containers[0])
	if env["LD_LIBRARY_PATH"].Value != "/opt/nezha/lib" || env["PYTHONPATH"].Value != "/opt/nezha/python" {
		t.Errorf("paths: %v %v", env["LD_LIBRARY_PATH"], env["PYTHONPATH"])
	}
}

// TestMissingRailClassThenRecovery: a job naming an absent RailClass waits with a condition and
// an Event, creates nothing, and proceeds when the RailClass appears (RailClass watch).
func TestMissingRailClassThenRecovery(t *testing.T) {
	ns := newNamespace(t)
	late := ns + "-late"
	mustCreate(t, tu.MakeJob("wait", ns, late).Obj())
	eventually(t, "condition", conditionIs(ns, "wait", nezhav1.ConditionNetworksReady, metav1.ConditionFalse, "RailClassNotFound", `RailClass "`+late+`" not found`))
	eventually(t, "event", eventSeen(ns, "wait", corev1.EventTypeWarning, "RailClassNotFound", late))
	if err := conditionIs(ns, "wait", nezhav1.ConditionWorkersCreated, metav1.ConditionFalse, "WaitingForNetworks", "")(); err != nil {
		t.Error(err)
	}
	if job := getJob(t, ns, "wait"); job.Status.Phase != nezhav1.PhasePending {
		t.Errorf("phase %q", job.Status.Phase)
	}
	if _, err := getPod(ns, "wait-0"); err == nil {
		t.Fatal("pod created without its RailClass")
	}
	mustCreate(t, tu.MakeRailClass(late).Obj())
	eventually(t, "pod after RailClass", podExists(ns, "wait-0"))
	eventually(t, "networks ready", conditionIs(ns, "wait", nezhav1.ConditionNetworksReady, metav1.ConditionTrue, "NetworksReady", ""))
}

// TestInvalidRailClassConfig: a RailClass whose CNI config is not JSON never gets in: the
// operator's webhook refuses it at admission with the field named (the builder keeps its own
// check, covered in builder_test, for a cluster running without the webhook).
func TestInvalidRailClassConfig(t *testing.T) {
	ns := newNamespace(t)
	err := k8s.Create(context.Background(), tu.MakeRailClass(ns+"-bad").Config(`{"type": macvlan}`).Obj())
	if err == nil || !strings.Contains(err.Error(), "spec.network.config: Invalid value") {
		t.Fatalf("want the RailClass refused at admission naming spec.network.config, got %v", err)
	}
}

// TestMissingNADRefThenRecovery: a referenced NAD that does not exist is polled with backoff.
func TestMissingNADRefThenRecovery(t *testing.T) {
	ns := newNamespace(t)
	rc := ns + "-ref"
	mustCreate(t, tu.MakeRailClass(rc).NADRef("", "later").Obj())
	mustCreate(t, tu.MakeJob("nadwait", ns, rc).Obj())
	eventually(t, "condition", conditionIs(ns, "nadwait", nezhav1.ConditionNetworksReady, metav1.ConditionFalse, "NetworkAttachmentNotFound",
		"NetworkAttachmentDefinition "+ns+"/later not found"))
	mustCreate(t, &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "later"},
		Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: tu.MacvlanConfig("eth3")}})
	eventually(t, "pod after NAD", podExists(ns, "nadwait-0"))
}

// TestSRIOVResourceUnavailableThenRecovery: no node advertises the rail's SR-IOV resource until one does.
func TestSRIOVResourceUnavailableThenRecovery(t *testing.T) {
	ns := newNamespace(t)
	rc := ns + "-vf"
	res := corev1.ResourceName("example.com/" + strings.ReplaceAll(ns, "-", "_"))
	mustCreate(t, tu.MakeRailClass(rc).SRIOV(string(res)).Obj())
	mustCreate(t, tu.MakeJob("vf", ns, rc).Obj())
	eventually(t, "condition", conditionIs(ns, "vf", nezhav1.ConditionNetworksReady, metav1.ConditionFalse, "SRIOVResourceUnavailable", string(res)))
	eventually(t, "event", eventSeen(ns, "vf", corev1.EventTypeWarning, "SRIOVResourceUnavailable", string(res)))
	if err := createNode(ns+"-node", corev1.ResourceList{res: resource.MustParse("4")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pod after node advertises", podExists(ns, "vf-0"))
}

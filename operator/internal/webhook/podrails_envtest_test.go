package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	webhookserver "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/builder"
	"github.com/nezha-project/nezha/operator/internal/testenv"
	"github.com/nezha-project/nezha/operator/internal/webhook"
)

// The Trainer v2 and JobSet releases whose CRDs this test installs (from the Go module proxy;
// neither module is a dependency of the operator).
const (
	trainerModule = "github.com/kubeflow/trainer/v2@v2.3.0"
	jobSetModule  = "sigs.k8s.io/jobset@v0.12.0"
)

func moduleDir(t *testing.T, modVersion string) string {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", modVersion).Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v", modVersion, err)
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		t.Fatalf("go mod download %s: %s %v", modVersion, m.Error, err)
	}
	return m.Dir
}

func podWebhookConfiguration() *admissionregistrationv1.MutatingWebhookConfiguration {
	path := webhook.PodRailsPath
	fail := admissionregistrationv1.Fail
	side := admissionregistrationv1.SideEffectClassNoneOnDryRun
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "nezha-pod-rails"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "mpod-rails.nezha.io",
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             &side,
			FailurePolicy:           &fail,
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{webhook.InjectLabel: "true"}},
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service: &admissionregistrationv1.ServiceReference{Name: "nezha-operator-webhook", Namespace: "nezha-system", Path: &path},
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
		}},
	}
}

// applyYAML creates every object of a multi-document YAML file.
func applyYAML(t *testing.T, c client.Client, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			break
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := c.Create(context.Background(), u); err != nil {
			t.Fatalf("%s: create %s %s: %v", path, u.GetKind(), u.GetName(), err)
		}
	}
}

// trainerNodePod is shaped as Trainer v2.3's torch `node` pods are: JobSet labels, the Job as
// controller, the PET_* environment in container `node`.
func trainerNodePod(ns, trainJob string, labels, annotations map[string]string) *corev1.Pod {
	return trainerNodePodOf(ns, trainJob, "11111111-2222-3333-4444-555555555555", labels, annotations)
}

// trainerNodePodOf is trainerNodePod with its Job's UID (a Job made by jobSetJob).
func trainerNodePodOf(ns, trainJob string, jobUID types.UID, labels, annotations map[string]string) *corev1.Pod {
	l := map[string]string{
		"jobset.sigs.k8s.io/jobset-name":           trainJob,
		"jobset.sigs.k8s.io/replicatedjob-name":    "node",
		"batch.kubernetes.io/job-completion-index": "0",
	}
	for k, v := range labels {
		l[k] = v
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: trainJob + "-node-0-0", Namespace: ns, Labels: l, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: trainJob + "-node-0",
				UID: jobUID, Controller: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "node", Image: "trainer:1", Command: []string{"torchrun", "train.py"},
			Env: []corev1.EnvVar{
				{Name: "PET_NNODES", Value: "2"}, {Name: "PET_NPROC_PER_NODE", Value: "1"},
				{Name: "PET_MASTER_ADDR", Value: trainJob + "-node-0-0." + trainJob}, {Name: "PET_MASTER_PORT", Value: "29500"},
			},
		}}},
	}
}

// jobSetJob creates the Job "<jobSet>-node-0" as the JobSet controller would: controlled by the
// JobSet (whose UID is made up; nothing here needs the JobSet object itself).
func jobSetJob(t *testing.T, c client.Client, ns, jobSet string) types.UID {
	t.Helper()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: jobSet + "-node-0", Namespace: ns, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "jobset.x-k8s.io/v1alpha2", Kind: "JobSet", Name: jobSet,
			UID: types.UID("00000000-0000-0000-0000-" + fmt.Sprintf("%012x", len(jobSet))), Controller: ptr.To(true)}}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "node", Image: "trainer:1"}}}}},
	}
	if err := c.Create(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	return job.UID
}

func TestPodWebhookInjectsTrainerNodePods(t *testing.T) {
	env, err := testenv.New(testenv.Options{WithoutPyTorchJob: true})
	if err != nil {
		t.Fatal(err)
	}
	trainer, jobset := moduleDir(t, trainerModule), moduleDir(t, jobSetModule)
	env.CRDDirectoryPaths = append(env.CRDDirectoryPaths,
		filepath.Join(trainer, "manifests", "base", "crds"),
		filepath.Join(jobset, "config", "components", "crd", "bases"))
	env.WebhookInstallOptions.MutatingWebhooks = []*admissionregistrationv1.MutatingWebhookConfiguration{podWebhookConfiguration()}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start envtest: %v", err)
	}
	defer func() { _ = env.Stop() }()
	s := testenv.Scheme()
	_ = apiextensionsv1.AddToScheme(s)
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}

	wh := env.WebhookInstallOptions
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: s, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		WebhookServer: webhookserver.NewServer(webhookserver.Options{Host: wh.LocalServingHost, Port: wh.LocalServingPort, CertDir: wh.LocalServingCertDir}),
	})
	if err != nil {
		t.Fatal(err)
	}
	mgr.GetWebhookServer().Register(webhook.PodRailsPath, &admission.Webhook{Handler: &webhook.PodRailInjector{
		Client: c, Decoder: admission.NewDecoder(s), RuntimeImage: "nezha/runtime:test",
		NetworkPolicy: &builder.NetworkPolicyOptions{OperatorNamespace: "nezha-system",
			OperatorPodLabels: map[string]string{"app.kubernetes.io/component": "operator"}},
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = mgr.Start(ctx) }()
	started := mgr.GetWebhookServer().StartedChecker()
	for deadline := time.Now().Add(30 * time.Second); started(nil) != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("webhook server did not start")
		}
	}

	// The real Trainer and JobSet CRDs took the chart's ClusterTrainingRuntime and the sample
	// TrainJob (their schemas validate them).
	root := testenv.RepoRoot()
	applyYAML(t, c, filepath.Join(root, "config", "samples", "trainer_clustertrainingruntime.yaml"))
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}); err != nil {
		t.Fatal(err)
	}
	applyYAML(t, c, filepath.Join(root, "config", "samples", "trainer_trainjob.yaml"))

	for _, rail := range []string{"rail-a", "rail-b"} {
		rc := &nezhav1.RailClass{ObjectMeta: metav1.ObjectMeta{Name: rail}}
		rc.Spec.Transport = nezhav1.TransportTCP
		rc.Spec.HostInterface.Name = "eth1"
		rc.Spec.Network.Config = `{"cniVersion":"1.0.0","type":"macvlan","master":"eth1","ipam":{"type":"whereabouts","range":"10.70.0.0/16"}}`
		if err := c.Create(ctx, rc); err != nil {
			t.Fatal(err)
		}
	}

	sel := map[string]string{webhook.InjectLabel: "true"}
	mnistJob := jobSetJob(t, c, "team", "mnist")
	pod := trainerNodePodOf("team", "mnist", mnistJob, sel, map[string]string{webhook.RailClassesAnnotation: "rail-a,rail-b", webhook.RuntimeAnnotation: "inject"})
	if err := c.Create(ctx, pod); err != nil {
		t.Fatalf("create a Trainer node pod: %v", err)
	}
	got := &corev1.Pod{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "team", Name: pod.Name}, got); err != nil {
		t.Fatal(err)
	}
	if n := got.Annotations[nadv1.NetworkAttachmentAnnot]; !strings.Contains(n, "mnist-rail-a") || !strings.Contains(n, "mnist-rail-b") {
		t.Errorf("networks annotation %q lacks the rails' NADs", n)
	}
	env0 := map[string]corev1.EnvVar{}
	for _, e := range got.Spec.Containers[0].Env {
		env0[e.Name] = e
	}
	if v := env0[nezhav1.EnvRails].Value; v != "rail-a=nz0:tcp,rail-b=nz1:tcp" {
		t.Errorf("%s = %q", nezhav1.EnvRails, v)
	}
	if v := env0[nezhav1.EnvRendezvous].Value; v != "mnist-node-0-0.mnist:29400" {
		t.Errorf("%s = %q, want the TrainJob's rank-0 pod on Nezha's rendezvous port", nezhav1.EnvRendezvous, v)
	}
	if _, ok := env0[nezhav1.EnvJobToken]; ok || env0[nezhav1.EnvJobTokenFile].Value != "/var/run/nezha/job-token/token" {
		t.Errorf("the token must be a mounted file, not an env variable: %+v %+v", env0[nezhav1.EnvJobToken], env0[nezhav1.EnvJobTokenFile])
	}
	if i := slices.IndexFunc(got.Spec.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "mnist-token" }); i < 0 {
		t.Errorf("no volume from Secret mnist-token: %+v", got.Spec.Volumes)
	}
	if env0["PET_NNODES"].Value != "2" {
		t.Errorf("Trainer's own environment was not kept")
	}
	if len(got.Spec.InitContainers) != 1 || got.Spec.InitContainers[0].Image != "nezha/runtime:test" {
		t.Errorf("runtime init container: %+v", got.Spec.InitContainers)
	}
	secret := &corev1.Secret{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "team", Name: "mnist-token"}, secret); err != nil || len(secret.Data[nezhav1.JobTokenKey]) < 32 {
		t.Errorf("token Secret: %v %d bytes", err, len(secret.Data[nezhav1.JobTokenKey]))
	} else if ref := metav1.GetControllerOf(secret); ref == nil || ref.Kind != "JobSet" || ref.Name != "mnist" {
		t.Errorf("token Secret owners %+v, want the JobSet as controller", secret.OwnerReferences)
	}
	for _, r := range []string{"rail-a", "rail-b"} {
		nad := &nadv1.NetworkAttachmentDefinition{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: "team", Name: "mnist-" + r}, nad); err != nil || !strings.Contains(nad.Spec.Config, "macvlan") {
			t.Errorf("NAD mnist-%s: %v", r, err)
		}
	}

	// The group gets the NetworkPolicy a MultiRailJob gets, selecting its pods by the JobSet's label.
	np := &networkingv1.NetworkPolicy{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "team", Name: "mnist-workers"}, np); err != nil {
		t.Errorf("the TrainJob's NetworkPolicy: %v", err)
	} else if ref := metav1.GetControllerOf(np); ref == nil || ref.Kind != "JobSet" || ref.Name != "mnist" ||
		np.Spec.PodSelector.MatchLabels["jobset.sigs.k8s.io/jobset-name"] != "mnist" || len(np.Spec.Ingress) != 2 {
		t.Errorf("the TrainJob's NetworkPolicy: owners %+v selector %v ingress %d", np.OwnerReferences, np.Spec.PodSelector, len(np.Spec.Ingress))
	}

	// A second rank of the same TrainJob shares the Secret.
	p2 := trainerNodePodOf("team", "mnist", mnistJob, sel, map[string]string{webhook.RailClassesAnnotation: "rail-a,rail-b"})
	p2.Name = "mnist-node-0-1"
	if err := c.Create(ctx, p2); err != nil {
		t.Fatalf("second rank: %v", err)
	}

	// Attacks (docs/security.md "Tenant model"): a planted token Secret is refused, never used;
	// a pod that only copies the JobSet label (its controller is no Job of that JobSet) gets
	// nothing; a RailClass whose allowedNamespaces does not select the namespace is refused.
	planted := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "planted-token", Namespace: "team"},
		Data: map[string][]byte{nezhav1.JobTokenKey: []byte("known-to-the-attacker")}}
	if err := c.Create(ctx, planted); err != nil {
		t.Fatal(err)
	}
	victim := trainerNodePodOf("team", "planted", jobSetJob(t, c, "team", "planted"), sel, map[string]string{webhook.RailClassesAnnotation: "rail-a"})
	if err := c.Create(ctx, victim); err == nil || !strings.Contains(err.Error(), "Secret team/planted-token exists but is not controlled by JobSet") {
		t.Errorf("pod of a JobSet whose token Secret was planted: error %v", err)
	}
	stranger := trainerNodePod("team", "mnist", sel, map[string]string{webhook.RailClassesAnnotation: "rail-a"})
	stranger.Name = "stranger"
	if err := c.Create(ctx, stranger); err == nil || !strings.Contains(err.Error(), `Job "mnist-node-0" with UID`) {
		t.Errorf("pod copying the JobSet's labels: error %v", err)
	}
	fenced := &nezhav1.RailClass{ObjectMeta: metav1.ObjectMeta{Name: "rail-fenced"}}
	fenced.Spec.Transport = nezhav1.TransportTCP
	fenced.Spec.HostInterface.Name = "eth1"
	fenced.Spec.Network.Config = `{"cniVersion":"1.0.0","type":"macvlan","master":"eth1"}`
	fenced.Spec.AllowedNamespaces = &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "other"}}
	if err := c.Create(ctx, fenced); err != nil {
		t.Fatal(err)
	}
	p3 := trainerNodePodOf("team", "mnist", mnistJob, sel, map[string]string{webhook.RailClassesAnnotation: "rail-fenced"})
	p3.Name = "mnist-node-0-2"
	if err := c.Create(ctx, p3); err == nil || !strings.Contains(err.Error(), `RailClass "rail-fenced" does not allow namespace "team"`) {
		t.Errorf("pod naming a RailClass fenced off its namespace: error %v", err)
	}

	// Refusals name what is missing.
	bad := trainerNodePod("team", "nolist", sel, nil)
	if err := c.Create(ctx, bad); err == nil || !strings.Contains(err.Error(), webhook.RailClassesAnnotation) {
		t.Errorf("pod without %s: error %v", webhook.RailClassesAnnotation, err)
	}
	unknown := trainerNodePod("team", "unknown", sel, map[string]string{webhook.RailClassesAnnotation: "nope"})
	if err := c.Create(ctx, unknown); err == nil || !strings.Contains(err.Error(), `RailClass "nope"`) {
		t.Errorf("pod naming an unknown RailClass: error %v", err)
	}
	// Pods without the label are not touched.
	plain := trainerNodePod("team", "plain", nil, map[string]string{webhook.RailClassesAnnotation: "rail-a"})
	if err := c.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "team", Name: plain.Name}, plain); err != nil || plain.Annotations[nadv1.NetworkAttachmentAnnot] != "" {
		t.Errorf("an unlabelled pod was mutated: %v %v", err, plain.Annotations)
	}
}

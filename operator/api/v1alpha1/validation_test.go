package v1alpha1_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/testenv"
	tu "github.com/nezha-project/nezha/operator/internal/testutil"
)

var k8s client.Client

func TestMain(m *testing.M) {
	env, err := testenv.New(testenv.Options{WithoutPyTorchJob: true})
	if err != nil {
		panic(err)
	}
	cfg, err := env.Start()
	if err != nil {
		panic(err)
	}
	k8s, err = client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		panic(err)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// expectCreate creates obj and checks the API server's verdict: accepted when wantErr is empty,
// otherwise rejected with a message containing wantErr.
func expectCreate(t *testing.T, obj client.Object, wantErr string) {
	t.Helper()
	err := k8s.Create(context.Background(), obj)
	switch {
	case wantErr == "" && err != nil:
		t.Fatalf("want accepted, got: %v", err)
	case wantErr != "" && err == nil:
		t.Fatalf("want rejected with %q, was accepted", wantErr)
	case wantErr != "" && !strings.Contains(err.Error(), wantErr):
		t.Fatalf("want error containing %q, got: %v", wantErr, err)
	}
	if err == nil {
		_ = k8s.Delete(context.Background(), obj)
	}
}

func TestRailClassValidation(t *testing.T) {
	cases := []struct {
		name    string
		rc      *nezhav1.RailClass
		wantErr string
	}{
		{"valid inline config", tu.MakeRailClass("ok-config").Obj(), ""},
		{"valid nadRef", tu.MakeRailClass("ok-ref").NADRef("kube-system", "rail0").Obj(), ""},
		{"valid pci + sriov + rdma", tu.MakeRailClass("ok-pci").SRIOV("nvidia.com/rail0").Transport(nezhav1.TransportRDMA).
			HostInterface(nezhav1.HostInterfaceSelector{PCIAddress: "0000:3b:00.1"}).MTU(9000).BandwidthMbps(100000).Obj(), ""},
		{"valid perNode", tu.MakeRailClass("ok-pernode").HostInterface(nezhav1.HostInterfaceSelector{PerNode: map[string]string{"n1": "ens1", "n2": "ens2"}}).Obj(), ""},
		{"neither config nor nadRef", tu.MakeRailClass("no-net").Network(nezhav1.RailNetwork{}).Obj(),
			"spec.network: exactly one of config or nadRef must be set"},
		{"both config and nadRef", tu.MakeRailClass("both-net").Network(nezhav1.RailNetwork{Config: "{}", NADRef: &nezhav1.NADReference{Name: "x"}}).Obj(),
			"spec.network: exactly one of config or nadRef must be set"},
		{"unknown transport", tu.MakeRailClass("bad-transport").Transport("udp").Obj(), `spec.transport: Unsupported value: "udp"`},
		{"no host interface", tu.MakeRailClass("no-hostif").HostInterface(nezhav1.HostInterfaceSelector{}).Obj(),
			"spec.hostInterface: exactly one of name, pciAddress or perNode must be set"},
		{"two host interface selectors", tu.MakeRailClass("two-hostif").HostInterface(nezhav1.HostInterfaceSelector{Name: "eth1", PCIAddress: "0000:3b:00.1"}).Obj(),
			"spec.hostInterface: exactly one of name, pciAddress or perNode must be set"},
		{"interface name too long", tu.MakeRailClass("long-if").HostInterface(nezhav1.HostInterfaceSelector{Name: "abcdefghijklmnop"}).Obj(),
			"spec.hostInterface.name: Too long"},
		{"bad pci address", tu.MakeRailClass("bad-pci").HostInterface(nezhav1.HostInterfaceSelector{PCIAddress: "3b:00.1"}).Obj(),
			"spec.hostInterface.pciAddress in body should match"},
		{"perNode interface too long", tu.MakeRailClass("bad-pernode").HostInterface(nezhav1.HostInterfaceSelector{PerNode: map[string]string{"n1": "abcdefghijklmnop"}}).Obj(),
			"spec.hostInterface.perNode: every interface name must be 1-15 characters"},
		{"mtu too small", tu.MakeRailClass("small-mtu").MTU(100).Obj(), "spec.mtu: Invalid value: 100"},
		{"zero bandwidth", tu.MakeRailClass("zero-bw").BandwidthMbps(0).Obj(), "spec.expectedBandwidthMbps: Invalid value: 0"},
		{"bad sriov resource name", tu.MakeRailClass("bad-sriov").SRIOV("nvidia.com/rail 0").Obj(), "spec.sriovResourceName in body should match"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { expectCreate(t, tc.rc, tc.wantErr) })
	}
}

func TestRailClassDefaultsTransportToTCP(t *testing.T) {
	rc := tu.MakeRailClass("default-transport").Transport("").Obj()
	if err := k8s.Create(context.Background(), rc); err != nil {
		t.Fatal(err)
	}
	defer k8s.Delete(context.Background(), rc)
	if rc.Spec.Transport != nezhav1.TransportTCP {
		t.Fatalf("transport defaulted to %q, want tcp", rc.Spec.Transport)
	}
}

func TestMultiRailJobValidation(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "validation-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	n := ns.Name
	badRestart := tu.WorkerTemplate()
	badRestart.Spec.RestartPolicy = corev1.RestartPolicyAlways
	cases := []struct {
		name    string
		job     *nezhav1.MultiRailJob
		wantErr string
	}{
		{"valid workers", tu.MakeJob("ok", n, "r0", "r1").Replicas(4).Policy(nezhav1.PolicyStatic).ColdThreshold("64Ki").
			MinHealthyRails(2).OnRailLoss(nezhav1.Restart).RailTimeout(metav1.Duration{Duration: 2e9}).Obj(), ""},
		{"valid pytorchJob", tu.MakeJob("ok-pt", n, "r0").PyTorchJob(2).Obj(), ""},
		{"empty rails", tu.MakeJob("no-rails", n).Obj(), "spec.rails: Required value"},
		{"empty rail name", tu.MakeJob("empty-rail", n, "").Obj(), "spec.rails[0]: Invalid value"},
		{"duplicate rails", tu.MakeJob("dup-rails", n, "r0", "r1", "r0").Obj(), "spec.rails must not contain duplicates"},
		{"too many rails", tu.MakeJob("many-rails", n, "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q").Obj(),
			"spec.rails: Too many"},
		{"zero workers", tu.MakeJob("zero", n, "r0").Replicas(0).Obj(), "spec.workers.replicas: Invalid value: 0"},
		{"too many workers", tu.MakeJob("huge", n, "r0").Replicas(65537).Obj(), "spec.workers.replicas: Invalid value: 65537"},
		{"neither workers nor pytorchJob", tu.MakeJob("neither", n, "r0").NoWorkers().Obj(), "spec: exactly one of workers or pytorchJob must be set"},
		{"both workers and pytorchJob", func() *nezhav1.MultiRailJob {
			j := tu.MakeJob("both", n, "r0").PyTorchJob(1).Obj()
			j.Spec.Workers = &nezhav1.WorkerSpec{Replicas: 1, Template: tu.WorkerTemplate()}
			return j
		}(), "spec: exactly one of workers or pytorchJob must be set"},
		{"bad policy", tu.MakeJob("bad-policy", n, "r0").Policy("fastest").Obj(), `spec.runtime.policy: Unsupported value: "fastest"`},
		{"minHealthyRails above rails", tu.MakeJob("min-high", n, "r0", "r1").MinHealthyRails(3).Obj(),
			"spec.failurePolicy.minHealthyRails must not exceed the number of spec.rails"},
		{"minHealthyRails zero", tu.MakeJob("min-zero", n, "r0").MinHealthyRails(0).Obj(), "spec.failurePolicy.minHealthyRails: Invalid value: 0"},
		{"bad onRailLoss", tu.MakeJob("bad-loss", n, "r0").OnRailLoss("Panic").Obj(), `spec.failurePolicy.onRailLoss: Unsupported value: "Panic"`},
		{"railTimeout too short", tu.MakeJob("short-timeout", n, "r0").RailTimeout(metav1.Duration{Duration: 50e6}).Obj(),
			"spec.runtime.failover.railTimeout must be between 100ms and 1h"},
		{"railTimeout too long", tu.MakeJob("long-timeout", n, "r0").RailTimeout(metav1.Duration{Duration: 2 * 3600e9}).Obj(),
			"spec.runtime.failover.railTimeout must be between 100ms and 1h"},
		{"nccl and collectives", func() *nezhav1.MultiRailJob {
			j := tu.MakeJob("nccl", n, "r0").Obj()
			j.Spec.Runtime.Integration = []nezhav1.Integration{nezhav1.IntegrationNCCL, nezhav1.IntegrationCollectives}
			return j
		}(), ""},
		{"unknown integration", func() *nezhav1.MultiRailJob {
			j := tu.MakeJob("mpi", n, "r0").Obj()
			j.Spec.Runtime.Integration = []nezhav1.Integration{"mpi"}
			return j
		}(), `spec.runtime.integration[0]: Unsupported value: "mpi"`},
		{"integration twice", func() *nezhav1.MultiRailJob {
			j := tu.MakeJob("nccl-twice", n, "r0").Obj()
			j.Spec.Runtime.Integration = []nezhav1.Integration{nezhav1.IntegrationNCCL, nezhav1.IntegrationNCCL}
			return j
		}(), `spec.runtime.integration[1]: Duplicate value`},
		{"negative cold threshold", tu.MakeJob("neg-cold", n, "r0").ColdThreshold("-1Ki").Obj(), "spec.runtime.coldThreshold must not be negative"},
		{"restartPolicy Always", tu.MakeJob("always", n, "r0").Template(badRestart).Obj(),
			"spec.workers.template.spec.restartPolicy must be Never or OnFailure"},
		{"name too long for hostnames", tu.MakeJob(strings.Repeat("a", 58), n, "r0").Obj(), "metadata.name must be a DNS-1035 label of at most 57 characters"},
		{"name starting with a digit", tu.MakeJob("1job", n, "r0").Obj(), "metadata.name must be a DNS-1035 label"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { expectCreate(t, tc.job, tc.wantErr) })
	}
}

func TestMultiRailJobRailsAndReplicasImmutable(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "immutable-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	job := tu.MakeJob("immutable", ns.Name, "r0", "r1").Obj()
	if err := k8s.Create(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	job.Spec.Rails = []string{"r0"}
	err := k8s.Update(context.Background(), job)
	if err == nil || !strings.Contains(err.Error(), "spec.rails is immutable") {
		t.Fatalf("want spec.rails is immutable, got %v", err)
	}
	job.Spec.Rails = []string{"r0", "r1"}
	job.Spec.Workers.Replicas = 3
	err = k8s.Update(context.Background(), job)
	if err == nil || !strings.Contains(err.Error(), "spec.workers.replicas is immutable") {
		t.Fatalf("want spec.workers.replicas is immutable, got %v", err)
	}
	// Other spec fields stay editable.
	job.Spec.Workers.Replicas = 1
	job.Spec.Runtime.Policy = nezhav1.PolicySingle
	if err := k8s.Update(context.Background(), job); err != nil {
		t.Fatalf("policy change rejected: %v", err)
	}
}

func TestMultiRailJobPyTorchJobKeepsUnknownFields(t *testing.T) {
	// The pytorchJob field is schemaless (the PyTorchJob CRD validates it); make sure it is not
	// pruned on the way through the API server.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "pytorch-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	job := tu.MakeJob("pt", ns.Name, "r0").PyTorchJob(3).Obj()
	job.Spec.PyTorchJob.NprocPerNode = func() *string { s := "2"; return &s }()
	if err := k8s.Create(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	var got nezhav1.MultiRailJob
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(job), &got); err != nil {
		t.Fatal(err)
	}
	w := got.Spec.PyTorchJob.PyTorchReplicaSpecs[kubeflowv1.PyTorchJobReplicaTypeWorker]
	if w == nil || *w.Replicas != 3 || got.Spec.PyTorchJob.NprocPerNode == nil || *got.Spec.PyTorchJob.NprocPerNode != "2" {
		t.Fatalf("pytorchJob spec lost fields: %+v", got.Spec.PyTorchJob)
	}
}

func TestRailNodeStatusValidation(t *testing.T) {
	rn := tu.MakeRailNode("node-a").Obj()
	if err := k8s.Create(context.Background(), rn); err != nil {
		t.Fatal(err)
	}
	rn.Status = tu.MakeRailNode("node-a").Rail("r0", "eth1", true).Rail("r1", "eth2", false).Obj().Status
	if err := k8s.Status().Update(context.Background(), rn); err != nil {
		t.Fatalf("valid status rejected: %v", err)
	}
	rn.Status.Rails[0].OperState = "sideways"
	err := k8s.Status().Update(context.Background(), rn)
	if err == nil || !strings.Contains(err.Error(), `status.rails[0].operState: Unsupported value: "sideways"`) {
		t.Fatalf("want operState rejected, got %v", err)
	}
}

// TestSamplesAreAccepted creates every manifest in config/samples: the examples users copy must
// pass the schema.
func TestSamplesAreAccepted(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "samples-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "config", "samples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples found (%v)", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(raw, &obj.Object); err != nil {
				t.Fatal(err)
			}
			// Kubeflow Trainer samples need Trainer's CRDs, which this suite does not install:
			// operator/internal/webhook's envtest applies them with the real Trainer and JobSet CRDs.
			if obj.GroupVersionKind().Group == "trainer.kubeflow.org" {
				t.Skip("Trainer sample: applied by the pod webhook's envtest (operator/internal/webhook)")
			}
			if obj.GetKind() == "MultiRailJob" {
				obj.SetNamespace(ns.Name)
			}
			expectCreate(t, obj, "")
		})
	}
}

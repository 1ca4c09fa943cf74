package builder_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/builder"
	tu "github.com/nezha-project/nezha/operator/internal/testutil"
)

func TestNaming(t *testing.T) {
	cases := []struct{ got, want string }{
		{builder.SecretName("j"), "j-token"},
		{builder.ServiceName("j"), "j"},
		{builder.PodName("j", 12), "j-12"},
		{builder.PodFQDN("j", "ns", 3), "j-3.j.ns.svc"},
		{builder.RendezvousAddress("j", "ns", 29400), "j-0.j.ns.svc:29400"},
		{builder.PyTorchMasterAddress("j", "ns", 29400), "j-master-0.ns.svc:29400"},
		{builder.NADName("j", "rail0"), "j-rail0"},
		{builder.InterfaceName(15), "nz15"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	// The longest job name with the highest rank is still a valid hostname.
	if errs := validation.IsDNS1123Label(builder.PodName(strings.Repeat("a", 57), 65535)); len(errs) > 0 {
		t.Errorf("pod name: %v", errs)
	}
	// Long NAD names are cut to a valid, distinct object name.
	long := strings.Repeat("r", 250)
	a, b := builder.NADName("job", long+"a"), builder.NADName("job", long+"b")
	if a == b || len(a) > 253 || len(validation.IsDNS1123Subdomain(a)) > 0 {
		t.Errorf("long NAD names %q / %q", a, b)
	}
}

func TestResolveRails(t *testing.T) {
	job := tu.MakeJob("j", "ns", "a", "b").Obj()
	cases := []struct {
		name    string
		classes []*nezhav1.RailClass
		want    []builder.Rail
		wantErr string
	}{
		{
			name: "inline config and reference with default namespace",
			classes: []*nezhav1.RailClass{
				tu.MakeRailClass("a").SRIOV("x.io/vf").Transport(nezhav1.TransportRDMA).Obj(),
				tu.MakeRailClass("b").NADRef("", "shared").Transport("").Obj(),
			},
			want: []builder.Rail{
				{Name: "a", Interface: "nz0", Transport: nezhav1.TransportRDMA, NetworkNamespace: "ns", NetworkName: "j-a",
					OwnNAD: true, Config: tu.MacvlanConfig("eth1"), SRIOVResourceName: "x.io/vf"},
				{Name: "b", Interface: "nz1", Transport: nezhav1.TransportTCP, NetworkNamespace: "ns", NetworkName: "shared"},
			},
		},
		{
			name:    "mtu on a referenced NAD cannot be applied",
			classes: []*nezhav1.RailClass{tu.MakeRailClass("a").NADRef("", "shared").MTU(9000).Obj()},
			wantErr: `RailClass "a" spec.mtu: cannot be applied to spec.network.nadRef "shared"`,
		},
		{
			name:    "mtu conflicting with the config's nezha-rail entry",
			classes: []*nezhav1.RailClass{tu.MakeRailClass("a").MTU(9000).Config(`{"cniVersion":"1.0.0","name":"a","plugins":[{"type":"nezha-rail","mtu":1500}]}`).Obj()},
			wantErr: `RailClass "a" spec.mtu: 9000 conflicts with spec.network.config plugins[0] (nezha-rail) "mtu": 1500`,
		},
		{
			name:    "mtu reaches the attachment through nezha-rail",
			classes: []*nezhav1.RailClass{tu.MakeRailClass("a").MTU(9000).Config(`{"cniVersion":"1.0.0","name":"a","type":"macvlan","master":"eth1"}`).Obj()},
			want: []builder.Rail{{Name: "a", Interface: "nz0", Transport: nezhav1.TransportTCP, NetworkNamespace: "ns", NetworkName: "j-a", OwnNAD: true,
				Config: `{"cniVersion":"1.0.0","name":"a","plugins":[{"master":"eth1","type":"macvlan"},{"mtu":9000,"type":"nezha-rail"}]}`}},
		},
		{
			name:    "config is not JSON",
			classes: []*nezhav1.RailClass{tu.MakeRailClass("a").Config("{nope").Obj()},
			wantErr: `RailClass "a" spec.network.config: not a JSON object`,
		},
		{
			name:    "config without cniVersion",
			classes: []*nezhav1.RailClass{tu.MakeRailClass("a").Config(`{"type":"macvlan"}`).Obj()},
			wantErr: `RailClass "a" spec.network.config: cniVersion is missing`,
		},
		{
			name:    "config without type or plugins",
			classes: []*nezhav1.RailClass{tu.MakeRailClass("a").Config(`{"cniVersion":"1.0.0"}`).Obj()},
			wantErr: "neither type nor plugins is set",
		},
		{
			name:    "no network",
			classes: []*nezhav1.RailClass{tu.MakeRailClass("a").Network(nezhav1.RailNetwork{}).Obj()},
			wantErr: `RailClass "a" spec.network: neither config nor nadRef is set`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := builder.ResolveRails(job, tc.classes)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
			if env := builder.RailsEnv(got); len(got) == 2 && env != "a=nz0:rdma,b=nz1:tcp" {
				t.Errorf("NEZHA_RAILS %q", env)
			}
		})
	}
}

func TestNetworksAnnotation(t *testing.T) {
	rails := []builder.Rail{{Name: "a", Interface: "nz0", NetworkNamespace: "ns", NetworkName: "j-a"}}
	cases := []struct {
		name, existing, want, wantErr string
	}{
		{name: "none", want: `[{"name":"j-a","namespace":"ns","interface":"nz0"}]`},
		{name: "user JSON list kept first", existing: `[{"name":"storage","interface":"st0"}]`,
			want: `[{"name":"storage","interface":"st0"},{"name":"j-a","namespace":"ns","interface":"nz0"}]`},
		{name: "user short form", existing: "other/storage@st0, mgmt",
			want: `[{"name":"storage","namespace":"other","interface":"st0"},{"name":"mgmt"},{"name":"j-a","namespace":"ns","interface":"nz0"}]`},
		{name: "reserved interface", existing: `[{"name":"x","interface":"nz0"}]`, wantErr: `interface "nz0" is reserved for rail "a"`},
		{name: "broken JSON", existing: `[{"name":`, wantErr: "k8s.v1.cni.cncf.io/networks: invalid JSON list"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := builder.NetworksAnnotation(tc.existing, rails)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestRuntimeEnv(t *testing.T) {
	rails := []builder.Rail{{Name: "a", Interface: "nz0", Transport: nezhav1.TransportTCP}}
	rank, world := int32(2), int32(4)
	cases := []struct {
		name string
		job  *nezhav1.MultiRailJob
		rank *int32
		want map[string]string
	}{
		{
			name: "defaults",
			job:  tu.MakeJob("j", "ns", "a").Obj(),
			rank: &rank,
			want: map[string]string{"NEZHA_RAILS": "a=nz0:tcp", "NEZHA_RANK": "2", "NEZHA_WORLD_SIZE": "4", "NEZHA_RENDEZVOUS": "rdv:1",
				"NEZHA_CONTROL_ADDR": ":9402", "NEZHA_JOB_NAME": "j", "NEZHA_POLICY": "adaptive", "NEZHA_COLD_THRESHOLD": "auto", "NEZHA_JOB_TOKEN_FILE": "/var/run/nezha/job-token/token",
				"NEZHA_PREFLIGHT": "degrade"},
		},
		{
			name: "policy, threshold in bytes, failover timeouts in ms",
			job: tu.MakeJob("j", "ns", "a").Policy(nezhav1.PolicySingle).ColdThreshold("1Mi").
				RailTimeout(metav1.Duration{Duration: 1500e6}).OnPreflightFailure(nezhav1.PreflightWait).Obj(),
			want: map[string]string{"NEZHA_RAILS": "a=nz0:tcp", "NEZHA_WORLD_SIZE": "4", "NEZHA_RENDEZVOUS": "rdv:1",
				"NEZHA_CONTROL_ADDR": ":9402", "NEZHA_JOB_NAME": "j", "NEZHA_POLICY": "single", "NEZHA_COLD_THRESHOLD": "1048576",
				"NEZHA_IO_TIMEOUT_MS": "1500", "NEZHA_JOB_TOKEN_FILE": "/var/run/nezha/job-token/token", "NEZHA_PREFLIGHT": "wait"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := builder.RuntimeEnv(builder.RuntimeEnvOptions{Job: tc.job, Rails: rails, Rendezvous: "rdv:1", WorldSize: &world, Rank: tc.rank})
			got := map[string]string{}
			for _, e := range env {
				if e.ValueFrom != nil {
					got[e.Name] = "<secret " + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key + ">"
				} else {
					got[e.Name] = e.Value
				}
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestInjectTemplate(t *testing.T) {
	rails := []builder.Rail{
		{Name: "a", Interface: "nz0", NetworkNamespace: "ns", NetworkName: "j-a", SRIOVResourceName: "x.io/vf"},
		{Name: "b", Interface: "nz1", NetworkNamespace: "ns", NetworkName: "j-b", SRIOVResourceName: "x.io/vf"},
		{Name: "c", Interface: "nz2", NetworkNamespace: "ns", NetworkName: "j-c", SRIOVResourceName: "y.io/vf"},
	}
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers: []corev1.Container{
			{Name: "main", Env: []corev1.EnvVar{{Name: "NEZHA_POLICY", Value: "user"}, {Name: "PYTHONPATH", Value: "/app"}},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"y.io/vf": resource.MustParse("3")}}},
			{Name: "sidecar"},
		},
		Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "gpu", Operator: corev1.NodeSelectorOpExists}}},
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "tpu", Operator: corev1.NodeSelectorOpExists}}},
			},
		}}},
	}}
	in := builder.Injection{
		Rails:        rails,
		Env:          []corev1.EnvVar{{Name: "NEZHA_POLICY", Value: "static"}, {Name: "NEZHA_RAILS", Value: "r"}},
		Labels:       map[string]string{"l": "v"},
		RuntimeImage: "rt:1",
		AvoidNodes:   []string{"bad"},
	}
	if err := builder.InjectTemplate(&tmpl, in); err != nil {
		t.Fatal(err)
	}
	main := tmpl.Spec.Containers[0]
	// Two rails share x.io/vf; the user's larger y.io/vf limit is kept; requests == limits.
	wantRes := corev1.ResourceList{"x.io/vf": resource.MustParse("2"), "y.io/vf": resource.MustParse("3")}
	for name, want := range wantRes {
		l, r := main.Resources.Limits[name], main.Resources.Requests[name]
		if l.Cmp(want) != 0 || r.Cmp(want) != 0 {
			t.Errorf("%s: limit %s request %s, want %s", name, l.String(), r.String(), want.String())
		}
	}
	if len(tmpl.Spec.Containers[1].Resources.Limits) != 0 {
		t.Error("SR-IOV resources must go on the first container only")
	}
	wantEnv := []corev1.EnvVar{
		{Name: "NEZHA_POLICY", Value: "static"}, // replaced in place
		{Name: "PYTHONPATH", Value: "/opt/nezha/python:/app"},
		{Name: "NEZHA_RAILS", Value: "r"},
		{Name: "LD_LIBRARY_PATH", Value: "/opt/nezha/lib"},
	}
	if d := cmp.Diff(wantEnv, main.Env); d != "" {
		t.Errorf("env (-want +got):\n%s", d)
	}
	if len(tmpl.Spec.InitContainers) != 1 || tmpl.Spec.InitContainers[0].Image != "rt:1" ||
		tmpl.Spec.InitContainers[0].Command[2] != "cp -R /opt/nezha/. /nezha-runtime/" ||
		tmpl.Spec.InitContainers[0].SecurityContext == nil {
		t.Errorf("init containers %+v", tmpl.Spec.InitContainers)
	}
	for _, c := range tmpl.Spec.Containers {
		if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/opt/nezha" {
			t.Errorf("%s mounts %+v", c.Name, c.VolumeMounts)
		}
	}
	// The exclusion is ANDed into each of the user's ORed terms.
	for i, term := range tmpl.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		want := []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"bad"}}}
		if d := cmp.Diff(want, term.MatchFields); d != "" || len(term.MatchExpressions) != 1 {
			t.Errorf("term %d: %s %+v", i, d, term)
		}
	}
	if tmpl.Labels["l"] != "v" || tmpl.Annotations[nezhav1.RailsAnnotation] != "a=nz0:,b=nz1:,c=nz2:" {
		t.Errorf("labels %v annotations %v", tmpl.Labels, tmpl.Annotations)
	}
	// Injecting twice (a retried reconcile) must not add a second runtime volume.
	if err := builder.InjectTemplate(&tmpl, builder.Injection{Rails: nil, RuntimeImage: "rt:1"}); err != nil {
		t.Fatal(err)
	}
	if len(tmpl.Spec.Volumes) != 1 || len(tmpl.Spec.InitContainers) != 1 {
		t.Errorf("runtime injected twice: %d volumes, %d init containers", len(tmpl.Spec.Volumes), len(tmpl.Spec.InitContainers))
	}
}

func TestWorkerPodErrors(t *testing.T) {
	rails := []builder.Rail{{Name: "a", Interface: "nz0", NetworkNamespace: "ns", NetworkName: "j-a"}}
	cases := []struct {
		name    string
		job     *nezhav1.MultiRailJob
		rank    int32
		opts    builder.WorkerOptions
		wantErr string
	}{
		{"rank out of range", tu.MakeJob("j", "ns", "a").Replicas(2).Obj(), 2, builder.WorkerOptions{}, "rank 2 outside [0, 2)"},
		{"injection without runtime image", tu.MakeJob("j", "ns", "a").InjectRuntime().Obj(), 0, builder.WorkerOptions{},
			"the job asks for runtime injection but the operator has no runtime image (its configuration's runtime.image)"},
		{"no containers", tu.MakeJob("j", "ns", "a").Template(corev1.PodTemplateSpec{}).Obj(), 0, builder.WorkerOptions{},
			"spec.workers.template: pod template has no containers"},
		{"pytorch job", tu.MakeJob("j", "ns", "a").PyTorchJob(1).Obj(), 0, builder.WorkerOptions{}, "spec.workers is not set"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := builder.WorkerPod(tc.job, rails, tc.rank, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestWorkerPodKeepsUserRestartPolicyAndTemplate(t *testing.T) {
	rails := []builder.Rail{{Name: "a", Interface: "nz0", NetworkNamespace: "ns", NetworkName: "j-a"}}
	tmpl := tu.WorkerTemplate()
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	tmpl.Labels = map[string]string{"team": "x"}
	job := tu.MakeJob("j", "ns", "a").Template(tmpl).Obj()
	pod, err := builder.WorkerPod(job, rails, 0, builder.WorkerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.RestartPolicy != corev1.RestartPolicyOnFailure || pod.Labels["team"] != "x" || pod.Labels[nezhav1.RankLabel] != "0" {
		t.Errorf("pod %+v", pod.ObjectMeta)
	}
	if len(job.Spec.Workers.Template.Spec.Containers[0].Env) != 0 {
		t.Error("building a pod mutated the job's template")
	}
	// The template hash is stable for the same inputs and changes with the rails.
	again, _ := builder.WorkerPod(job, rails, 0, builder.WorkerOptions{})
	rails[0].NetworkName = "j-a-v2"
	changed, _ := builder.WorkerPod(job, rails, 0, builder.WorkerOptions{})
	h := pod.Annotations[nezhav1.TemplateHashAnnotation]
	if len(h) != 16 || h != again.Annotations[nezhav1.TemplateHashAnnotation] || h == changed.Annotations[nezhav1.TemplateHashAnnotation] {
		t.Errorf("template hashes %q %q %q", h, again.Annotations[nezhav1.TemplateHashAnnotation], changed.Annotations[nezhav1.TemplateHashAnnotation])
	}
}

func TestPyTorchJobBuilder(t *testing.T) {
	rails := []builder.Rail{{Name: "a", Interface: "nz0", NetworkNamespace: "ns", NetworkName: "j-a", Transport: nezhav1.TransportTCP}}
	job := tu.MakeJob("j", "ns", "a").PyTorchJob(2).Obj()
	ptj, err := builder.PyTorchJob(job, rails, builder.WorkerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ptj.OwnerReferences) != 1 || ptj.OwnerReferences[0].Kind != "MultiRailJob" || ptj.Name != "j" {
		t.Errorf("meta %+v", ptj.ObjectMeta)
	}
	for rt, rs := range ptj.Spec.PyTorchReplicaSpecs {
		if rs.Template.Annotations[nezhav1.RailsAnnotation] != "a=nz0:tcp" {
			t.Errorf("%s not injected", rt)
		}
	}
	if len(job.Spec.PyTorchJob.PyTorchReplicaSpecs["Worker"].Template.Annotations) != 0 {
		t.Error("building the PyTorchJob mutated the job")
	}
}

// TestInjectTemplateKeepsTheRuntimesLastWords: a worker that cannot start (e.g. a rail failing
// pre-flight under onPreflightFailure: Fail) leaves its log tail as termination message, unless
// the user chose otherwise.
func TestInjectTemplateKeepsTheRuntimesLastWords(t *testing.T) {
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "main"}, {Name: "own", TerminationMessagePolicy: corev1.TerminationMessageReadFile}}}}
	if err := builder.InjectTemplate(&tmpl, builder.Injection{}); err != nil {
		t.Fatal(err)
	}
	if got := tmpl.Spec.Containers[0].TerminationMessagePolicy; got != corev1.TerminationMessageFallbackToLogsOnError {
		t.Errorf("main: %q", got)
	}
	if got := tmpl.Spec.Containers[1].TerminationMessagePolicy; got != corev1.TerminationMessageReadFile {
		t.Errorf("own: %q", got)
	}
}

// TestInjectTemplateNamesTheControlPort: the runtime's /metrics is scraped by port name
// (nezha-control on the first container), unless the user's template already uses the number.
func TestInjectTemplateNamesTheControlPort(t *testing.T) {
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}, {Name: "side"}}}}
	if err := builder.InjectTemplate(&tmpl, builder.Injection{}); err != nil {
		t.Fatal(err)
	}
	want := []corev1.ContainerPort{{Name: "nezha-control", ContainerPort: 9402, Protocol: corev1.ProtocolTCP}}
	if d := cmp.Diff(want, tmpl.Spec.Containers[0].Ports); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if len(tmpl.Spec.Containers[1].Ports) != 0 {
		t.Errorf("second container got ports %v", tmpl.Spec.Containers[1].Ports)
	}
	own := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main",
		Ports: []corev1.ContainerPort{{Name: "mine", ContainerPort: 9402}}}}}}
	if err := builder.InjectTemplate(&own, builder.Injection{}); err != nil {
		t.Fatal(err)
	}
	if len(own.Spec.Containers[0].Ports) != 1 || own.Spec.Containers[0].Ports[0].Name != "mine" {
		t.Errorf("user's port replaced or duplicated: %v", own.Spec.Containers[0].Ports)
	}
}

// TestRailsEnvCarriesExpectedSpeed: RailClass expectedBandwidthMbps reaches the runtime as
// "@Mbit/s" on its NEZHA_RAILS entry (runtime/README.md), only where it is given.
func TestRailsEnvCarriesExpectedSpeed(t *testing.T) {
	job := tu.MakeJob("j", "ns", "a", "b").Obj()
	rails, err := builder.ResolveRails(job, []*nezhav1.RailClass{
		tu.MakeRailClass("a").BandwidthMbps(25000).Obj(), tu.MakeRailClass("b").Obj()})
	if err != nil {
		t.Fatal(err)
	}
	if got := builder.RailsEnv(rails); got != "a=nz0:tcp@25000,b=nz1:tcp" {
		t.Errorf("NEZHA_RAILS %q", got)
	}
}

func TestInjectTemplateNCCLIntegration(t *testing.T) {
	rails := []builder.Rail{{Name: "a", Interface: "nz0", NetworkNamespace: "ns", NetworkName: "j-a"}}
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "cuda"},
		{Name: "own", Env: []corev1.EnvVar{
			{Name: "LD_LIBRARY_PATH", Value: "/my/lib"}, {Name: "NCCL_SOCKET_IFNAME", Value: "net1"},
			{Name: "NCCL_NET_PLUGIN", Value: "ofi"}}},
	}}}
	in := builder.Injection{Rails: rails, NCCL: true, RuntimeImage: "rt:1"}
	if err := builder.InjectTemplate(&tmpl, in); err != nil {
		t.Fatal(err)
	}
	env := func(c corev1.Container) map[string]string {
		m := map[string]string{}
		for _, e := range c.Env {
			if _, dup := m[e.Name]; dup {
				t.Errorf("%s: %s set twice", c.Name, e.Name)
			}
			m[e.Name] = e.Value
		}
		return m
	}
	cuda, own := env(tmpl.Spec.Containers[0]), env(tmpl.Spec.Containers[1])
	want := map[string]string{
		"NCCL_NET_PLUGIN": "nezha", "NCCL_NET": "nezha", "NCCL_SOCKET_IFNAME": "eth0",
		"NEZHA_NCCL_CONTROL_ADDR": ":9434",
		// The image's CUDA paths survive: container env replaces image ENV.
		"LD_LIBRARY_PATH": "/opt/nezha/lib:/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
	}
	for k, v := range want {
		if cuda[k] != v {
			t.Errorf("cuda container %s=%q, want %q", k, cuda[k], v)
		}
	}
	// The template's own library path and bootstrap interface are kept; the plugin choice is
	// the contract and replaced.
	if own["LD_LIBRARY_PATH"] != "/opt/nezha/lib:/my/lib" || own["NCCL_SOCKET_IFNAME"] != "net1" ||
		own["NCCL_NET_PLUGIN"] != "nezha" {
		t.Errorf("own container env %v", own)
	}

	var named bool
	for _, p := range tmpl.Spec.Containers[0].Ports {
		named = named || (p.Name == "nezha-nccl" && p.ContainerPort == 9434)
	}
	if !named {
		t.Errorf("first container ports %+v lack nezha-nccl:9434", tmpl.Spec.Containers[0].Ports)
	}

	plain := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	if err := builder.InjectTemplate(&plain, builder.Injection{Rails: rails}); err != nil {
		t.Fatal(err)
	}
	for _, e := range plain.Spec.Containers[0].Env {
		if strings.HasPrefix(e.Name, "NCCL_") {
			t.Errorf("collectives-only job got %s", e.Name)
		}
	}
}

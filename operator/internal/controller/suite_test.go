package controller_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	webhookserver "sigs.k8s.io/controller-runtime/pkg/webhook"

	configapi "github.com/nezha-project/nezha/operator/api/config/v1alpha1"
	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/builder"
	"github.com/nezha-project/nezha/operator/internal/controller"
	runtimeprober "github.com/nezha-project/nezha/operator/internal/prober"
	"github.com/nezha-project/nezha/operator/internal/quarantine"
	"github.com/nezha-project/nezha/operator/internal/testenv"
	"github.com/nezha-project/nezha/operator/internal/webhook"
)

const testRuntimeImage = "nezha/runtime:test"

var (
	k8s    client.Client // uncached, sees writes immediately
	prober = newFakeProber()
)

// fakeProber stands in for the runtime's control endpoint (no runtime runs in envtest pods; the
// real client, prober.HTTP, is tested against the runtime's contract in internal/prober, and the
// operator and runtime against each other on the local cluster, e2e/nezha). Like the runtime, it
// applies a drain or restore asked on one pod to every pod of the job (the same namespace here:
// one job per test namespace). The NCCL plugin's endpoint is served over real HTTP by fake
// plugins (nccl_steering_test.go), reached through the real client.
type fakeProber struct {
	plugins *fakePlugins

	mu     sync.Mutex
	states map[string]map[string]string // "namespace/pod" → rail → state
	calls  map[string][]steerCall       // namespace → SetRail calls in order
	refuse map[string]error             // "namespace/pod" → what SetRail answers instead
	// "namespace/pod" → the runtime's pre-flight report (absent: the runtime reports none)
	preflight map[string]*runtimeprober.Preflight
}

type steerCall struct {
	pod, rail  string
	action     runtimeprober.Action
	credential string
}

func newFakeProber() *fakeProber {
	return &fakeProber{plugins: newFakePlugins(), states: map[string]map[string]string{}, calls: map[string][]steerCall{}, refuse: map[string]error{},
		preflight: map[string]*runtimeprober.Preflight{}}
}

func (f *fakeProber) Report(ctx context.Context, pod *corev1.Pod, ep runtimeprober.Endpoint, process int) (*runtimeprober.Report, error) {
	if ep == runtimeprober.NCCLPluginEndpoint {
		return f.plugins.client.Report(ctx, pod, ep, process)
	}
	if process != 0 {
		return nil, fmt.Errorf("the runtime asked through process %d; one request to process 0 reaches every rank", process)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	key := pod.Namespace + "/" + pod.Name
	return &runtimeprober.Report{Rails: maps.Clone(f.states[key]), Preflight: f.preflight[key], LocalWorldSize: 1}, nil
}

func (f *fakeProber) setPreflight(ns, pod string, p *runtimeprober.Preflight) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.preflight[ns+"/"+pod] = p
}

func (f *fakeProber) SetRail(ctx context.Context, pod *corev1.Pod, ep runtimeprober.Endpoint, process int, rail string,
	action runtimeprober.Action, credential string) error {
	if ep == runtimeprober.NCCLPluginEndpoint {
		return f.plugins.client.SetRail(ctx, pod, ep, process, rail, action, credential)
	}
	if process != 0 {
		return fmt.Errorf("the runtime asked through process %d; one request to process 0 reaches every rank", process)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[pod.Namespace] = append(f.calls[pod.Namespace], steerCall{pod.Name, rail, action, credential})
	if err := f.refuse[pod.Namespace+"/"+pod.Name]; err != nil {
		return err
	}
	for key, states := range f.states {
		if !strings.HasPrefix(key, pod.Namespace+"/") {
			continue
		}
		switch {
		case action == runtimeprober.Drain && states[rail] == runtimeprober.StateHealthy:
			states[rail] = runtimeprober.StateDrained
		case action == runtimeprober.Restore && states[rail] == runtimeprober.StateDrained:
			states[rail] = runtimeprober.StateHealthy
		}
	}
	return nil
}

// set makes the runtime in pod report rails failed (and no others).
func (f *fakeProber) set(ns, pod string, failed ...string) {
	states := map[string]string{}
	for _, r := range failed {
		states[r] = runtimeprober.StateFailed
	}
	f.setStates(ns, pod, states)
}

func (f *fakeProber) setStates(ns, pod string, states map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.states[ns+"/"+pod] = states
}

func (f *fakeProber) callsIn(ns string) []steerCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls[ns])
}

func (f *fakeProber) refuseOn(ns, pod string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse[ns+"/"+pod] = err
}

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapLevel())))
	env, err := testenv.New(testenv.Options{WithWebhooks: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start envtest:", err)
		return 1
	}
	defer env.Stop()

	k8s, err = client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// A node advertising the SR-IOV resource the tests' SR-IOV rails use.
	if err := createNode("node-sriov", corev1.ResourceList{sriovResource: resource.MustParse("8")}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	wh := env.WebhookInstallOptions
	mgr, err := ctrl.NewManager(cfg, controller.CacheAndClientOptions(ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer: webhookserver.NewServer(webhookserver.Options{
			Host: wh.LocalServingHost, Port: wh.LocalServingPort, CertDir: wh.LocalServingCertDir,
		}),
	}, testenv.Scheme()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := webhook.SetupRailClassWebhook(mgr, []nezhav1.Transport{nezhav1.TransportTCP, nezhav1.TransportRDMA, nezhav1.TransportSHARP}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	r := &controller.MultiRailJobReconciler{
		Client:            mgr.GetClient(),
		APIReader:         mgr.GetAPIReader(),
		Recorder:          mgr.GetEventRecorderFor("nezha-operator"),
		Clock:             clock.RealClock{},
		RuntimeImage:      testRuntimeImage,
		PyTorchJobEnabled: true,
		Prober:            prober,
		SteerRails:        true,
		// Short, so the tests see a repeat soon; the rate limit itself is unit-tested.
		RailActionInterval: 300 * time.Millisecond,
		RailNodeStaleAfter: configapi.DefaultRailNodeStaleAfter,
		NetworkPolicy: &builder.NetworkPolicyOptions{OperatorNamespace: "nezha-system",
			OperatorPodLabels: map[string]string{"app.kubernetes.io/component": "operator"}, MonitoringNamespace: "monitoring"},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Only RailNodes whose rails carry a lastTransitionTime give evidence; the other tests' do not.
	q := &quarantine.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorderFor("nezha-operator"),
		Clock: clock.RealClock{}, Policy: quarantine.Policy{Failures: 3, Window: time.Minute, ReleaseAfter: 2 * time.Second}}
	if err := q.SetupWithManager(mgr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	// RailClasses go through the webhook (failurePolicy Fail): serve before the first test.
	started := mgr.GetWebhookServer().StartedChecker()
	for deadline := time.Now().Add(30 * time.Second); started(nil) != nil; {
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "webhook server did not start")
			return 1
		}
		time.Sleep(20 * time.Millisecond)
	}
	code := m.Run()
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
	}
	return code
}

// zapLevel keeps the controller quiet unless NEZHA_TEST_VERBOSE is set.
func zapLevel() zapcore.Level {
	if os.Getenv("NEZHA_TEST_VERBOSE") != "" {
		return zapcore.DebugLevel
	}
	return zapcore.ErrorLevel
}

func createNode(name string, allocatable corev1.ResourceList) error {
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := k8s.Create(ctx, n); err != nil {
		return err
	}
	n.Status.Allocatable = allocatable
	n.Status.Capacity = allocatable
	return k8s.Status().Update(ctx, n)
}

// eventually polls check until it returns nil; the bound only keeps a broken test from hanging.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		if err = check(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: %v", what, err)
}

// newNamespace gives each test its own namespace.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "mrj-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

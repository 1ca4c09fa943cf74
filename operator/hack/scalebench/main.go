// Command scalebench measures the operator on a big job: a real kube-apiserver and etcd
// (envtest), kwok simulating nodes and kubelets, rail agents played by the bench (one RailNode per
// node, re-stamped every --heartbeat like the real agent's resync), and the nezha-operator binary.
// Pods are bound to nodes by the bench itself (round robin, like a scheduler that never fails),
// or by kube-scheduler with --scheduler.
//
// It reports the operator's share of a job's life — creating every worker pod, reporting the job
// Running once the last pod runs, reporting Degraded (and back) after one node's rail goes down —
// with its peak memory and CPU, and prints PASS/MISS against the scale targets
// (docs/operator-scale.md "Measuring it at scale") with the machine and its load. Run through operator/hack/scale-bench.sh (make bench-scale); not part of make test.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/testenv"
	tu "github.com/nezha-project/nezha/operator/internal/testutil"
)

const (
	fakeNodeAnnotation = "kwok.x-k8s.io/node"
	namespace          = "bench"
	jobName            = "big"
	// The scale targets (docs/operator-scale.md): the operator's share of a 10,000-worker job and
	// its memory.
	targetShare = 30 * time.Second
	targetRSS   = 500 << 20
	// etcd refuses objects over 1.5 MiB.
	etcdLimit = 1536 << 10
)

type options struct {
	workers, nodes, rails int
	operatorBin           string
	kwokBin, kwokStage    string
	schedulerBin          string
	heartbeat             time.Duration
	operatorConfig        stringList
	timeout               time.Duration
}

func main() {
	var o options
	flag.IntVar(&o.workers, "workers", 1000, "workers in the job")
	flag.IntVar(&o.nodes, "nodes", 500, "fake nodes (kwok)")
	flag.IntVar(&o.rails, "rails", 2, "rails of the job")
	flag.StringVar(&o.operatorBin, "operator", "", "nezha-operator binary")
	flag.StringVar(&o.kwokBin, "kwok", "", "kwok binary")
	flag.StringVar(&o.kwokStage, "kwok-stages", "", "kwok Stage file (node-initialize, node-heartbeat, pod-ready)")
	flag.StringVar(&o.schedulerBin, "scheduler", "", "kube-scheduler binary (default: the bench binds pods itself)")
	flag.DurationVar(&o.heartbeat, "heartbeat", 30*time.Second, "how often each simulated rail agent re-stamps its RailNode (0: never)")
	flag.Var(&o.operatorConfig, "operator-config", "a line added to the operator's configuration file (repeatable), "+
		`e.g. --operator-config="workerPods: {createParallelism: 32}"`)
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up after this long per phase")
	flag.Parse()
	// The bench's informers use controller-runtime; its log is not the measurement.
	ctrllog.SetLogger(logr.Discard())
	logDir, err := os.MkdirTemp("", "nezha-scalebench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "scalebench:", err)
		os.Exit(1)
	}
	if err := run(o, logDir); err != nil {
		fmt.Fprintln(os.Stderr, "scalebench:", err, "(logs kept in "+logDir+")")
		os.Exit(1)
	}
	_ = os.RemoveAll(logDir)
}

// operatorConfig is the operator's configuration file for the bench: metrics where the bench
// reads them, no health endpoint or webhooks, then the --operator-config lines (a top-level key
// given there replaces the bench's).
func operatorConfig(metricsAddr string, extra []string) string {
	lines := []string{"apiVersion: config.nezha.io/v1alpha1", "kind: Configuration", "namespace: nezha-system",
		fmt.Sprintf("metrics: {bindAddress: %q}", metricsAddr), `health: {healthProbeBindAddress: "0"}`, "webhook: {port: 0}"}
	for _, e := range extra {
		key, _, _ := strings.Cut(e, ":")
		lines = slices.DeleteFunc(lines, func(l string) bool { return strings.HasPrefix(l, key+":") })
		lines = append(lines, e)
	}
	return strings.Join(lines, "\n") + "\n"
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, " ") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// proc is a child process the bench started and must stop.
type proc struct {
	name string
	cmd  *exec.Cmd
}

func start(name, logDir string, bin string, args ...string) (*proc, error) {
	logf, err := os.Create(filepath.Join(logDir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return &proc{name, cmd}, nil
}

// stop kills the process; the goroutine started with it reaps it.
func (p *proc) stop() { _ = p.cmd.Process.Kill() }

// tracker follows the job's pods and status through informers and stamps the moments that matter.
type tracker struct {
	mu            sync.Mutex
	t0            time.Time
	want          int
	pods, running map[string]bool
	tCreated      time.Duration
	tLastRunning  time.Duration
	tStatus       time.Duration
	// job is the latest MultiRailJob seen.
	job *nezhav1.MultiRailJob
	// changed wakes waiters after any event.
	changed chan struct{}
	// fatal ends every wait: a child process died, or the bench was interrupted.
	fatal chan error
}

func newTracker(want int) *tracker {
	return &tracker{want: want, pods: map[string]bool{}, running: map[string]bool{}, changed: make(chan struct{}, 1),
		fatal: make(chan error, 4)}
}

func (t *tracker) since() time.Duration { return time.Since(t.t0) }

func (t *tracker) wake() {
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

func (t *tracker) pod(o any) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pods[p.Name] = true
	if p.Status.Phase == corev1.PodRunning {
		t.running[p.Name] = true
	}
	if t.tCreated == 0 && len(t.pods) == t.want {
		t.tCreated = t.since()
	}
	if t.tLastRunning == 0 && len(t.running) == t.want {
		t.tLastRunning = t.since()
	}
	t.checkStatus()
	t.wake()
}

func (t *tracker) jobEvent(o any) {
	j, ok := o.(*nezhav1.MultiRailJob)
	if !ok || j.Name != jobName {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.job = j
	t.checkStatus()
	t.wake()
}

func (t *tracker) checkStatus() {
	if t.tStatus == 0 && t.tLastRunning > 0 && t.job != nil && t.job.Status.Phase == nezhav1.PhaseRunning &&
		int(t.job.Status.ReadyWorkers) == t.want {
		t.tStatus = t.since()
	}
}

// wait blocks until done holds (checked under the lock after every event) or the timeout.
func (t *tracker) wait(timeout time.Duration, what string, done func() bool) error {
	deadline := time.After(timeout)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		t.mu.Lock()
		ok := done()
		t.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-t.changed:
		case <-tick.C:
		case err := <-t.fatal:
			return fmt.Errorf("while waiting for %s: %w", what, err)
		case <-deadline:
			return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
		}
	}
}

func run(o options, logDir string) error {
	for flagName, v := range map[string]string{"operator": o.operatorBin, "kwok": o.kwokBin, "kwok-stages": o.kwokStage} {
		if v == "" {
			return fmt.Errorf("--%s is required", flagName)
		}
	}
	if o.workers < 1 || o.nodes < 1 || o.rails < 1 || o.rails > nezhav1.MaxRails {
		return fmt.Errorf("--workers, --nodes must be positive and --rails 1..%d", nezhav1.MaxRails)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	load0 := loadAvg()

	env, err := testenv.New(testenv.Options{})
	if err != nil {
		return err
	}
	cfg, err := env.Start()
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	admin, err := env.AddUser(envtest.User{Name: "bench-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	kc, err := admin.KubeConfig()
	if err != nil {
		return err
	}
	kcPath := filepath.Join(logDir, "kubeconfig")
	if err := os.WriteFile(kcPath, kc, 0o600); err != nil {
		return err
	}
	cfg = admin.Config()
	cfg.QPS, cfg.Burst = -1, 0 // the bench plays many clients (agents, a scheduler): no client-side limit
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		return err
	}

	rails := make([]string, o.rails)
	for i := range rails {
		rails[i] = fmt.Sprintf("bench-rail%d", i)
	}
	nodeNames := make([]string, o.nodes)
	for i := range nodeNames {
		nodeNames[i] = fmt.Sprintf("fake-%04d", i)
	}
	fmt.Printf("setting up %d kwok nodes with a RailNode each...\n", o.nodes)
	if err := setupNodes(ctx, c, nodeNames, rails); err != nil {
		return err
	}

	metricsAddr := freeAddr()
	configPath := filepath.Join(logDir, "operator-config.yaml")
	if err := os.WriteFile(configPath, []byte(operatorConfig(metricsAddr, o.operatorConfig)), 0o600); err != nil {
		return err
	}
	procs := []*proc{}
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	specs := []struct {
		name, bin string
		args      []string
	}{
		{"kwok", o.kwokBin, []string{"--kubeconfig=" + kcPath, "--manage-all-nodes=false",
			"--manage-nodes-with-annotation-selector=" + fakeNodeAnnotation + "=fake", "--config=" + o.kwokStage,
			"--server-address=127.0.0.1:" + freePort()}},
		{"nezha-operator", o.operatorBin, []string{"--kubeconfig=" + kcPath, "--config=" + configPath, "--zap-log-level=error"}},
	}
	if o.schedulerBin != "" {
		specs = append(specs, struct {
			name, bin string
			args      []string
		}{"kube-scheduler", o.schedulerBin, []string{"--kubeconfig=" + kcPath, "--leader-elect=false",
			"--bind-address=127.0.0.1", "--secure-port=" + freePort(), "--kube-api-qps=1000", "--kube-api-burst=1000"}})
	}
	for _, spec := range specs {
		p, err := start(spec.name, logDir, spec.bin, spec.args...)
		if err != nil {
			return err
		}
		procs = append(procs, p)
	}
	operatorPID := procs[1].cmd.Process.Pid
	tr := newTracker(o.workers)
	for _, p := range procs {
		go func() {
			err := p.cmd.Wait()
			if ctx.Err() == nil {
				tr.fatal <- fmt.Errorf("%s exited (%v); see %s", p.name, err, filepath.Join(logDir, p.name+".log"))
			}
		}()
	}
	go func() {
		<-ctx.Done()
		tr.fatal <- fmt.Errorf("interrupted")
	}()

	// Informers on the job's pods and the job: timings come from watch events, not polling.
	cch, err := cache.New(cfg, cache.Options{Scheme: testenv.Scheme(), DefaultNamespaces: map[string]cache.Config{namespace: {}}})
	if err != nil {
		return err
	}
	bind := make(chan *corev1.Pod, o.workers)
	podInf, err := cch.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return err
	}
	if _, err := podInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			tr.pod(obj)
			if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName == "" && o.schedulerBin == "" {
				bind <- p
			}
		},
		UpdateFunc: func(_, obj any) { tr.pod(obj) },
	}); err != nil {
		return err
	}
	jobInf, err := cch.GetInformer(ctx, &nezhav1.MultiRailJob{})
	if err != nil {
		return err
	}
	if _, err := jobInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: tr.jobEvent, UpdateFunc: func(_, obj any) { tr.jobEvent(obj) },
	}); err != nil {
		return err
	}
	go func() { _ = cch.Start(ctx) }()
	if !cch.WaitForCacheSync(ctx) {
		return fmt.Errorf("informer caches did not sync")
	}
	if o.schedulerBin == "" {
		for i := 0; i < 8; i++ {
			go binder(ctx, c, bind, nodeNames)
		}
	}
	if o.heartbeat > 0 {
		go heartbeats(ctx, c, nodeNames, o.heartbeat)
	}

	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return err
	}
	for _, r := range rails {
		if err := c.Create(ctx, tu.MakeRailClass(r).Obj()); err != nil {
			return err
		}
	}
	tmpl := tu.WorkerTemplate()
	tmpl.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
	job := tu.MakeJob(jobName, namespace, rails...).Replicas(int32(o.workers)).Template(tmpl).Obj()

	cpu0 := procCPU(operatorPID)
	fmt.Printf("creating a MultiRailJob of %d workers x %d rails...\n", o.workers, o.rails)
	tr.mu.Lock()
	tr.t0 = time.Now()
	tr.mu.Unlock()
	if err := c.Create(ctx, job); err != nil {
		return err
	}
	if err := tr.wait(o.timeout, "every pod created, running and reported", func() bool { return tr.tStatus > 0 }); err != nil {
		tr.mu.Lock()
		err = fmt.Errorf("%w (pods %d, running %d, created at %v, last running at %v)", err, len(tr.pods), len(tr.running), tr.tCreated, tr.tLastRunning)
		tr.mu.Unlock()
		diagnose(ctx, c)
		return err
	}
	cpuUp := procCPU(operatorPID) - cpu0

	// One node loses a rail (its agent's RailNode says so): how long until the job says Degraded,
	// and back once the rail is up again.
	degraded := func(want bool) func() bool {
		return func() bool {
			return tr.job != nil && meta.IsStatusConditionTrue(tr.job.Status.Conditions, nezhav1.ConditionDegraded) == want
		}
	}
	flip := func(up bool) (time.Duration, error) {
		rn := &nezhav1.RailNode{}
		if err := c.Get(ctx, client.ObjectKey{Name: nodeNames[0]}, rn); err != nil {
			return 0, err
		}
		last := &rn.Status.Rails[len(rn.Status.Rails)-1]
		last.OperState, last.Carrier = nezhav1.LinkDown, false
		if up {
			last.OperState, last.Carrier = nezhav1.LinkUp, true
		}
		now := metav1.Now()
		rn.Status.ObservedTime = &now
		t1 := time.Now()
		if err := c.Status().Update(ctx, rn); err != nil {
			return 0, err
		}
		what := "Degraded"
		if up {
			what = "Degraded=False"
		}
		if err := tr.wait(o.timeout, what, degraded(!up)); err != nil {
			return 0, err
		}
		return time.Since(t1), nil
	}
	tDegraded, err := flip(false)
	if err != nil {
		return err
	}
	tRecovered, err := flip(true)
	if err != nil {
		return err
	}

	// Steady state: a minute of agent heartbeats (every RailNode re-stamped once or twice).
	cpu1 := procCPU(operatorPID)
	steady := min(60*time.Second, 2*o.heartbeat)
	if o.heartbeat > 0 {
		time.Sleep(steady) // a measurement window, not a wait for an event
	}
	cpuSteady := procCPU(operatorPID) - cpu1

	final := &nezhav1.MultiRailJob{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: jobName}, final); err != nil {
		return err
	}
	whole, _ := json.Marshal(final)
	status, _ := json.Marshal(final.Status)
	hwm, rss := procMem(operatorPID)
	metrics := scrape("http://" + metricsAddr + "/metrics")
	load1 := loadAvg()

	statusLag := tr.tStatus - tr.tLastRunning
	share := tr.tCreated + statusLag + tDegraded
	binderName := "the bench (round robin)"
	if o.schedulerBin != "" {
		binderName = "kube-scheduler"
	}
	fmt.Printf("\nnezha-operator scale benchmark: %d workers x %d rails on %d kwok nodes, pods bound by %s\n",
		o.workers, o.rails, o.nodes, binderName)
	if len(o.operatorConfig) > 0 {
		fmt.Printf("operator configuration: %s\n", strings.Join(o.operatorConfig, "; "))
	}
	fmt.Printf("machine: %s, %d CPUs; load average %s before, %s after (shared machine: times are indicative)\n",
		cpuModel(), runtime.NumCPU(), load0, load1)
	fmt.Printf("  all worker pods created (job -> last pod exists)   %8.2f s\n", tr.tCreated.Seconds())
	fmt.Printf("  all pods Running (kwok)                            %8.2f s\n", tr.tLastRunning.Seconds())
	fmt.Printf("  job Running with %d ready after the last pod ran %8.2f s\n", o.workers, statusLag.Seconds())
	fmt.Printf("  rail down on one node -> job Degraded              %8.2f s\n", tDegraded.Seconds())
	fmt.Printf("  rail up again -> Degraded=False                    %8.2f s\n", tRecovered.Seconds())
	fmt.Printf("  operator CPU: start-up to Running %.1f s; %.0f s of agent heartbeats (%d RailNodes every %v) %.1f s\n",
		cpuUp.Seconds(), steady.Seconds(), o.nodes, o.heartbeat, cpuSteady.Seconds())
	fmt.Printf("  operator RSS peak (VmHWM) %s, at end %s\n", fmtBytes(hwm), fmtBytes(rss))
	fmt.Printf("  reconciles %s, %s s in total\n", metrics["nezha_operator_reconcile_duration_seconds_count"],
		metrics["nezha_operator_reconcile_duration_seconds_sum"])
	fmt.Printf("  job object %d bytes as JSON (status %d bytes; etcd limit %d)\n", len(whole), len(status), etcdLimit)

	verdict := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "MISS"
	}
	fmt.Printf("\ntargets (docs/operator-scale.md, at 10,000 workers on 500 nodes; this run: %d on %d):\n", o.workers, o.nodes)
	fmt.Printf("  %s operator's share (creation %.1f + status %.1f + Degraded %.1f) = %.1f s <= %v\n",
		verdict(share <= targetShare), tr.tCreated.Seconds(), statusLag.Seconds(), tDegraded.Seconds(), share.Seconds(), targetShare)
	fmt.Printf("  %s operator peak RSS %s <= %s\n", verdict(hwm <= targetRSS), fmtBytes(hwm), fmtBytes(targetRSS))
	fmt.Printf("  %s job object %d bytes <= etcd's %d\n", verdict(len(whole) <= etcdLimit), len(whole), etcdLimit)
	return nil
}

// setupNodes creates the kwok nodes (untainted, with room for the pods) and one healthy RailNode
// per node, as the rail agents would.
func setupNodes(ctx context.Context, c client.Client, names, rails []string) error {
	var mu sync.Mutex
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}
	workqueue.ParallelizeUntil(ctx, 16, len(names), func(i int) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: names[i], Annotations: map[string]string{fakeNodeAnnotation: "fake"}}}
		if err := c.Create(ctx, n); err != nil {
			fail(err)
			return
		}
		// The API server taints new nodes not-ready; without a node lifecycle controller
		// nothing would lift it once kwok reports the node Ready.
		n.Spec.Taints = nil
		if err := c.Update(ctx, n); err != nil {
			fail(err)
			return
		}
		n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("256"),
			corev1.ResourceMemory: resource.MustParse("2Ti"), corev1.ResourcePods: resource.MustParse("250")}
		n.Status.Capacity = n.Status.Allocatable
		if err := c.Status().Update(ctx, n); err != nil {
			fail(err)
			return
		}
		w := tu.MakeRailNode(names[i])
		for r, rail := range rails {
			w = w.Rail(rail, fmt.Sprintf("eth%d", r+1), true)
		}
		rn := w.Obj()
		st := rn.Status
		if err := c.Create(ctx, rn); err != nil {
			fail(err)
			return
		}
		rn.Status = st
		if err := c.Status().Update(ctx, rn); err != nil {
			fail(err)
		}
	})
	return firstErr
}

// binder plays a scheduler that never fails: pods go round robin over the nodes.
func binder(ctx context.Context, c client.Client, pods <-chan *corev1.Pod, nodes []string) {
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-pods:
			rank, _ := strconv.Atoi(p.Labels[nezhav1.RankLabel])
			b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
				Target: corev1.ObjectReference{Kind: "Node", Name: nodes[rank%len(nodes)]}}
			if err := c.SubResource("binding").Create(ctx, p, b); err != nil && ctx.Err() == nil {
				fmt.Fprintln(os.Stderr, "bind", p.Name, err)
			}
		}
	}
}

// heartbeats re-stamps every RailNode once per period, spread over the period, as the rail agents
// do on their resync (status unchanged but observedTime).
func heartbeats(ctx context.Context, c client.Client, nodes []string, period time.Duration) {
	tick := time.NewTicker(period / time.Duration(len(nodes)))
	defer tick.Stop()
	for i := 0; ; i = (i + 1) % len(nodes) {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rn := &nezhav1.RailNode{}
		if err := c.Get(ctx, client.ObjectKey{Name: nodes[i]}, rn); err != nil {
			continue
		}
		now := metav1.Now()
		rn.Status.ObservedTime = &now
		_ = c.Status().Update(ctx, rn) // a conflict with the bench's rail flip just skips a beat
	}
}

func procMem(pid int) (hwm, rss int64) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1, -1
	}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && (f[0] == "VmHWM:" || f[0] == "VmRSS:") {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			if f[0] == "VmHWM:" {
				hwm = kb << 10
			} else {
				rss = kb << 10
			}
		}
	}
	return hwm, rss
}

// procCPU is the user+system CPU time the process has used.
func procCPU(pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces) start after the last ')'.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

func fmtBytes(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(raw))
	return strings.Join(f[:3], " ")
}

func cpuModel() string {
	raw, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func scrape(url string) map[string]string {
	out := map[string]string{}
	resp, err := http.Get(url)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if f := strings.Fields(line); len(f) == 2 && !strings.HasPrefix(line, "#") {
			out[f[0]] = f[1]
		}
	}
	return out
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func freePort() string {
	_, port, _ := net.SplitHostPort(freeAddr())
	return port
}

// diagnose prints where pods got stuck: phases, how many are bound, the latest events.
func diagnose(ctx context.Context, c client.Client) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(namespace)); err == nil {
		phases, bound := map[corev1.PodPhase]int{}, 0
		for _, p := range pods.Items {
			phases[p.Status.Phase]++
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		fmt.Printf("pods: %d, bound: %d, phases: %v\n", len(pods.Items), bound, phases)
	}
	var evs corev1.EventList
	if err := c.List(ctx, &evs, client.InNamespace(namespace)); err == nil {
		for i := max(0, len(evs.Items)-5); i < len(evs.Items); i++ {
			e := evs.Items[i]
			fmt.Printf("event %s %s %s: %s\n", e.InvolvedObject.Name, e.Type, e.Reason, e.Message)
		}
	}
}

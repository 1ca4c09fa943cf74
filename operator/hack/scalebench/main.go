// Command scalebench measures the operator on a big job: a real kube-apiserver and etcd
// (envtest), kube-scheduler, kwok simulating nodes and kubelets, and the nezha-operator binary.
// It reports how long the operator takes to create N workers, to see them Running in its status,
// and to mark the job Degraded (and recovered) after one node's rail goes down, plus the
// operator's peak memory. Run through operator/hack/scale-bench.sh; not part of `make test`.
//
// Numbers depend on the machine: on a shared 2-core box they are indicative only.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/testenv"
	tu "github.com/nezha-project/nezha/operator/internal/testutil"
)

const fakeNodeAnnotation = "kwok.x-k8s.io/node"

type options struct {
	workers, nodes     int
	operatorBin        string
	kwokBin, kwokStage string
	schedulerBin       string
	timeout            time.Duration
}

func main() {
	var o options
	flag.IntVar(&o.workers, "workers", 1000, "workers in the job")
	flag.IntVar(&o.nodes, "nodes", 50, "fake nodes (kwok)")
	flag.StringVar(&o.operatorBin, "operator", "", "nezha-operator binary")
	flag.StringVar(&o.kwokBin, "kwok", "", "kwok binary")
	flag.StringVar(&o.kwokStage, "kwok-stages", "", "kwok Stage file (node-initialize, node-heartbeat, pod-ready)")
	flag.StringVar(&o.schedulerBin, "scheduler", "", "kube-scheduler binary")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up after this long per phase")
	flag.Parse()
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

func (p *proc) stop() {
	_ = p.cmd.Process.Kill()
	_, _ = p.cmd.Process.Wait()
}

func run(o options, logDir string) error {
	for flagName, v := range map[string]string{"operator": o.operatorBin, "kwok": o.kwokBin, "kwok-stages": o.kwokStage, "scheduler": o.schedulerBin} {
		if v == "" {
			return fmt.Errorf("--%s is required", flagName)
		}
	}
	ctx := context.Background()

	env, err := testenv.New(testenv.Options{})
	if err != nil {
		return err
	}
	cfg, err := env.Start()
	if err != nil {
		return err
	}
	defer env.Stop()
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
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		return err
	}

	// Fake nodes, managed by kwok (it answers for their kubelets).
	for i := 0; i < o.nodes; i++ {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fake-%03d", i),
			Annotations: map[string]string{fakeNodeAnnotation: "fake"}}}
		if err := c.Create(ctx, n); err != nil {
			return err
		}
		// The API server taints new nodes not-ready; without a node lifecycle controller
		// nothing would lift it once kwok reports the node Ready.
		n.Spec.Taints = nil
		if err := c.Update(ctx, n); err != nil {
			return err
		}
		n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("256"),
			corev1.ResourceMemory: resource.MustParse("2Ti"), corev1.ResourcePods: resource.MustParse("250")}
		n.Status.Capacity = n.Status.Allocatable
		if err := c.Status().Update(ctx, n); err != nil {
			return err
		}
	}

	metricsAddr := freeAddr()
	procs := []*proc{}
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	for _, spec := range []struct {
		name, bin string
		args      []string
	}{
		{"kwok", o.kwokBin, []string{"--kubeconfig=" + kcPath, "--manage-all-nodes=false",
			"--manage-nodes-with-annotation-selector=" + fakeNodeAnnotation + "=fake", "--config=" + o.kwokStage,
			"--server-address=127.0.0.1:" + freePort()}},
		{"kube-scheduler", o.schedulerBin, []string{"--kubeconfig=" + kcPath, "--leader-elect=false",
			"--bind-address=127.0.0.1", "--secure-port=" + freePort()}},
		{"nezha-operator", o.operatorBin, []string{"--kubeconfig=" + kcPath, "--metrics-bind-address=" + metricsAddr,
			"--health-probe-bind-address=0", "--zap-log-level=error"}},
	} {
		p, err := start(spec.name, logDir, spec.bin, spec.args...)
		if err != nil {
			return err
		}
		procs = append(procs, p)
	}
	operatorPID := procs[2].cmd.Process.Pid

	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}); err != nil {
		return err
	}
	rails := []string{"bench-rail0", "bench-rail1"}
	for _, r := range rails {
		if err := c.Create(ctx, tu.MakeRailClass(r).Obj()); err != nil {
			return err
		}
	}
	tmpl := tu.WorkerTemplate()
	tmpl.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
	job := tu.MakeJob("big", "bench", rails...).Replicas(int32(o.workers)).Template(tmpl).Obj()

	t0 := time.Now()
	if err := c.Create(ctx, job); err != nil {
		return err
	}
	var tCreated, tRunning, tStatus time.Duration
	err = poll(o.timeout, func() (bool, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace("bench"), client.MatchingLabels{nezhav1.JobNameLabel: "big"}); err != nil {
			return false, err
		}
		running := 0
		for i := range pods.Items {
			if pods.Items[i].Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if tCreated == 0 && len(pods.Items) == o.workers {
			tCreated = time.Since(t0)
		}
		if tRunning == 0 && running == o.workers {
			tRunning = time.Since(t0)
		}
		j := &nezhav1.MultiRailJob{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "bench", Name: "big"}, j); err != nil {
			return false, err
		}
		if tStatus == 0 && j.Status.Phase == nezhav1.PhaseRunning && int(j.Status.ReadyWorkers) == o.workers {
			tStatus = time.Since(t0)
		}
		return tCreated > 0 && tRunning > 0 && tStatus > 0, nil
	})
	if err != nil {
		diagnose(ctx, c)
		return fmt.Errorf("waiting for %d workers (created %v running %v status %v): %w", o.workers, tCreated, tRunning, tStatus, err)
	}

	// One node loses rail1: how long until the 1000-worker job says Degraded, and back.
	rn := tu.MakeRailNode("fake-000").Rail(rails[0], "eth1", true).Rail(rails[1], "eth2", true).Obj()
	if err := c.Create(ctx, rn); err != nil {
		return err
	}
	rn.Status = tu.MakeRailNode("fake-000").Rail(rails[0], "eth1", true).Rail(rails[1], "eth2", false).Obj().Status
	t1 := time.Now()
	if err := c.Status().Update(ctx, rn); err != nil {
		return err
	}
	degraded := func(want bool) func() (bool, error) {
		return func() (bool, error) {
			j := &nezhav1.MultiRailJob{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: "bench", Name: "big"}, j); err != nil {
				return false, err
			}
			return meta.IsStatusConditionTrue(j.Status.Conditions, nezhav1.ConditionDegraded) == want, nil
		}
	}
	if err := poll(o.timeout, degraded(true)); err != nil {
		return fmt.Errorf("waiting for Degraded: %w", err)
	}
	tDegraded := time.Since(t1)
	if err := c.Get(ctx, client.ObjectKeyFromObject(rn), rn); err != nil {
		return err
	}
	rn.Status.Rails[1].OperState, rn.Status.Rails[1].Carrier = nezhav1.LinkUp, true
	t2 := time.Now()
	if err := c.Status().Update(ctx, rn); err != nil {
		return err
	}
	if err := poll(o.timeout, degraded(false)); err != nil {
		return fmt.Errorf("waiting for recovery: %w", err)
	}
	tRecovered := time.Since(t2)

	final := &nezhav1.MultiRailJob{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "bench", Name: "big"}, final); err != nil {
		return err
	}
	hwm, rss := procMem(operatorPID)
	metrics := scrape("http://" + metricsAddr + "/metrics")

	fmt.Printf("\nnezha-operator scale benchmark: %d workers x %d rails on %d kwok nodes (busy shared machine; indicative)\n",
		o.workers, len(rails), o.nodes)
	fmt.Printf("  all worker pods created          %8.1f s\n", tCreated.Seconds())
	fmt.Printf("  all pods Running (kwok)          %8.1f s\n", tRunning.Seconds())
	fmt.Printf("  job status Running, %d ready   %8.1f s\n", o.workers, tStatus.Seconds())
	fmt.Printf("  rail down -> job Degraded        %8.2f s\n", tDegraded.Seconds())
	fmt.Printf("  rail up   -> Degraded=False      %8.2f s\n", tRecovered.Seconds())
	fmt.Printf("  operator peak RSS (VmHWM)        %8s\n", hwm)
	fmt.Printf("  operator RSS at end              %8s\n", rss)
	fmt.Printf("  reconciles / total seconds       %s / %s\n", metrics["nezha_operator_reconcile_duration_seconds_count"], metrics["nezha_operator_reconcile_duration_seconds_sum"])
	fmt.Printf("  failover history entries         %d\n", len(final.Status.FailoverHistory))
	fmt.Printf("  status.workerStatuses entries    %d\n", len(final.Status.WorkerStatuses))
	return nil
}

func poll(timeout time.Duration, done func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		ok, err := done()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("timed out after %v", timeout)
}

func procMem(pid int) (hwm, rss string) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "?", "?"
	}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "VmHWM:" {
			hwm = f[1] + " " + f[2]
		}
		if len(f) >= 3 && f[0] == "VmRSS:" {
			rss = f[1] + " " + f[2]
		}
	}
	return hwm, rss
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
	if err := c.List(ctx, &pods, client.InNamespace("bench")); err == nil {
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
	if err := c.List(ctx, &evs, client.InNamespace("bench")); err == nil {
		for i := max(0, len(evs.Items)-5); i < len(evs.Items); i++ {
			e := evs.Items[i]
			fmt.Printf("event %s %s %s: %s\n", e.InvolvedObject.Name, e.Type, e.Reason, e.Message)
		}
	}
}

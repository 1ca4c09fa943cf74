package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/builder"
	tu "github.com/nezha-project/nezha/operator/internal/testutil"
)

// etcdObjectLimit is etcd's default request size limit, which bounds every stored object.
const etcdObjectLimit = 1536 * 1024

func TestSummarizeWorkersListsWorstFirstAndBounds(t *testing.T) {
	pod := func(rank int, phase corev1.PodPhase, node string, ready bool) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("j-%d", rank), Labels: map[string]string{nezhav1.RankLabel: fmt.Sprint(rank)}},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
		if ready {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}
		return p
	}
	var pods []corev1.Pod
	pods = append(pods, pod(0, corev1.PodRunning, "n0", true)) // healthy
	pods = append(pods, pod(1, corev1.PodSucceeded, "n0", false))
	pods = append(pods, pod(2, corev1.PodPending, "", false))
	pods = append(pods, pod(3, corev1.PodRunning, "n1", true)) // rail b down on n1
	pods = append(pods, pod(4, corev1.PodRunning, "n0", false))
	pods = append(pods, pod(5, corev1.PodFailed, "n0", false))
	for rank := 6; rank < 6+nezhav1.MaxListedWorkers; rank++ {
		pods = append(pods, pod(rank, corev1.PodPending, "n0", false))
	}
	rails := namesOnly([]string{"a", "b"})
	obs := observePods(pods, rails)
	nodes := map[string]*nezhav1.RailNode{
		"n0": tu.MakeRailNode("n0").Rail("a", "eth1", true).Rail("b", "eth2", true).Obj(),
		"n1": tu.MakeRailNode("n1").Rail("a", "eth1", true).Rail("b", "eth2", false).Obj(),
	}
	h := assessRailHealth(obs.workers, []string{"a", "b"}, nodes, nil, nil, freshness{now: t0.Time})
	s := &nezhav1.MultiRailJobStatus{}
	summarizeWorkers(obs, []string{"a", "b"}, h, false, s)

	wantCounts := nezhav1.WorkerCounts{Pods: int32(len(pods)), Pending: 1 + nezhav1.MaxListedWorkers, Running: 3, Succeeded: 1, Failed: 1,
		Unhealthy: int32(len(pods)) - 2}
	if d := cmp.Diff(wantCounts, s.WorkerCounts); d != "" {
		t.Errorf("counts (-want +got):\n%s", d)
	}
	var got []string
	for _, w := range s.UnhealthyWorkers {
		got = append(got, fmt.Sprintf("%d %s", w.Rank, w.Reason))
	}
	want := []string{"5 failed: pod failed", "3 rail b down on node n1", "4 running, not Ready"}
	for rank := 6; len(want) < nezhav1.MaxListedWorkers; rank++ {
		want = append(want, fmt.Sprintf("%d pending on node n0", rank))
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("listed (-want +got):\n%s", d)
	}
	// 3 listed of the 16 pending on n0 were left out, and the unscheduled rank 2 (the least bad).
	if s.UnhealthyWorkersTruncated != wantCounts.Unhealthy-nezhav1.MaxListedWorkers {
		t.Errorf("truncated %d", s.UnhealthyWorkersTruncated)
	}
	wantRails := []nezhav1.RailSummary{
		{Name: "a", State: nezhav1.RailStateHealthy},
		{Name: "b", State: nezhav1.RailStateDown, DownWorkers: 1, DownNodes: []string{"n1"}},
	}
	if d := cmp.Diff(wantRails, s.Rails); d != "" {
		t.Errorf("rails (-want +got):\n%s", d)
	}
	// What a restarted operator reads back as down.
	if d := cmp.Diff(map[railPair]bool{{"b", "n1"}: true}, downFromStatus(s), cmp.AllowUnexported(railPair{})); d != "" {
		t.Errorf("down from status (-want +got):\n%s", d)
	}
}

// A link lost on one node of a two-node job: both runtimes fail the rail (the peer learns it
// through the control mesh), but only the node that lost it is blamed in the worker's reason.
func TestRuntimeOnlyFailureIsNotBlamedOnTheNode(t *testing.T) {
	pod := func(rank int, node string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("j-%d", rank), Labels: map[string]string{nezhav1.RankLabel: fmt.Sprint(rank)}},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	}
	obs := observePods([]corev1.Pod{pod(0, "n0"), pod(1, "n1")}, namesOnly([]string{"a", "b"}))
	nodes := map[string]*nezhav1.RailNode{
		"n0": tu.MakeRailNode("n0").Rail("a", "eth1", true).Rail("b", "eth2", true).Obj(),
		"n1": tu.MakeRailNode("n1").Rail("a", "eth1", true).Rail("b", "eth2", false).Obj(),
	}
	h := assessRailHealth(obs.workers, []string{"a", "b"}, nodes, map[int32][]string{0: {"b"}, 1: {"b"}}, nil, freshness{now: t0.Time})
	s := &nezhav1.MultiRailJobStatus{}
	summarizeWorkers(obs, []string{"a", "b"}, h, false, s)
	var got []string
	for _, w := range s.UnhealthyWorkers {
		got = append(got, fmt.Sprintf("%d %s", w.Rank, w.Reason))
	}
	want := []string{"0 rail b failed in its runtime (node n0 does not report it down)", "1 rail b down on node n1"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("listed (-want +got):\n%s", d)
	}
	// The rail summary keeps its documented meaning: nodes whose agent or runtime reports it down.
	wantB := nezhav1.RailSummary{Name: "b", State: nezhav1.RailStateDown, DownWorkers: 2, DownNodes: []string{"n0", "n1"}}
	if d := cmp.Diff(wantB, s.Rails[1]); d != "" {
		t.Errorf("rail b (-want +got):\n%s", d)
	}
}

func TestDownNodesBounded(t *testing.T) {
	h := railHealth{down: map[railPair]string{}, downRails: []string{"a"}, placed: true}
	for i := 0; i < 100; i++ {
		h.down[railPair{"a", fmt.Sprintf("n%03d", i)}] = "down"
	}
	s := &nezhav1.MultiRailJobStatus{}
	summarizeWorkers(observation{}, []string{"a"}, h, true, s)
	r := s.Rails[0]
	if len(r.DownNodes) != nezhav1.MaxListedNodes || r.DownNodes[0] != "n000" || r.DownNodesTruncated != 100-nezhav1.MaxListedNodes {
		t.Errorf("rail summary %+v", r)
	}
}

func TestFailoverEventsBounded(t *testing.T) {
	var recs []nezhav1.FailoverRecord
	for i := 0; i < 500; i++ {
		recs = append(recs, nezhav1.FailoverRecord{Action: nezhav1.FailoverRailLost, Rail: "a", Node: fmt.Sprint(i), Message: "lost " + fmt.Sprint(i)})
	}
	recs = append(recs, nezhav1.FailoverRecord{Action: nezhav1.FailoverRailRecovered, Rail: "b", Node: "x", Message: "back"})
	st := newStatus()
	emitFailoverEvents(recs, st)
	if len(st.events) != maxFailoverEvents+2 || st.events[maxFailoverEvents].message != "back" ||
		st.events[maxFailoverEvents+1].message != "and 495 more (rail, node) pairs lost (status.rails lists the nodes)" {
		t.Errorf("events %+v", st.events)
	}
}

// TestStatusSizeAt10000Workers runs the real reconcile (fake API client) on a 10,000-worker job,
// 4 rails, 500 nodes, and measures the job as JSON in the worst state for its status: every
// worker's node reports three of the rails down, then back up (failover history full), and some
// workers are failed, pending or not ready.
func TestStatusSizeAt10000Workers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 10,000 pods")
	}
	const workers, nodeCount = 10000, 500
	ns, name := "research-llm", "pretrain-70b-multirail"
	railNames := []string{"rail-roce-a", "rail-roce-b", "rail-tcp-c", "rail-tcp-d"}
	objs := []client.Object{}
	for _, r := range railNames {
		objs = append(objs, tu.MakeRailClass(r).Obj())
	}
	objs = append(objs, tu.MakeJob(name, ns, railNames...).Replicas(workers).Obj())
	r, _ := newFakeReconciler(interceptor.Funcs{}, objs...)
	ctx := context.Background()
	if _, err := r.Reconcile(ctx, request(ns, name)); err != nil {
		t.Fatal(err)
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != workers {
		t.Fatalf("%d pods created", len(pods.Items))
	}
	nodeName := func(i int) string { return fmt.Sprintf("gpu-a100-rack%02d-node%03d.cluster.example.com", i/20, i) }
	for i := range pods.Items {
		p := &pods.Items[i]
		rank, _ := podRank(p)
		p.Spec.NodeName = nodeName(int(rank) % nodeCount)
		var nst []nadv1.NetworkStatus
		for ri, rail := range railNames {
			nst = append(nst, nadv1.NetworkStatus{Name: p.Namespace + "/" + builder.NADName(name, rail), Interface: builder.InterfaceName(ri),
				IPs: []string{fmt.Sprintf("10.%d.%d.%d", 100+ri, rank/250, rank%250), fmt.Sprintf("fd00:%x::%x", ri, rank)},
				Mac: "02:42:ac:11:00:02", DeviceInfo: &nadv1.DeviceInfo{Type: "pci", Pci: &nadv1.PciDevice{PciAddress: "0000:3b:02.1", RdmaDevice: "mlx5_13"}}})
		}
		raw, _ := json.Marshal(nst)
		p.Annotations = map[string]string{nadv1.NetworkStatusAnnot: string(raw)}
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		switch {
		case rank%1000 == 7:
			p.Status.Phase = corev1.PodPending
		case rank%1000 == 8:
			p.Status.Conditions[0].Status = corev1.ConditionFalse
		}
		st := p.Status
		if err := r.Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.Status = st
		if err := r.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	putNodes := func(up bool) {
		for i := 0; i < nodeCount; i++ {
			rn := tu.MakeRailNode(nodeName(i)).Rail(railNames[0], "ens1f0", true)
			for _, rail := range railNames[1:] {
				rn = rn.Rail(rail, "ens2f"+rail[len(rail)-1:], up)
			}
			obj := rn.Obj()
			cur := &nezhav1.RailNode{}
			if err := r.Get(ctx, client.ObjectKeyFromObject(obj), cur); err == nil {
				cur.Status = obj.Status
				if err := r.Update(ctx, cur); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err := r.Create(ctx, obj); err != nil {
				t.Fatal(err)
			}
		}
	}
	measure := func(stage string) *nezhav1.MultiRailJob {
		t.Helper()
		if _, err := r.Reconcile(ctx, request(ns, name)); err != nil {
			t.Fatal(err)
		}
		job := &nezhav1.MultiRailJob{}
		if err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, job); err != nil {
			t.Fatal(err)
		}
		whole, _ := json.Marshal(job)
		status, _ := json.Marshal(job.Status)
		t.Logf("%s: job %d bytes as JSON, status %d bytes (etcd limit %d)", stage, len(whole), len(status), etcdObjectLimit)
		// The bound does not grow with the workers: 64 KiB is 1/24 of etcd's limit.
		if len(status) > 64*1024 || len(whole) > 128*1024 {
			t.Errorf("%s: status %d bytes, job %d bytes", stage, len(status), len(whole))
		}
		return job
	}
	putNodes(false)
	job := measure("3 of 4 rails down on every node")
	if job.Status.WorkerCounts.Running != workers-10 || job.Status.WorkerCounts.Unhealthy != workers ||
		len(job.Status.UnhealthyWorkers) != nezhav1.MaxListedWorkers || job.Status.Rails[1].DownWorkers != workers ||
		job.Status.Rails[1].DownNodesTruncated != nodeCount-nezhav1.MaxListedNodes || job.Status.Phase != nezhav1.PhaseDegraded {
		t.Errorf("counts %+v listed %d rails %+v phase %s", job.Status.WorkerCounts, len(job.Status.UnhealthyWorkers), job.Status.Rails[1], job.Status.Phase)
	}
	putNodes(true)
	job = measure("recovered, failover history full")
	if len(job.Status.FailoverHistory) != nezhav1.MaxFailoverHistory || job.Status.WorkerCounts.Unhealthy != 20 || job.Status.Rails[1].State != nezhav1.RailStateHealthy {
		t.Errorf("history %d counts %+v rails %+v", len(job.Status.FailoverHistory), job.Status.WorkerCounts, job.Status.Rails[1])
	}
}

// TestStatusSizeWorstCase: the status's bound holds with the longest names the API allows
// (253-character rails and nodes), 16 rails, MaxReplicas workers all failed with long messages,
// every rail down everywhere and every bounded list full.
func TestStatusSizeWorstCase(t *testing.T) {
	long := func(prefix string, i int) string {
		s := fmt.Sprintf("%s-%05d-", prefix, i)
		return s + strings.Repeat("x", 253-len(s))
	}
	var railNames []string
	for i := 0; i < nezhav1.MaxRails; i++ {
		railNames = append(railNames, long("rail", i))
	}
	msg := strings.Repeat("m", 4000)
	var pods []corev1.Pod
	for rank := 0; rank < nezhav1.MaxReplicas; rank++ {
		pods = append(pods, corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: long("pod", rank)[:63], Labels: map[string]string{nezhav1.RankLabel: fmt.Sprint(rank)}},
			Spec:       corev1.PodSpec{NodeName: long("node", rank%1000)},
			Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "trainer",
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: msg}}}}},
		})
	}
	obs := observePods(pods, namesOnly(railNames))
	nodes := map[string]*nezhav1.RailNode{}
	for i := 0; i < 1000; i++ {
		rn := tu.MakeRailNode(long("node", i))
		for _, rail := range railNames {
			rn = rn.Rail(rail, "eth9", false)
		}
		nodes[long("node", i)] = rn.Obj()
	}
	h := assessRailHealth(obs.workers, railNames, nodes, nil, nil, freshness{now: t0.Time})
	st := newStatus()
	recs := failoverRecords(nil, h.down, nil, t0)
	for i := range recs {
		recs[i].Message = truncate(msg, 1000)
	}
	st.status.FailoverHistory = appendHistory(nil, recs)
	summarizeWorkers(obs, railNames, h, true, st.status)
	setRailsHealthy(h, st)
	applyWorkerCompletion(obs, nezhav1.MaxReplicas, st)
	applyRailLossPolicy(tu.MakeJob("j", "ns", railNames...).Obj(), h, st)
	raw, _ := json.Marshal(st.status)
	t.Logf("worst-case status: %d bytes as JSON (etcd limit %d)", len(raw), etcdObjectLimit)
	if len(raw) > 512*1024 {
		t.Errorf("worst-case status %d bytes", len(raw))
	}
}

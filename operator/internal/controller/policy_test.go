package controller

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	configapi "github.com/nezha-project/nezha/operator/api/config/v1alpha1"
	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	tu "github.com/nezha-project/nezha/operator/internal/testutil"
)

var t0 = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

func newStatus() *statusUpdate {
	return &statusUpdate{status: &nezhav1.MultiRailJobStatus{}, generation: 1, now: t0}
}

func worker(rank int32, node string, rails ...string) nezhav1.WorkerStatus {
	w := nezhav1.WorkerStatus{Rank: rank, NodeName: node}
	for _, r := range rails {
		w.Rails = append(w.Rails, nezhav1.WorkerRailStatus{Name: r})
	}
	return w
}

func TestPodRank(t *testing.T) {
	cases := []struct {
		labels map[string]string
		rank   int32
		ok     bool
	}{
		{map[string]string{nezhav1.RankLabel: "3"}, 3, true},
		{map[string]string{nezhav1.RankLabel: "x"}, 0, false},
		{map[string]string{nezhav1.RankLabel: "-1"}, 0, false},
		{map[string]string{kubeflowv1.ReplicaTypeLabel: "master", kubeflowv1.ReplicaIndexLabel: "0"}, 0, true},
		{map[string]string{kubeflowv1.ReplicaTypeLabel: "worker", kubeflowv1.ReplicaIndexLabel: "2"}, 3, true},
		{map[string]string{kubeflowv1.ReplicaTypeLabel: "ps", kubeflowv1.ReplicaIndexLabel: "0"}, 0, false},
		{map[string]string{}, 0, false},
	}
	for _, c := range cases {
		rank, ok := podRank(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: c.labels}})
		if rank != c.rank || ok != c.ok {
			t.Errorf("%v: got %d,%t want %d,%t", c.labels, rank, ok, c.rank, c.ok)
		}
	}
}

func TestObservePodsNewestPodWinsRank(t *testing.T) {
	old := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "old", Labels: map[string]string{nezhav1.RankLabel: "0"},
		CreationTimestamp: t0}, Status: corev1.PodStatus{Phase: corev1.PodFailed}}
	newer := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "new", Labels: map[string]string{nezhav1.RankLabel: "0"},
		CreationTimestamp: metav1.NewTime(t0.Add(time.Minute))}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	obs := observePods([]corev1.Pod{newer, old}, nil)
	if len(obs.workers) != 1 || obs.workers[0].PodName != "new" || len(obs.failed) != 0 {
		t.Errorf("observation %+v", obs)
	}
}

func TestAssessRailHealth(t *testing.T) {
	workers := []nezhav1.WorkerStatus{
		worker(0, "n0", "a", "b"),
		worker(1, "n1", "a", "b"),
		worker(2, "", "a", "b"), // not scheduled: not judged
		worker(3, "n2", "a", "b"),
	}
	nodes := map[string]*nezhav1.RailNode{
		"n0": tu.MakeRailNode("n0").Rail("a", "eth1", true).Rail("b", "eth2", true).Obj(),
		"n1": tu.MakeRailNode("n1").Rail("a", "eth1", true).Rail("b", "eth2", false).Obj(),
		// n2 has no RailNode.
	}
	h := assessRailHealth(workers, []string{"a", "b"}, nodes, map[int32][]string{0: {"a"}}, nil,
		freshness{now: time.Now(), staleAfter: configapi.DefaultRailNodeStaleAfter})
	wantDown := map[railPair]string{
		{"b", "n1"}: `rail "b" down on node "n1": interface "eth2" operState=down carrier=false`,
		{"a", "n0"}: `rail "a" failed in the runtime of worker 0 on node "n0"`,
	}
	if d := cmp.Diff(wantDown, h.down, cmp.AllowUnexported(railPair{})); d != "" {
		t.Errorf("down (-want +got):\n%s", d)
	}
	if h.healthy != 0 || !cmp.Equal(h.downRails, []string{"a", "b"}) || !h.placed {
		t.Errorf("healthy %d downRails %v", h.healthy, h.downRails)
	}
	if d := cmp.Diff([]string{`"a" on node "n2"`, `"b" on node "n2"`}, h.unreported); d != "" {
		t.Errorf("unreported (-want +got):\n%s", d)
	}
	if !workers[1].Rails[0].Healthy || workers[1].Rails[1].Healthy || workers[0].Rails[0].Healthy || !workers[3].Rails[0].Healthy {
		t.Errorf("per-worker health: %+v", workers)
	}
}

func TestFailoverRecords(t *testing.T) {
	prev := map[railPair]bool{{"a", "n0"}: true, {"b", "n1"}: true, {"c", "gone"}: true}
	now := map[railPair]string{{"a", "n0"}: "still", {"b", "n2"}: "new loss"}
	placed := map[string]bool{"n0": true, "n1": true, "n2": true}
	got := failoverRecords(prev, now, placed, t0)
	want := []nezhav1.FailoverRecord{
		{Time: t0, Action: nezhav1.FailoverRailLost, Rail: "b", Node: "n2", Message: "new loss"},
		{Time: t0, Action: nezhav1.FailoverRailRecovered, Rail: "b", Node: "n1", Message: `rail "b" up again on node "n1"`},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestAppendHistoryIsBounded(t *testing.T) {
	var hist []nezhav1.FailoverRecord
	for i := 0; i < nezhav1.MaxFailoverHistory+5; i++ {
		hist = appendHistory(hist, []nezhav1.FailoverRecord{{Message: fmt.Sprint(i)}})
	}
	if len(hist) != nezhav1.MaxFailoverHistory || hist[0].Message != "5" || hist[len(hist)-1].Message != fmt.Sprint(nezhav1.MaxFailoverHistory+4) {
		t.Errorf("len %d first %q last %q", len(hist), hist[0].Message, hist[len(hist)-1].Message)
	}
}

func TestRailLossPolicy(t *testing.T) {
	job := tu.MakeJob("j", "ns", "a", "b", "c").MinHealthyRails(2).OnRailLoss(nezhav1.Restart).Obj()
	oneDown := railHealth{downRails: []string{"c"}, healthy: 2, placed: true}
	twoDown := railHealth{downRails: []string{"b", "c"}, healthy: 1, placed: true}

	st := newStatus()
	if applyRailLossPolicy(job, oneDown, st) {
		t.Error("restart while at minHealthyRails")
	}
	if c := meta.FindStatusCondition(st.status.Conditions, nezhav1.ConditionDegraded); c.Reason != nezhav1.ReasonRailDown || c.Message != "running on 2 of 3 rails (down: c)" {
		t.Errorf("degraded %+v", c)
	}
	if !applyRailLossPolicy(job, twoDown, st) {
		t.Error("no restart when dropping below minHealthyRails")
	}
	if applyRailLossPolicy(job, twoDown, st) {
		t.Error("restarted twice in one episode")
	}
	applyRailLossPolicy(job, railHealth{healthy: 3, placed: true}, st)
	if meta.IsStatusConditionTrue(st.status.Conditions, nezhav1.ConditionDegraded) {
		t.Error("still degraded with all rails up")
	}
	if !applyRailLossPolicy(job, twoDown, st) {
		t.Error("a new episode must restart again")
	}

	cont := tu.MakeJob("j", "ns", "a", "b", "c").MinHealthyRails(2).Obj()
	if applyRailLossPolicy(cont, twoDown, newStatus()) {
		t.Error("ContinueDegraded restarted")
	}
}

func TestComputePhase(t *testing.T) {
	cases := []struct {
		name             string
		conds            map[string]metav1.ConditionStatus
		desired, running int32
		want             nezhav1.JobPhase
	}{
		{"pending", nil, 2, 1, nezhav1.PhasePending},
		{"running", nil, 2, 2, nezhav1.PhaseRunning},
		{"degraded beats running", map[string]metav1.ConditionStatus{nezhav1.ConditionDegraded: metav1.ConditionTrue}, 2, 2, nezhav1.PhaseDegraded},
		{"failed beats all", map[string]metav1.ConditionStatus{nezhav1.ConditionDegraded: metav1.ConditionTrue, nezhav1.ConditionFailed: metav1.ConditionTrue}, 2, 2, nezhav1.PhaseFailed},
		{"succeeded", map[string]metav1.ConditionStatus{nezhav1.ConditionSucceeded: metav1.ConditionTrue}, 2, 0, nezhav1.PhaseSucceeded},
	}
	for _, c := range cases {
		st := newStatus()
		for typ, s := range c.conds {
			st.setCondition(typ, s, "R", "", "")
		}
		if got := computePhase(st, c.desired, c.running); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

func TestSetConditionQueuesEventsOnlyOnChange(t *testing.T) {
	st := newStatus()
	st.setCondition(nezhav1.ConditionNetworksReady, metav1.ConditionFalse, nezhav1.ReasonRailClassNotFound, "m", warning)
	st.setCondition(nezhav1.ConditionNetworksReady, metav1.ConditionFalse, nezhav1.ReasonRailClassNotFound, "m", warning)
	st.setCondition(nezhav1.ConditionNetworksReady, metav1.ConditionTrue, nezhav1.ReasonNetworksReady, "ok", normal)
	if len(st.events) != 2 {
		t.Errorf("events %+v", st.events)
	}
}

func TestRetryAfterBacksOff(t *testing.T) {
	st := newStatus()
	if d := st.retryAfter(nezhav1.ConditionNetworksReady); d != minRetry {
		t.Errorf("no condition: %v", d)
	}
	st.setCondition(nezhav1.ConditionNetworksReady, metav1.ConditionFalse, "X", "", "")
	st.now = metav1.NewTime(t0.Add(40 * time.Second))
	if d := st.retryAfter(nezhav1.ConditionNetworksReady); d != 40*time.Second {
		t.Errorf("after 40s: %v", d)
	}
	st.now = metav1.NewTime(t0.Add(time.Hour))
	if d := st.retryAfter(nezhav1.ConditionNetworksReady); d != maxRetry {
		t.Errorf("after 1h: %v", d)
	}
}

func TestNodesToAvoid(t *testing.T) {
	nodes := []nezhav1.RailNode{
		*tu.MakeRailNode("n0").Rail("a", "eth1", true).Obj(),
		*tu.MakeRailNode("n1").Rail("a", "eth1", false).Obj(),
		*tu.MakeRailNode("n2").Rail("other", "eth1", false).Obj(),
	}
	if got := nodesToAvoid(nodes, []string{"a"}); !cmp.Equal(got, []string{"n1"}) {
		t.Errorf("got %v", got)
	}
}

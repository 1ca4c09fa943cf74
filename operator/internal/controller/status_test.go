package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	runtimeprober "github.com/nezha-project/nezha/operator/internal/prober"
	tu "github.com/nezha-project/nezha/operator/internal/testutil"
)

// runningJob creates a two-rail, two-worker job and plays scheduler, Multus and kubelet so both
// workers run on their nodes with both rails attached. It returns the rail names.
func runningJob(t *testing.T, ns, name string, nodes [2]string, job *tu.JobWrapper) (string, string) {
	t.Helper()
	return runningJobOn(t, ns, name, nodes[:], job)
}

// runningJobOn is runningJob with one worker per entry of nodes (rank i on nodes[i]).
func runningJobOn(t *testing.T, ns, name string, nodes []string, job *tu.JobWrapper) (string, string) {
	t.Helper()
	r0, r1 := ns+"-r0", ns+"-r1"
	mustCreate(t, tu.MakeRailClass(r0).Obj())
	mustCreate(t, tu.MakeRailClass(r1).Obj())
	mustCreate(t, job.Rails(r0, r1).Replicas(int32(len(nodes))).Obj())
	for rank := range nodes {
		pod := fmt.Sprintf("%s-%d", name, rank)
		eventually(t, "pod", podExists(ns, pod))
		runPod(t, ns, pod, nodes[rank],
			attachment{network: ns + "/" + name + "-" + r0, iface: "nz0", ip: fmt.Sprintf("10.10.0.%d", rank+1)},
			attachment{network: ns + "/" + name + "-" + r1, iface: "nz1", ip: fmt.Sprintf("10.11.0.%d", rank+1)})
	}
	ready := fmt.Sprintf("%d/%d", len(nodes), len(nodes))
	eventually(t, "running", func() error {
		job := &nezhav1.MultiRailJob{}
		if err := k8s.Get(context.Background(), clientKey(ns, name), job); err != nil {
			return err
		}
		if job.Status.Phase != nezhav1.PhaseRunning || job.Status.WorkersReady != ready {
			return fmt.Errorf("phase %q ready %q", job.Status.Phase, job.Status.WorkersReady)
		}
		return nil
	})
	return r0, r1
}

// TestStatusFromNetworkStatus: worker statuses come from the pods and Multus network-status,
// including device info (PCI address, RDMA device) of SR-IOV rails.
func TestStatusFromNetworkStatus(t *testing.T) {
	ns := newNamespace(t)
	r0, r1 := ns+"-r0", ns+"-r1"
	mustCreate(t, tu.MakeRailClass(r0).SRIOV(sriovResource).Transport(nezhav1.TransportRDMA).Obj())
	mustCreate(t, tu.MakeRailClass(r1).Obj())
	mustCreate(t, tu.MakeJob("st", ns, r0, r1).Replicas(2).Obj())
	eventually(t, "pods", podExists(ns, "st-1"))
	n0, n1 := ns+"-n0", ns+"-n1"
	runPod(t, ns, "st-0", n0,
		attachment{ns + "/st-" + r0, "nz0", "10.10.0.1", "0000:3b:02.1", "mlx5_3"},
		attachment{ns + "/st-" + r1, "nz1", "10.11.0.1", "", ""})
	// Rank 1 runs but Multus reports only the first rail.
	runPod(t, ns, "st-1", n1, attachment{ns + "/st-" + r0, "nz0", "10.10.0.2", "0000:3b:02.2", "mlx5_4"})

	eventually(t, "rail missing", conditionIs(ns, "st", nezhav1.ConditionRailsVerified, metav1.ConditionFalse, "RailInterfaceMissing",
		fmt.Sprintf("worker 1 (pod st-1): no interface for rail %s", r1)))
	eventually(t, "event", eventSeen(ns, "st", corev1.EventTypeWarning, "RailInterfaceMissing", "st-1"))
	// The worker missing a rail is listed with what it has (device info included) and why.
	wantUnhealthy := []nezhav1.WorkerStatus{
		{Rank: 1, PodName: "st-1", NodeName: n1, Phase: corev1.PodRunning, Ready: true, Reason: "no interface for rail " + r1,
			Rails: []nezhav1.WorkerRailStatus{
				{Name: r0, Interface: "nz0", IPs: []string{"10.10.0.2"}, MAC: "02:00:00:00:00:01", PCIAddress: "0000:3b:02.2", RDMADevice: "mlx5_4", Healthy: true},
				{Name: r1, Healthy: true},
			}},
	}
	eventually(t, "unhealthy worker listed", func() error {
		job := getJob(t, ns, "st")
		if d := cmp.Diff(wantUnhealthy, job.Status.UnhealthyWorkers); d != "" {
			return errorf("unhealthy workers (-want +got):\n%s", d)
		}
		return nil
	})

	setNetworkStatus(t, ns, "st-1",
		attachment{ns + "/st-" + r0, "nz0", "10.10.0.2", "0000:3b:02.2", "mlx5_4"},
		attachment{ns + "/st-" + r1, "nz1", "10.11.0.2", "", ""})
	eventually(t, "verified", conditionIs(ns, "st", nezhav1.ConditionRailsVerified, metav1.ConditionTrue, "AllRailsAttached", "2 running workers"))

	job := getJob(t, ns, "st")
	// Healthy workers are counted, not listed; each rail is summarised.
	wantCounts := nezhav1.WorkerCounts{Pods: 2, Running: 2}
	wantRails := []nezhav1.RailSummary{
		{Name: r0, State: nezhav1.RailStateHealthy, AttachedWorkers: 2},
		{Name: r1, State: nezhav1.RailStateHealthy, AttachedWorkers: 2},
	}
	if d := cmp.Diff(wantCounts, job.Status.WorkerCounts); d != "" {
		t.Errorf("worker counts (-want +got):\n%s", d)
	}
	if d := cmp.Diff(wantRails, job.Status.Rails); d != "" {
		t.Errorf("rails (-want +got):\n%s", d)
	}
	if len(job.Status.UnhealthyWorkers) != 0 || job.Status.UnhealthyWorkersTruncated != 0 {
		t.Errorf("unhealthy workers %+v (+%d)", job.Status.UnhealthyWorkers, job.Status.UnhealthyWorkersTruncated)
	}
	if job.Status.Phase != nezhav1.PhaseRunning || job.Status.WorkersReady != "2/2" || job.Status.RailsHealthy != "2/2" {
		t.Errorf("phase %q workersReady %q railsHealthy %q", job.Status.Phase, job.Status.WorkersReady, job.Status.RailsHealthy)
	}
	// No RailNode reports on these nodes yet: health is Unknown, not True.
	if err := conditionIs(ns, "st", nezhav1.ConditionRailsHealthy, metav1.ConditionUnknown, "RailNodeNotReported", n0)(); err != nil {
		t.Error(err)
	}
	if job.Status.StartTime == nil || job.Status.ObservedGeneration != job.Generation {
		t.Errorf("startTime %v observedGeneration %d", job.Status.StartTime, job.Status.ObservedGeneration)
	}
}

// TestRailNodeDownDegradesAndRecovers: a rail reported down on a worker's node makes the job
// Degraded with the rail and node named, records the failover, and recovers when the rail does.
func TestRailNodeDownDegradesAndRecovers(t *testing.T) {
	ns := newNamespace(t)
	n0, n1 := ns+"-n0", ns+"-n1"
	r0, r1 := runningJob(t, ns, "deg", [2]string{n0, n1}, tu.MakeJob("deg", ns))
	putRailNode(t, tu.MakeRailNode(n0).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj())
	putRailNode(t, tu.MakeRailNode(n1).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj())
	eventually(t, "healthy", conditionIs(ns, "deg", nezhav1.ConditionRailsHealthy, metav1.ConditionTrue, "AllRailsUp", "all 2 rails"))

	putRailNode(t, tu.MakeRailNode(n1).Rail(r0, "eth1", true).Rail(r1, "eth2", false).Obj())
	wantMsg := fmt.Sprintf(`rail %q down on node %q: interface "eth2" operState=down carrier=false`, r1, n1)
	eventually(t, "rails unhealthy", conditionIs(ns, "deg", nezhav1.ConditionRailsHealthy, metav1.ConditionFalse, "RailDown", wantMsg))
	eventually(t, "degraded", conditionIs(ns, "deg", nezhav1.ConditionDegraded, metav1.ConditionTrue, "RailDown", "running on 1 of 2 rails (down: "+r1+")"))
	eventually(t, "event", eventSeen(ns, "deg", corev1.EventTypeWarning, "RailLost", wantMsg))
	job := getJob(t, ns, "deg")
	if job.Status.Phase != nezhav1.PhaseDegraded || job.Status.RailsHealthy != "1/2" || job.Status.HealthyRails != 1 {
		t.Errorf("phase %q railsHealthy %q", job.Status.Phase, job.Status.RailsHealthy)
	}
	ignoreTime := cmpopts.IgnoreFields(nezhav1.FailoverRecord{}, "Time")
	wantHist := []nezhav1.FailoverRecord{{Action: nezhav1.FailoverRailLost, Rail: r1, Node: n1, Message: wantMsg}}
	if d := cmp.Diff(wantHist, job.Status.FailoverHistory, ignoreTime); d != "" {
		t.Errorf("history (-want +got):\n%s", d)
	}
	wantRails := []nezhav1.RailSummary{
		{Name: r0, State: nezhav1.RailStateHealthy, AttachedWorkers: 2},
		{Name: r1, State: nezhav1.RailStateDown, AttachedWorkers: 2, DownWorkers: 1, DownNodes: []string{n1}},
	}
	if d := cmp.Diff(wantRails, job.Status.Rails); d != "" {
		t.Errorf("rails (-want +got):\n%s", d)
	}
	if u := job.Status.UnhealthyWorkers; len(u) != 1 || u[0].Rank != 1 || u[0].Reason != fmt.Sprintf("rail %s down on node %s", r1, n1) ||
		u[0].Rails[1].Healthy || !u[0].Rails[0].Healthy || job.Status.WorkerCounts.Unhealthy != 1 {
		t.Errorf("unhealthy workers %+v counts %+v", u, job.Status.WorkerCounts)
	}

	putRailNode(t, tu.MakeRailNode(n1).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj())
	eventually(t, "recovered", conditionIs(ns, "deg", nezhav1.ConditionDegraded, metav1.ConditionFalse, "AllRailsUp", ""))
	eventually(t, "recovery event", eventSeen(ns, "deg", corev1.EventTypeNormal, "RailRecovered", n1))
	job = getJob(t, ns, "deg")
	if len(job.Status.FailoverHistory) != 2 || job.Status.FailoverHistory[1].Action != nezhav1.FailoverRailRecovered {
		t.Errorf("history after recovery: %+v", job.Status.FailoverHistory)
	}
	if job.Status.Phase != nezhav1.PhaseRunning || len(job.Status.UnhealthyWorkers) != 0 || job.Status.Rails[1].State != nezhav1.RailStateHealthy ||
		len(job.Status.Rails[1].DownNodes) != 0 {
		t.Errorf("after recovery: phase %q unhealthy %+v rails %+v", job.Status.Phase, job.Status.UnhealthyWorkers, job.Status.Rails)
	}
}

// TestQuarantinedRailCountsAsDown: an administrator's quarantine on the RailNode spec is a rail loss.
func TestQuarantinedRailCountsAsDown(t *testing.T) {
	ns := newNamespace(t)
	n0, n1 := ns+"-n0", ns+"-n1"
	r0, r1 := runningJob(t, ns, "quar", [2]string{n0, n1}, tu.MakeJob("quar", ns))
	rn := tu.MakeRailNode(n0).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj()
	rn.Spec.QuarantinedRails = []string{r0}
	putRailNode(t, rn)
	eventually(t, "quarantine", conditionIs(ns, "quar", nezhav1.ConditionRailsHealthy, metav1.ConditionFalse, "RailDown",
		fmt.Sprintf("rail %q quarantined on node %q", r0, n0)))
}

// TestRestartOnRailLossAvoidsBadNode: below minHealthyRails with onRailLoss=Restart the workers
// are deleted once, and their replacements keep off the node with the dead rail.
func TestRestartOnRailLossAvoidsBadNode(t *testing.T) {
	ns := newNamespace(t)
	n0, n1 := ns+"-n0", ns+"-n1"
	r0, r1 := runningJob(t, ns, "rst", [2]string{n0, n1},
		tu.MakeJob("rst", ns).MinHealthyRails(2).OnRailLoss(nezhav1.Restart))
	putRailNode(t, tu.MakeRailNode(n0).Rail(r0, "eth1", false).Rail(r1, "eth2", true).Obj())

	eventually(t, "below min", conditionIs(ns, "rst", nezhav1.ConditionDegraded, metav1.ConditionTrue, "BelowMinHealthyRails",
		"1 of 2 rails healthy, below minHealthyRails 2"))
	eventually(t, "restart event", eventSeen(ns, "rst", corev1.EventTypeWarning, "RestartedWorkers", "deleted 2 worker pods"))
	eventually(t, "pods terminating", func() error {
		for _, p := range []string{"rst-0", "rst-1"} {
			pod, err := getPod(ns, p)
			if err != nil {
				return err
			}
			if pod.DeletionTimestamp == nil {
				return fmt.Errorf("%s not being deleted", p)
			}
		}
		return nil
	})
	job := getJob(t, ns, "rst")
	if job.Status.Restarts != 1 {
		t.Errorf("restarts = %d", job.Status.Restarts)
	}
	last := job.Status.FailoverHistory[len(job.Status.FailoverHistory)-1]
	if last.Action != nezhav1.FailoverRestarted {
		t.Errorf("last history entry %+v", last)
	}
	// The kubelet would now finish the deletion.
	forceDelete(t, ns, "rst-0")
	forceDelete(t, ns, "rst-1")
	eventually(t, "replacement", func() error {
		pod, err := getPod(ns, "rst-0")
		if err != nil {
			return err
		}
		if pod.DeletionTimestamp != nil {
			return fmt.Errorf("still the old pod")
		}
		a := pod.Spec.Affinity
		if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
			return fmt.Errorf("no node affinity: %+v", a)
		}
		want := []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{n0}},
		}}}
		if d := cmp.Diff(want, a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms); d != "" {
			return fmt.Errorf("affinity (-want +got):\n%s", d)
		}
		return nil
	})
	if job := getJob(t, ns, "rst"); job.Status.Restarts != 1 {
		t.Errorf("restarted again: %d", job.Status.Restarts)
	}
}

// TestContinueDegradedKeepsWorkers: the default policy never deletes workers.
func TestContinueDegradedKeepsWorkers(t *testing.T) {
	ns := newNamespace(t)
	n0, n1 := ns+"-n0", ns+"-n1"
	r0, r1 := runningJob(t, ns, "cont", [2]string{n0, n1}, tu.MakeJob("cont", ns).MinHealthyRails(2))
	putRailNode(t, tu.MakeRailNode(n0).Rail(r0, "eth1", false).Rail(r1, "eth2", false).Obj())
	eventually(t, "below min", conditionIs(ns, "cont", nezhav1.ConditionDegraded, metav1.ConditionTrue, "BelowMinHealthyRails",
		"0 of 2 rails healthy"))
	for _, p := range []string{"cont-0", "cont-1"} {
		if pod, err := getPod(ns, p); err != nil || pod.DeletionTimestamp != nil {
			t.Errorf("%s deleted under ContinueDegraded (%v)", p, err)
		}
	}
	if job := getJob(t, ns, "cont"); job.Status.Restarts != 0 || len(job.Status.FailoverHistory) != 2 {
		t.Errorf("restarts %d history %+v", job.Status.Restarts, job.Status.FailoverHistory)
	}
}

// TestRuntimeReportedRailFailure: the runtime's own view (through the prober) marks a rail down
// even when the node agent sees the link up.
func TestRuntimeReportedRailFailure(t *testing.T) {
	ns := newNamespace(t)
	n0, n1 := ns+"-n0", ns+"-n1"
	r0, r1 := runningJob(t, ns, "prb", [2]string{n0, n1}, tu.MakeJob("prb", ns))
	putRailNode(t, tu.MakeRailNode(n0).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj())
	putRailNode(t, tu.MakeRailNode(n1).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj())
	eventually(t, "healthy", conditionIs(ns, "prb", nezhav1.ConditionRailsHealthy, metav1.ConditionTrue, "AllRailsUp", ""))
	prober.set(ns, "prb-1", r0)
	// Probes run on reconcile; nudge one with a harmless pod annotation change.
	setPodAnnotation(t, ns, "prb-1", "test/nudge", "1")
	eventually(t, "runtime failure", conditionIs(ns, "prb", nezhav1.ConditionRailsHealthy, metav1.ConditionFalse, "RailDown",
		fmt.Sprintf("rail %q failed in the runtime of worker 1 on node %q", r0, n1)))
}

// TestRuntimeRecoveryIsSeenWithoutAnEvent: when the runtime re-admits a rail its nodes report up
// (a healed cut: the agent saw the link come back before the runtime's probe passed), nothing in
// Kubernetes changes; the operator looks again on its own and the job is healthy again.
func TestRuntimeRecoveryIsSeenWithoutAnEvent(t *testing.T) {
	ns := newNamespace(t)
	n0, n1 := ns+"-n0", ns+"-n1"
	r0, r1 := runningJob(t, ns, "readmit", [2]string{n0, n1}, tu.MakeJob("readmit", ns))
	putRailNode(t, tu.MakeRailNode(n0).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj())
	putRailNode(t, tu.MakeRailNode(n1).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj())
	prober.set(ns, "readmit-1", r1)
	setPodAnnotation(t, ns, "readmit-1", "test/nudge", "1")
	eventually(t, "runtime failure", conditionIs(ns, "readmit", nezhav1.ConditionRailsHealthy, metav1.ConditionFalse, "RailDown",
		fmt.Sprintf("rail %q failed in the runtime of worker 1 on node %q", r1, n1)))
	prober.set(ns, "readmit-1") // re-admitted; no object changes
	eventually(t, "healthy again", conditionIs(ns, "readmit", nezhav1.ConditionRailsHealthy, metav1.ConditionTrue, "AllRailsUp", ""))
	eventually(t, "not degraded", conditionIs(ns, "readmit", nezhav1.ConditionDegraded, metav1.ConditionFalse, "AllRailsUp", ""))
}

// TestWorkerFailureFailsJob and success: terminal conditions, phase and completion time.
func TestWorkerFailureFailsJob(t *testing.T) {
	ns := newNamespace(t)
	runningJob(t, ns, "fail", [2]string{ns + "-n0", ns + "-n1"}, tu.MakeJob("fail", ns))
	setPodPhase(t, ns, "fail-1", corev1.PodFailed, false, &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error"})
	eventually(t, "failed", conditionIs(ns, "fail", nezhav1.ConditionFailed, metav1.ConditionTrue, "WorkerFailed",
		"worker 1 (pod fail-1): container trainer exited with code 3 (Error)"))
	eventually(t, "event", eventSeen(ns, "fail", corev1.EventTypeWarning, "WorkerFailed", "fail-1"))
	job := getJob(t, ns, "fail")
	if job.Status.Phase != nezhav1.PhaseFailed || job.Status.CompletionTime == nil {
		t.Errorf("phase %q completion %v", job.Status.Phase, job.Status.CompletionTime)
	}
	// A finished job is left alone: deleting a pod does not bring it back.
	forceDelete(t, ns, "fail-0")
	setPodAnnotation(t, ns, "fail-1", "test/nudge", "1")
	if _, err := getPod(ns, "fail-0"); err == nil {
		t.Error("pod recreated for a failed job")
	}
}

func TestAllWorkersSucceeded(t *testing.T) {
	ns := newNamespace(t)
	runningJob(t, ns, "ok", [2]string{ns + "-n0", ns + "-n1"}, tu.MakeJob("ok", ns))
	setPodPhase(t, ns, "ok-0", corev1.PodSucceeded, false, &corev1.ContainerStateTerminated{ExitCode: 0})
	setPodPhase(t, ns, "ok-1", corev1.PodSucceeded, false, &corev1.ContainerStateTerminated{ExitCode: 0})
	eventually(t, "succeeded", conditionIs(ns, "ok", nezhav1.ConditionSucceeded, metav1.ConditionTrue, "AllWorkersSucceeded", "all 2 workers"))
	job := getJob(t, ns, "ok")
	if job.Status.Phase != nezhav1.PhaseSucceeded || job.Status.CompletionTime == nil {
		t.Errorf("phase %q completion %v", job.Status.Phase, job.Status.CompletionTime)
	}
}

// TestPrinterColumns: kubectl get mrj shows phase, ready workers, healthy rails, unhealthy workers
// and age (-o wide: pending, running, failed).
func TestPrinterColumns(t *testing.T) {
	crd := readCRD(t, "nezha.io_multirailjobs.yaml")
	var got []string
	for _, c := range crd.Spec.Versions[0].AdditionalPrinterColumns {
		got = append(got, c.Name+"="+c.JSONPath)
	}
	want := "Phase=.status.phase Ready=.status.workersReady Rails=.status.railsHealthy Unhealthy=.status.workerCounts.unhealthy " +
		"Pending=.status.workerCounts.pending Running=.status.workerCounts.running Failed=.status.workerCounts.failed Age=.metadata.creationTimestamp"
	if strings.Join(got, " ") != want {
		t.Errorf("printer columns %v, want %s", got, want)
	}
	if crd.Spec.Names.ShortNames[0] != "mrj" {
		t.Errorf("short names %v", crd.Spec.Names.ShortNames)
	}
}

// TestPreflightFailuresShowInRailsVerified: the runtimes' start-up check reaches RailsVerified with
// every failing (rank, rail, peer) pair and each rank's own reason; once the rail passed
// re-admission the condition turns true again (PreflightRecovered).
func TestPreflightFailuresShowInRailsVerified(t *testing.T) {
	ns := newNamespace(t)
	n0, n1 := ns+"-n0", ns+"-n1"
	r1 := ns + "-r1"
	report := func(result string, reason0, reason1 string) *runtimeprober.Preflight {
		return &runtimeprober.Preflight{Policy: "degrade", Result: result, FailureCount: 2, Failures: []runtimeprober.PreflightFailure{
			{Rank: 0, Rail: r1, Peer: 1, Reason: reason0}, {Rank: 1, Rail: r1, Peer: 0, Reason: reason1}}}
	}
	// Each rank knows its own reason; the peer's pair comes without one (as the runtime reports).
	prober.setPreflight(ns, "pf-0", report(runtimeprober.PreflightFailed, "connect: rail r1 waiting for 1 connections: timed out", ""))
	prober.setPreflight(ns, "pf-1", report(runtimeprober.PreflightFailed, "", "connect: rail r1 to rank 0: timed out"))
	runningJob(t, ns, "pf", [2]string{n0, n1}, tu.MakeJob("pf", ns).OnPreflightFailure(nezhav1.PreflightStartWithoutRail))
	want := fmt.Sprintf("pre-flight: started without rail(s) %[1]s: rank 0 rail %[1]s -> rank 1 (connect: rail r1 waiting for 1 connections: timed out); "+
		"rank 1 rail %[1]s -> rank 0 (connect: rail r1 to rank 0: timed out) (2 failing pair(s))", r1)
	eventually(t, "pre-flight failure listed", conditionIs(ns, "pf", nezhav1.ConditionRailsVerified, metav1.ConditionFalse, "PreflightFailed", want))
	eventually(t, "event", eventSeen(ns, "pf", corev1.EventTypeWarning, "PreflightFailed", "rank 1 rail "+r1+" -> rank 0"))

	prober.setPreflight(ns, "pf-0", report(runtimeprober.PreflightRecovered, "x", ""))
	prober.setPreflight(ns, "pf-1", report(runtimeprober.PreflightRecovered, "", "y"))
	putRailNode(t, tu.MakeRailNode(n0).Rail(ns+"-r0", "eth1", true).Rail(r1, "eth2", true).Obj()) // any change: a reconcile
	eventually(t, "recovered", conditionIs(ns, "pf", nezhav1.ConditionRailsVerified, metav1.ConditionTrue, "PreflightRecovered",
		"pre-flight: rail(s) "+r1+" failed at start and have passed re-admission since"))
}

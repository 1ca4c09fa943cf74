package controller_test

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	tu "github.com/nezha-project/nezha/operator/internal/testutil"
)

// avoidedByAffinity returns the metadata.name NotIn values of a pod's first required node term.
func avoidedByAffinity(pod *corev1.Pod) []string {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, req := range term.MatchFields {
			if req.Key == "metadata.name" && req.Operator == corev1.NodeSelectorOpNotIn {
				return req.Values
			}
		}
	}
	return nil
}

// TestUnscheduledWorkersFollowRailRecovery: workers created while a node's rail is down avoid that
// node; node affinity is immutable, so once the rail recovers the operator recreates the workers
// that are still unscheduled without the exclusion, and leaves scheduled workers alone.
func TestUnscheduledWorkersFollowRailRecovery(t *testing.T) {
	ns := newNamespace(t)
	n0, n1 := ns+"-n0", ns+"-n1"
	r0, r1 := ns+"-r0", ns+"-r1"
	putRailNode(t, tu.MakeRailNode(n0).Rail(r0, "eth1", false).Rail(r1, "eth2", true).Obj())
	putRailNode(t, tu.MakeRailNode(n1).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj())
	mustCreate(t, tu.MakeRailClass(r0).Obj())
	mustCreate(t, tu.MakeRailClass(r1).Obj())
	mustCreate(t, tu.MakeJob("out", ns).Rails(r0, r1).Replicas(2).Obj())

	var firstUID types.UID
	for _, name := range []string{"out-0", "out-1"} {
		eventually(t, name+" avoids "+n0, func() error {
			pod, err := getPod(ns, name)
			if err != nil {
				return err
			}
			if got := avoidedByAffinity(pod); len(got) != 1 || got[0] != n0 {
				return fmt.Errorf("%s avoids %v, want [%s]", name, got, n0)
			}
			if name == "out-0" {
				firstUID = pod.UID
			}
			return nil
		})
	}
	// Rank 1 gets scheduled during the outage; rank 0 stays Pending.
	bindPod(t, ns, "out-1", n1)
	scheduled, err := getPod(ns, "out-1")
	if err != nil {
		t.Fatal(err)
	}

	putRailNode(t, tu.MakeRailNode(n0).Rail(r0, "eth1", true).Rail(r1, "eth2", true).Obj())

	eventually(t, "replacement event", eventSeen(ns, "out", corev1.EventTypeNormal, "ReplacedUnscheduledWorkers",
		"recreating 1 unscheduled worker pods (out-0)"))
	eventually(t, "out-0 recreated without the exclusion", func() error {
		pod, err := getPod(ns, "out-0")
		if err != nil {
			return err
		}
		if pod.UID == firstUID {
			return fmt.Errorf("still the pod created during the outage")
		}
		if got := avoidedByAffinity(pod); len(got) != 0 {
			return fmt.Errorf("new out-0 still avoids %v", got)
		}
		return nil
	})
	after, err := getPod(ns, "out-1")
	if err != nil {
		t.Fatal(err)
	}
	if after.UID != scheduled.UID || after.DeletionTimestamp != nil {
		t.Errorf("scheduled worker out-1 was replaced or deleted (uid %s -> %s, deletion %v)",
			scheduled.UID, after.UID, after.DeletionTimestamp)
	}
}

package controller

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/prober"
)

// runtimePreflights is each rank's report of the runtime's start-up check (rank → report).
// Before the first collective every rank connects every rail to its peers and checks a short
// transfer; spec.failurePolicy.onPreflightFailure (NEZHA_PREFLIGHT) decides what a failing pair
// does to the start. Which pairs: runtime/README.md "Pre-flight".
type runtimePreflights map[int32]*prober.Preflight

// preflightVerdict is what the check adds to the RailsVerified condition; reason "" = nothing
// to add (no runtime reported a check yet, or every one ran with the check off).
type preflightVerdict struct {
	status  metav1.ConditionStatus
	reason  string
	message string
}

// maxPairsInMessage bounds the failing pairs a condition message lists (a Kubernetes condition
// message should stay readable; the count says how many there were).
const maxPairsInMessage = 5

func judgePreflight(reports runtimePreflights) preflightVerdict {
	var (
		reported, recovered int
		waiting, failed     bool
		total               int
		pairs               = map[string]prober.PreflightFailure{}
	)
	for _, p := range reports {
		if p.Result == prober.PreflightOff {
			continue
		}
		reported++
		switch p.Result {
		case prober.PreflightWaiting:
			waiting = true
		case prober.PreflightFailed:
			failed = true
		case prober.PreflightRecovered:
			recovered++
		}
		total = max(total, p.FailureCount)
		for _, f := range p.Failures {
			// Every rank lists every failing pair, its own with the reason: keep the reason.
			key := fmt.Sprintf("%d/%s/%d", f.Rank, f.Rail, f.Peer)
			if old, ok := pairs[key]; !ok || old.Reason == "" {
				pairs[key] = f
			}
		}
	}
	list := make([]prober.PreflightFailure, 0, len(pairs))
	for _, f := range pairs {
		list = append(list, f)
	}
	slices.SortFunc(list, func(a, b prober.PreflightFailure) int {
		return cmp.Or(cmp.Compare(a.Rank, b.Rank), strings.Compare(a.Rail, b.Rail), cmp.Compare(a.Peer, b.Peer))
	})
	total = max(total, len(list))
	switch {
	case reported == 0:
		return preflightVerdict{}
	case waiting:
		return preflightVerdict{metav1.ConditionFalse, nezhav1.ReasonPreflightWaiting,
			fmt.Sprintf("pre-flight: waiting for rail(s) %s to pass before starting: %s", railsOf(list), describePairs(list, total))}
	case failed:
		return preflightVerdict{metav1.ConditionFalse, nezhav1.ReasonPreflightFailed,
			fmt.Sprintf("pre-flight: started without rail(s) %s: %s", railsOf(list), describePairs(list, total))}
	case recovered > 0:
		return preflightVerdict{metav1.ConditionTrue, nezhav1.ReasonPreflightRecovered,
			fmt.Sprintf("pre-flight: rail(s) %s failed at start and have passed re-admission since", railsOf(list))}
	default:
		return preflightVerdict{metav1.ConditionTrue, nezhav1.ReasonPreflightPassed,
			fmt.Sprintf("pre-flight passed on %d ranks", reported)}
	}
}

func railsOf(list []prober.PreflightFailure) string {
	var rails []string
	for _, f := range list {
		if !slices.Contains(rails, f.Rail) {
			rails = append(rails, f.Rail)
		}
	}
	slices.Sort(rails)
	return strings.Join(rails, ", ")
}

// describePairs reads "rank 1 rail r1 -> rank 0 (connect: ...timed out); ... (3 failing pairs)".
func describePairs(list []prober.PreflightFailure, total int) string {
	parts := make([]string, 0, maxPairsInMessage)
	for i, f := range list {
		if i == maxPairsInMessage {
			break
		}
		peer := "a peer"
		if f.Peer >= 0 {
			peer = fmt.Sprintf("rank %d", f.Peer)
		}
		s := fmt.Sprintf("rank %d rail %s -> %s", f.Rank, f.Rail, peer)
		if f.Reason != "" {
			s += " (" + truncate(f.Reason, 160) + ")"
		}
		parts = append(parts, s)
	}
	return fmt.Sprintf("%s (%d failing pair(s))", strings.Join(parts, "; "), total)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

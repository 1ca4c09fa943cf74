package controller

// Rail steering: the operator as a controller of the job's rails, not only their observer.
//
// The runtime fails a rail over by itself when it sees the failure (carrier down, data stopped
// moving). Some failures it cannot see, or not soon: a switch port or the far end gone bad while
// the local link stays up, a rail an admin quarantined. When a node agent reports a rail down
// (or its RailNode quarantines it) and the job's runtime still uses that rail, the operator asks
// the runtime of the rank on that node to drain it (POST /rails/{rail}/drain on its control
// endpoint, authenticated with the job's control credential); the runtime agrees on it with the
// other ranks and applies it at the next operation on every rank. When every worker's node
// reports the rail up again, the operator restores it (POST .../restore) — only the rails it
// drained itself, which status.drainedRails remembers, so a human's drain is never undone.
//
// Idempotent: a drain is asked only while some rank's runtime still reports the rail healthy, and
// announced (Event RailDrained naming node, rank, rail and reason) once; a restore is asked
// until the runtime accepts it. Rate-limited: at most one request per job, rail and action per
// RailActionInterval, however often the job is reconciled.

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	configapi "github.com/nezha-project/nezha/operator/api/config/v1alpha1"
	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/builder"
	"github.com/nezha-project/nezha/operator/internal/prober"
)

// steerLimiter remembers when each (job, rail, action) was last asked.
type steerLimiter struct {
	mu   sync.Mutex
	last map[steerKey]time.Time
}

type steerKey struct {
	job      types.NamespacedName
	rail     string
	action   prober.Action
	endpoint prober.Endpoint
	// process is the process asked where the endpoint applies a request to its own process only
	// (the NCCL plugin: each process of each pod); rank jobWide where the runtime agrees it with
	// every rank.
	process workerProcess
}

// jobWide is steerKey.process.rank for endpoints that apply a request on every rank.
const jobWide = -1

// allow records an attempt at now and reports whether it may go ahead; when not, wait says how
// long until it may.
func (l *steerLimiter) allow(k steerKey, now time.Time, interval time.Duration) (ok bool, wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = map[steerKey]time.Time{}
	}
	if t, seen := l.last[k]; seen && now.Sub(t) < interval {
		return false, interval - now.Sub(t)
	}
	l.last[k] = now
	return true, 0
}

// forget drops a deleted job's entries.
func (l *steerLimiter) forget(job types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.last {
		if k.job == job {
			delete(l.last, k)
		}
	}
}

// runtimeStates is what the workers' runtimes said: rank → rail → state.
type runtimeStates map[int32]map[string]string

// anyRank reports whether some rank's runtime reports rail in state.
func (s runtimeStates) anyRank(rail, state string) bool {
	for _, states := range s {
		if states[rail] == state {
			return true
		}
	}
	return false
}

// failed is rank → rails the runtime stopped using because they failed.
func (s runtimeStates) failed() map[int32][]string {
	out := map[int32][]string{}
	for rank, states := range s {
		if f := prober.Failed(states); len(f) > 0 {
			out[rank] = f
		}
	}
	return out
}

// runtimeRecheck is how soon a job looks at its runtimes again while one of them reports a rail
// failed that the nodes' agents report up: the runtime is re-admitting it after its own
// end-to-end probe (a healed cut), or the rail is black-holed. No Kubernetes object changes when
// that ends, so only a timer brings the job's health back; each look probes every running
// worker, hence seconds, not less.
const runtimeRecheck = 5 * time.Second

// readmissionRecheck returns runtimeRecheck while some runtime reports a rail failed that every
// node of the job reports up, else 0.
func readmissionRecheck(health railHealth, states runtimeStates) time.Duration {
	for _, rails := range states.failed() {
		for _, rail := range rails {
			if health.agentSaysUp(rail) {
				return runtimeRecheck
			}
		}
	}
	return 0
}

// steerRails drains and restores the job's rails as described above, on every control endpoint
// the job's workers serve (steer_targets.go says which processes each is asked through; silent
// lists the processes that did not answer). It updates st.status.DrainedRails, queues action
// Events, and returns when to look again (0: no need).
func (r *MultiRailJobReconciler) steerRails(ctx context.Context, job *nezhav1.MultiRailJob, obs observation,
	health railHealth, states endpointStates, silent []unansweredProcess, st *statusUpdate) time.Duration {
	drained := map[string]nezhav1.DrainedRail{}
	for _, d := range st.status.DrainedRails {
		if slices.Contains(job.Spec.Rails, d.Rail) {
			drained[d.Rail] = d
		}
	}
	defer func() { st.status.DrainedRails = sortedDrained(drained) }()
	if r.Prober == nil || !r.SteerRails || !states.anyAnswered() {
		return 0 // no endpoint answered: nothing to steer, and nothing learned
	}
	s := &steering{r: r, ctx: ctx, job: job, st: st}
	for _, rail := range job.Spec.Rails {
		pair, down := firstAgentDown(health, rail)
		switch {
		case down:
			for _, ep := range controlEndpoints(job) {
				s.nameSilent(silent, ep, rail, prober.Drain, func(pod *corev1.Pod) bool {
					_, down := health.agentDownOn(rail, pod.Spec.NodeName)
					return down
				})
				first, ok := s.ask(drainTargets(ep, obs, health, states[ep], rail, pair.node), ep, rail, prober.Drain)
				if !ok {
					continue
				}
				if _, known := drained[rail]; !known {
					// Named by the first process asked: the plugin's may be on another node whose
					// agent reports the rail down than the first such node.
					node := first.pod.Spec.NodeName
					why, _ := health.agentDownOn(rail, node)
					drained[rail] = nezhav1.DrainedRail{Rail: rail, Node: node, Rank: first.rank, Reason: why, Time: st.now}
					st.actionEvent(warning, nezhav1.ReasonRailDrained, fmt.Sprintf(
						"draining rail %q: %s; rank %d's %s on node %q accepted the drain and applies it %s",
						rail, why, first.rank, processNoun(ep, first.local), node, drainScope(ep)))
				}
				// Applied at the next operation: look again to see it done.
				s.recheck = earliest(s.recheck, r.railActionInterval())
			}
		case health.agentSaysUp(rail):
			d, ours := drained[rail]
			if !ours {
				continue
			}
			restored, rank := true, int32(-1)
			var nouns []string
			for _, ep := range controlEndpoints(job) {
				targets := restoreTargets(ep, obs, states[ep], rail, d.Node)
				first, ok := s.ask(targets, ep, rail, prober.Restore)
				// A silent process may still have the rail drained: the drain stays on record
				// (and the restore pending) until it answers.
				quiet := s.nameSilent(silent, ep, rail, prober.Restore, func(*corev1.Pod) bool { return true })
				switch {
				case quiet:
					restored = false
				case ok:
					rank = first.rank
					nouns = append(nouns, processNoun(ep, first.local))
				case len(targets) > 0 || ep.AgreedAcrossRanks() || len(states[ep]) == 0:
					// Not accepted yet, or no worker to ask, or no answer to go by: retried. The
					// plugin's case with answers and no target is a job whose processes report
					// the rail in use already.
					restored = false
				}
			}
			if !restored {
				continue
			}
			delete(drained, rail)
			msg := fmt.Sprintf("restoring rail %q: every worker's node reports it up again", rail)
			if rank >= 0 {
				msg += fmt.Sprintf("; rank %d's %s accepted the restore", rank, strings.Join(nouns, " and "))
			}
			st.actionEvent(normal, nezhav1.ReasonRailRestored, msg)
		}
	}
	return s.recheck
}

// steering is one reconcile's rail actions: the job, its credential (read once, when first
// needed) and when to look again.
type steering struct {
	r       *MultiRailJobReconciler
	ctx     context.Context
	job     *nezhav1.MultiRailJob
	st      *statusUpdate
	recheck time.Duration

	credential string
	credErr    error
	credLoaded bool
}

func (s *steering) cred() (string, error) {
	if !s.credLoaded {
		s.credential, s.credErr = s.r.controlCredential(s.ctx, s.job)
		s.credLoaded = true
	}
	return s.credential, s.credErr
}

// ask sends action to every target and reports whether all of them accepted (and the first
// target, the lowest rank); false when there was no target, or one was refused or rate-limited
// (retried later).
func (s *steering) ask(targets []steerTarget, ep prober.Endpoint, rail string, action prober.Action) (steerTarget, bool) {
	if len(targets) == 0 {
		return steerTarget{}, false
	}
	all := true
	for _, t := range targets {
		wait, err := s.r.askRuntime(s.ctx, s.job, t, ep, rail, action, s.cred, s.st)
		s.recheck = earliest(s.recheck, wait)
		all = all && err == nil && wait == 0
	}
	return targets[0], all
}

// nameSilent announces, rate-limited like a request to it, each running process of endpoint ep
// that did not answer on a pod concerned by the action: it cannot be asked, so it may keep using
// (or keep drained) the rail. Reports whether there was one.
func (s *steering) nameSilent(silent []unansweredProcess, ep prober.Endpoint, rail string, action prober.Action,
	concerned func(*corev1.Pod) bool) bool {
	found := false
	for _, u := range silent {
		if u.endpoint != ep || u.pod.Status.Phase != corev1.PodRunning || !concerned(u.pod) {
			continue
		}
		found = true
		key := steerKey{types.NamespacedName{Namespace: s.job.Namespace, Name: s.job.Name}, rail, action, ep, u.workerProcess}
		if ok, wait := s.r.steering.allow(key, s.st.now.Time, s.r.railActionInterval()); !ok {
			s.recheck = earliest(s.recheck, wait)
			continue
		}
		s.recheck = earliest(s.recheck, s.r.railActionInterval())
		log.FromContext(s.ctx).Info("rail action impossible: process did not answer", "action", action, "rail", rail,
			"pod", u.pod.Name, "process", u.local, "err", u.err)
		s.st.actionEvent(warning, nezhav1.ReasonRailActionFailed, fmt.Sprintf("could not %s rail %q through pod %s (%s): %v",
			action, rail, u.pod.Name, processNoun(ep, u.local), u.err))
	}
	return found
}

// askRuntime sends one rate-limited drain or restore to endpoint ep of target. wait > 0: not
// sent or refused; look again then.
func (r *MultiRailJobReconciler) askRuntime(ctx context.Context, job *nezhav1.MultiRailJob, target steerTarget,
	ep prober.Endpoint, rail string, action prober.Action, cred func() (string, error), st *statusUpdate) (time.Duration, error) {
	key := steerKey{types.NamespacedName{Namespace: job.Namespace, Name: job.Name}, rail, action, ep, target.limited(ep)}
	if ok, wait := r.steering.allow(key, st.now.Time, r.railActionInterval()); !ok {
		return wait, nil
	}
	credential, err := cred()
	if err == nil {
		err = r.Prober.SetRail(ctx, target.pod, ep, target.local, rail, action, credential)
	}
	if err != nil {
		railActions.WithLabelValues(string(action), "error", string(ep)).Inc()
		log.FromContext(ctx).Info("rail action failed", "action", action, "rail", rail, "pod", target.pod.Name, "endpoint", ep,
			"process", target.local, "err", err)
		st.actionEvent(warning, nezhav1.ReasonRailActionFailed, fmt.Sprintf("could not %s rail %q through pod %s (%s): %v",
			action, rail, target.pod.Name, processNoun(ep, target.local), err))
		return r.railActionInterval(), err // try again then
	}
	railActions.WithLabelValues(string(action), "accepted", string(ep)).Inc()
	return 0, nil
}

// controlCredential derives the job's control credential from its token Secret, read uncached.
func (r *MultiRailJobReconciler) controlCredential(ctx context.Context, job *nezhav1.MultiRailJob) (string, error) {
	var secret corev1.Secret
	key := types.NamespacedName{Namespace: job.Namespace, Name: builder.SecretName(job.Name)}
	if err := r.APIReader.Get(ctx, key, &secret); err != nil {
		return "", fmt.Errorf("read the job's token Secret %s: %w", key.Name, err)
	}
	if !metav1.IsControlledBy(&secret, job) {
		return "", fmt.Errorf("Secret %s is not the job's own (no controller reference to it)", key.Name)
	}
	token := secret.Data[nezhav1.JobTokenKey]
	if len(token) == 0 {
		return "", fmt.Errorf("Secret %s has no %q key", key.Name, nezhav1.JobTokenKey)
	}
	return prober.ControlCredential(token), nil
}

func (r *MultiRailJobReconciler) railActionInterval() time.Duration {
	if r.RailActionInterval > 0 {
		return r.RailActionInterval
	}
	return configapi.DefaultRailActionInterval
}

// firstAgentDown returns the first (by node name) node whose agent reports rail down.
func firstAgentDown(h railHealth, rail string) (railPair, bool) {
	var best railPair
	found := false
	for p := range h.agentDown {
		if p.rail == rail && (!found || p.node < best.node) {
			best, found = p, true
		}
	}
	return best, found
}

func sortedDrained(m map[string]nezhav1.DrainedRail) []nezhav1.DrainedRail {
	if len(m) == 0 {
		return nil
	}
	out := make([]nezhav1.DrainedRail, 0, len(m))
	for _, d := range m {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rail < out[j].Rail })
	return out
}

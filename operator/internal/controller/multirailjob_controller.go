// Package controller reconciles MultiRailJobs: it puts each job's rails (Multus networks, SR-IOV
// devices) and runtime contract into its worker pods or PyTorchJob, and reports from reality
// (pods, Multus network-status, RailNodes, the runtime) whether the rails work.
package controller

import (
	"context"
	"fmt"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlbuilder "sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/builder"
	"github.com/nezha-project/nezha/operator/internal/prober"
)

// conflictRetry is how soon a job is retried after its status write lost a race.
const conflictRetry = 200 * time.Millisecond

// Field indexes, so a RailClass or RailNode event finds its jobs without a scan: RailClass →
// jobs by spec.rails; RailNode → the job's worker pods on that node (pods not yet scheduled
// under unscheduledNode).
const (
	indexRails   = "spec.rails"
	indexPodNode = "spec.nodeName"
	// unscheduledNode is the pod node index's value for pods without a node (no node has it:
	// node names are DNS subdomains).
	unscheduledNode = "<unscheduled>"
)

// maxFailoverEvents bounds the Events one reconcile emits per failover action; a rail lost on
// hundreds of nodes at once gets one more Event counting the rest (status.rails lists them).
const maxFailoverEvents = 5

// MultiRailJobReconciler reconciles MultiRailJobs.
type MultiRailJobReconciler struct {
	client.Client
	// APIReader reads objects the operator must not cache (Secrets).
	APIReader client.Reader
	Recorder  record.EventRecorder
	Clock     clock.PassiveClock
	// RuntimeImage is copied into workers whose image lacks the runtime (configuration runtime.image).
	RuntimeImage string
	// PyTorchJobEnabled is true when the kubeflow.org/v1 PyTorchJob CRD exists.
	PyTorchJobEnabled bool
	// Prober asks running workers' runtimes about failed rails; nil disables it.
	Prober RuntimeProber
	// RailNodeStaleAfter is how old a RailNode's observedTime may be before its agent is presumed
	// gone and its rails unknown (railnode_staleness.go); zero trusts every RailNode.
	RailNodeStaleAfter time.Duration
	// NetworkPolicy, when set, gives every job a NetworkPolicy isolating its workers (the job's
	// own pods; the operator and monitoring only on the runtime's control ports).
	NetworkPolicy *builder.NetworkPolicyOptions
	// SteerRails lets the operator drain and restore rails through the runtime's control
	// endpoint (rail_steering.go); needs Prober.
	SteerRails bool
	// RailActionInterval is how often, at most, one rail of one job is drained or restored
	// through the runtime's control endpoint (zero: the configuration's default).
	RailActionInterval time.Duration
	// PodEventBatch gathers a job's pod events this long before reconciling it (pod_events.go);
	// zero reconciles on every event.
	PodEventBatch time.Duration
	// CreateParallelism bounds one job's concurrent pod creations (zero: the configuration's
	// default).
	CreateParallelism int

	phases   phaseTracker
	steering steerLimiter
	down     downMemory
}

// +kubebuilder:rbac:groups=nezha.io,resources=multirailjobs,verbs=get;list;watch
// +kubebuilder:rbac:groups=nezha.io,resources=multirailjobs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=nezha.io,resources=railclasses;railnodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",resources=nodes;namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=k8s.cni.cncf.io,resources=network-attachment-definitions,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=kubeflow.org,resources=pytorchjobs,verbs=get;list;watch;create

// Reconcile fetches the job, computes its children and status in reconcile, writes the status
// once and only then emits the queued Events.
func (r *MultiRailJobReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	start := time.Now()
	defer func() { reconcileDuration.Observe(time.Since(start).Seconds()) }()

	job := &nezhav1.MultiRailJob{}
	if err := r.Get(ctx, req.NamespacedName, job); err != nil {
		if apierrors.IsNotFound(err) {
			r.phases.forget(req.NamespacedName)
			r.steering.forget(req.NamespacedName)
			r.down.forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !job.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // owner references take the children with it
	}
	if finished(&job.Status) {
		r.phases.set(req.NamespacedName, job.Status.Phase)
		r.down.forget(req.NamespacedName)
		return ctrl.Result{}, nil
	}

	st := &statusUpdate{status: job.Status.DeepCopy(), generation: job.Generation, now: metav1.NewTime(r.Clock.Now()),
		prevDown: r.down.get(req.NamespacedName, &job.Status)}
	result, err := r.reconcile(ctx, job, st)
	for _, e := range st.actionEvents {
		r.Recorder.Event(job, e.eventType, e.reason, e.message)
	}
	if werr := r.writeStatus(ctx, job, st); werr != nil {
		if apierrors.IsConflict(werr) {
			// Our cached copy is older than the job (often our own previous write): retry on a
			// fresh copy soon, without an error in the log. No Events: nothing was written.
			log.FromContext(ctx).V(1).Info("status conflict, retrying", "err", werr)
			return ctrl.Result{RequeueAfter: conflictRetry}, nil
		}
		return ctrl.Result{}, werr
	}
	for _, e := range st.events {
		r.Recorder.Event(job, e.eventType, e.reason, e.message)
	}
	if st.down != nil {
		r.down.set(req.NamespacedName, st.down)
	}
	r.phases.set(req.NamespacedName, st.status.Phase)
	return result, err
}

func (r *MultiRailJobReconciler) writeStatus(ctx context.Context, job *nezhav1.MultiRailJob, st *statusUpdate) error {
	st.status.ObservedGeneration = job.Generation
	if equality.Semantic.DeepEqual(&job.Status, st.status) {
		return nil
	}
	// A patch (not an update) sends only the status: an update would echo the whole spec back,
	// and the API server warns about fields like template.metadata.creationTimestamp. The
	// optimistic lock keeps the conflict semantics of an update (stale cache → retry).
	patch := client.MergeFromWithOptions(job.DeepCopy(), client.MergeFromWithOptimisticLock{})
	job.Status = *st.status
	if err := r.Status().Patch(ctx, job, patch); err != nil {
		return fmt.Errorf("update status: %w", err)
	}
	return nil
}

// reconcile does the work for one job: rails, children, observation, health, policy, phase.
func (r *MultiRailJobReconciler) reconcile(ctx context.Context, job *nezhav1.MultiRailJob, st *statusUpdate) (ctrl.Result, error) {
	var result ctrl.Result
	var desired int32
	if job.Spec.Workers != nil {
		desired = job.Spec.Workers.Replicas
	} else if job.Spec.PyTorchJob != nil {
		desired = pyTorchWorldSize(job.Spec.PyTorchJob)
	}
	st.status.Workers = desired

	rr, err := r.resolveRails(ctx, job, st)
	if err != nil {
		return result, err
	}
	result.RequeueAfter = rr.retry

	// RailNodes and pods are read straight from the cache, without the copy a List makes by
	// default (500 nodes and 10,000 pods per reconcile of a big job): reconcile only reads them.
	var railNodes nezhav1.RailNodeList
	if err := r.List(ctx, &railNodes, client.UnsafeDisableDeepCopy); err != nil {
		return result, err
	}
	avoid := nodesToAvoid(railNodes.Items, job.Spec.Rails)

	pods, err := r.listPods(ctx, job)
	if err != nil {
		return result, err
	}
	// Without resolved rails the workers' rail entries still carry the rail names, so health can
	// be judged for running workers even while a RailClass is missing.
	railNames := job.Spec.Rails
	obsRails := rr.rails
	if !rr.ready {
		obsRails = namesOnly(railNames)
	}
	obs := observePods(pods, obsRails)

	var ptj *kubeflowv1.PyTorchJob
	switch {
	case !rr.ready:
		// Workers that already run (a RailClass deleted later) keep running; only new ones wait.
		if len(obs.pods) == 0 {
			st.setCondition(nezhav1.ConditionWorkersCreated, metav1.ConditionFalse, nezhav1.ReasonWaitingForNetworks,
				"waiting for NetworksReady", "")
		}
	case job.Spec.Workers != nil:
		// A Service or NetworkPolicy of the job's name that someone else made stops new workers
		// (createOrGetOwn sets the condition naming it); those objects are never taken over.
		ok, err := r.ensureNetworkPolicy(ctx, job, st)
		if ok && err == nil {
			ok, err = r.ensureService(ctx, job, st)
		}
		if err != nil {
			return result, err
		}
		if ok {
			if err := r.ensureWorkers(ctx, job, rr.rails, obs, avoid, st); err != nil {
				return result, err
			}
		}
	default:
		ok, err := r.ensureNetworkPolicy(ctx, job, st)
		if err != nil {
			return result, err
		}
		if ok {
			if ptj, err = r.ensurePyTorchJob(ctx, job, rr.rails, avoid, st); err != nil {
				return result, err
			}
		}
	}

	states, silent, preflights := r.probeRuntimes(ctx, job, obs)
	// Only the runtime reports rails failed; the NCCL plugin reports drained or in use
	// (internal/prober/endpoint.go).
	runtime := states[prober.RuntimeEndpoint].byRank()
	if rr.ready {
		// Attachments can only be checked against networks that are known.
		setRailsVerified(obs, desired, preflights, st)
	}

	nodes := map[string]*nezhav1.RailNode{}
	for i := range railNodes.Items {
		nodes[railNodes.Items[i].Name] = &railNodes.Items[i]
	}
	prevDown := st.prevDown
	health := assessRailHealth(obs.workers, railNames, nodes, runtime.failed(), prevDown,
		freshness{now: st.now.Time, staleAfter: r.RailNodeStaleAfter})
	result.RequeueAfter = earliest(result.RequeueAfter, health.recheck)
	result.RequeueAfter = earliest(result.RequeueAfter, readmissionRecheck(health, runtime))
	result.RequeueAfter = earliest(result.RequeueAfter, r.steerRails(ctx, job, obs, health, states, silent, st))
	placed := map[string]bool{}
	for _, w := range obs.workers {
		placed[w.NodeName] = true
	}
	recs := failoverRecords(prevDown, health.down, placed, st.now)
	emitFailoverEvents(recs, st)
	st.status.FailoverHistory = appendHistory(st.status.FailoverHistory, recs)
	st.down = health.down
	summarizeWorkers(obs, railNames, health, rr.ready, st.status)
	setRailsHealthy(health, st)

	if ptj != nil {
		mirrorPyTorchJob(ptj, st)
	} else if job.Spec.Workers != nil {
		applyWorkerCompletion(obs, desired, st)
	}
	if restart := applyRailLossPolicy(job, health, st); restart && !finished(st.status) {
		if err := r.restartWorkers(ctx, obs, st, st.reasonMessage(nezhav1.ConditionDegraded)); err != nil {
			return result, err
		}
	}

	st.status.ReadyWorkers = obs.ready
	st.status.WorkersReady = fmt.Sprintf("%d/%d", obs.ready, desired)
	st.status.HealthyRails = health.healthy
	st.status.RailsHealthy = fmt.Sprintf("%d/%d", health.healthy, len(railNames))
	st.status.Phase = computePhase(st, desired, obs.running)
	if finished(st.status) && st.status.CompletionTime == nil {
		st.status.CompletionTime = &st.now
	}
	return result, nil
}

// setRailsVerified reports whether every running worker has an interface on every rail and, once
// the runtimes report it, whether every rail passed their start-up check (preflight.go).
func setRailsVerified(obs observation, desired int32, preflights runtimePreflights, st *statusUpdate) {
	switch {
	case len(obs.badStatus) > 0:
		st.setCondition(nezhav1.ConditionRailsVerified, metav1.ConditionFalse, nezhav1.ReasonInvalidNetworkStatus, joinBounded(obs.badStatus, 5), warning)
	case len(obs.unattached) > 0:
		st.setCondition(nezhav1.ConditionRailsVerified, metav1.ConditionFalse, nezhav1.ReasonRailInterfaceMissing, joinBounded(obs.unattached, 5), warning)
	case obs.running == 0 || obs.running < desired:
		st.setCondition(nezhav1.ConditionRailsVerified, metav1.ConditionUnknown, nezhav1.ReasonWaitingForWorkers,
			fmt.Sprintf("%d of %d workers running", obs.running, desired), "")
	default:
		attached := fmt.Sprintf("all %d running workers have an interface on every rail", obs.running)
		if v := judgePreflight(preflights); v.reason != "" {
			eventType := normal
			if v.status != metav1.ConditionTrue {
				eventType = warning
			}
			st.setCondition(nezhav1.ConditionRailsVerified, v.status, v.reason, attached+"; "+v.message, eventType)
			return
		}
		st.setCondition(nezhav1.ConditionRailsVerified, metav1.ConditionTrue, nezhav1.ReasonAllRailsAttached, attached, normal)
	}
}

func (s *statusUpdate) reasonMessage(condType string) string {
	for _, c := range s.status.Conditions {
		if c.Type == condType {
			return c.Message
		}
	}
	return ""
}

func namesOnly(names []string) []builder.Rail {
	rails := make([]builder.Rail, len(names))
	for i, n := range names {
		rails[i] = builder.Rail{Name: n, Interface: builder.InterfaceName(i)}
	}
	return rails
}

// listPods returns the job's worker pods (worker_identity.go) as the cache holds them: read-only (deleting one is fine, the
// client does not write into the object it deletes).
func (r *MultiRailJobReconciler) listPods(ctx context.Context, job *nezhav1.MultiRailJob) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{nezhav1.JobNameLabel: job.Name},
		client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	controllers, err := r.workerControllers(ctx, job)
	if err != nil {
		return nil, err
	}
	return onlyWorkers(pods.Items, controllers), nil
}

// SetupWithManager registers the controller, its indexes and watches.
func (r *MultiRailJobReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &nezhav1.MultiRailJob{}, indexRails, func(o client.Object) []string {
		return o.(*nezhav1.MultiRailJob).Spec.Rails
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &corev1.Pod{}, indexPodNode, func(o client.Object) []string {
		if n := o.(*corev1.Pod).Spec.NodeName; n != "" {
			return []string{n}
		}
		return []string{unscheduledNode}
	}); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		// The job's own status writes do not wake it again (reconcile computed that status);
		// spec, label and annotation changes and deletion do.
		For(&nezhav1.MultiRailJob{}, ctrlbuilder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{},
			predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Owns(&corev1.Service{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Owns(&nadv1.NetworkAttachmentDefinition{}).
		// PyTorchJob pods are owned by the PyTorchJob, so pods map to jobs by label.
		Watches(&corev1.Pod{}, podEventsToJob(r.PodEventBatch)).
		Watches(&nezhav1.RailClass{}, handler.EnqueueRequestsFromMapFunc(r.jobsByIndex(indexRails))).
		Watches(&nezhav1.RailNode{}, handler.EnqueueRequestsFromMapFunc(r.jobsOnNode),
			ctrlbuilder.WithPredicates(railNodeMatters(r.RailNodeStaleAfter, r.Clock)))
	if r.PyTorchJobEnabled {
		b = b.Owns(&kubeflowv1.PyTorchJob{})
	}
	return b.Named("multirailjob").Complete(r)
}

func podToJob(_ context.Context, o client.Object) []reconcile.Request {
	name, ok := o.GetLabels()[nezhav1.JobNameLabel]
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}

// emitFailoverEvents queues one Event per rail lost or recovered, at most maxFailoverEvents of
// each, then one counting the rest: a rail switch failing under 500 nodes is one story, not 500
// Events per reconcile.
func emitFailoverEvents(recs []nezhav1.FailoverRecord, st *statusUpdate) {
	lost, recovered := 0, 0
	for _, rec := range recs {
		railFailovers.WithLabelValues(string(rec.Action)).Inc()
		if rec.Action == nezhav1.FailoverRailLost {
			if lost++; lost <= maxFailoverEvents {
				st.event(warning, nezhav1.ReasonRailLost, rec.Message)
			}
		} else if recovered++; recovered <= maxFailoverEvents {
			st.event(normal, nezhav1.ReasonRailRecovered, rec.Message)
		}
	}
	if n := lost - maxFailoverEvents; n > 0 {
		st.event(warning, nezhav1.ReasonRailLost, fmt.Sprintf("and %d more (rail, node) pairs lost (status.rails lists the nodes)", n))
	}
	if n := recovered - maxFailoverEvents; n > 0 {
		st.event(normal, nezhav1.ReasonRailRecovered, fmt.Sprintf("and %d more (rail, node) pairs recovered", n))
	}
}

// jobsOnNode maps a RailNode event to the jobs with a worker on that node, and to every job with
// a worker not yet scheduled: the set of nodes to avoid may have changed for it
// (replaceStaleUnscheduled). Both come from the cached worker pods' node index, so a RailNode
// heartbeat costs a lookup of the pods on one node, not a scan of every worker.
func (r *MultiRailJobReconciler) jobsOnNode(ctx context.Context, o client.Object) []reconcile.Request {
	seen := map[types.NamespacedName]bool{}
	var reqs []reconcile.Request
	for _, node := range []string{o.GetName(), unscheduledNode} {
		var list corev1.PodList
		if err := r.List(ctx, &list, client.MatchingFields{indexPodNode: node}, client.UnsafeDisableDeepCopy); err != nil {
			log.FromContext(ctx).Error(err, "list worker pods on node", "node", node)
			return nil
		}
		for i := range list.Items {
			p := &list.Items[i]
			name, ok := p.Labels[nezhav1.JobNameLabel]
			if !ok || (node == unscheduledNode && p.DeletionTimestamp != nil) {
				continue
			}
			key := types.NamespacedName{Namespace: p.Namespace, Name: name}
			if !seen[key] {
				seen[key] = true
				reqs = append(reqs, reconcile.Request{NamespacedName: key})
			}
		}
	}
	return reqs
}

// jobsByIndex maps a cluster-scoped object (RailClass, RailNode) to the jobs whose index field
// contains its name.
func (r *MultiRailJobReconciler) jobsByIndex(field string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var jobs nezhav1.MultiRailJobList
		if err := r.List(ctx, &jobs, client.MatchingFields{field: o.GetName()}); err != nil {
			log.FromContext(ctx).Error(err, "list jobs by index", "field", field, "name", o.GetName())
			return nil
		}
		reqs := make([]reconcile.Request, len(jobs.Items))
		for i := range jobs.Items {
			reqs[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&jobs.Items[i])}
		}
		return reqs
	}
}

package v1alpha1

// Condition types, condition reasons and Event reasons of Nezha's objects. They live in the API
// package, not in the controller, because they are part of the API: users alert on them and
// clients match them, so their string values never change. Each condition reason is also the
// reason of the Event the operator emits when the condition takes it.

// Condition types of a MultiRailJob (status.conditions, metav1.Condition).
const (
	// ConditionNetworksReady: every rail's RailClass exists and its NetworkAttachmentDefinition is
	// in place (and its SR-IOV resource is advertised by some node).
	ConditionNetworksReady = "NetworksReady"
	// ConditionWorkersCreated: every worker pod (or the PyTorchJob) exists.
	ConditionWorkersCreated = "WorkersCreated"
	// ConditionRailsVerified: every running worker reports an interface on every rail in its
	// Multus network-status, and the runtimes' start-up check of every rail passed.
	ConditionRailsVerified = "RailsVerified"
	// ConditionRailsHealthy: no worker's node reports one of the job's rails down.
	ConditionRailsHealthy = "RailsHealthy"
	// ConditionDegraded: the job runs on fewer rails than it asked for.
	ConditionDegraded = "Degraded"
	// ConditionSucceeded: all workers (or the PyTorchJob) completed successfully.
	ConditionSucceeded = "Succeeded"
	// ConditionFailed: a worker (or the PyTorchJob) failed, or rail loss broke the failure policy.
	ConditionFailed = "Failed"
)

// Reasons of the NetworksReady condition.
const (
	// ReasonNetworksReady: every rail's network is in place (status True).
	ReasonNetworksReady = "NetworksReady"
	// ReasonRailClassNotFound: a RailClass named in spec.rails does not exist.
	ReasonRailClassNotFound = "RailClassNotFound"
	// ReasonInvalidRailClass: a RailClass cannot be turned into a network.
	ReasonInvalidRailClass = "InvalidRailClass"
	// ReasonNetworkAttachmentNotFound: a RailClass's nadRef names a missing
	// NetworkAttachmentDefinition.
	ReasonNetworkAttachmentNotFound = "NetworkAttachmentNotFound"
	// ReasonNetworkAttachmentConflict: a NetworkAttachmentDefinition the operator would own
	// exists and belongs to someone else.
	ReasonNetworkAttachmentConflict = "NetworkAttachmentConflict"
	// ReasonSRIOVResourceUnavailable: no node advertises a rail's SR-IOV resource.
	ReasonSRIOVResourceUnavailable = "SRIOVResourceUnavailable"
	// ReasonRailClassNotAllowed: a RailClass's spec.allowedNamespaces does not select the job's
	// namespace (docs/security.md "Tenant model").
	ReasonRailClassNotAllowed = "RailClassNotAllowed"
)

// Reasons of the WorkersCreated condition.
const (
	// ReasonWaitingForNetworks: workers wait until NetworksReady is True.
	ReasonWaitingForNetworks = "WaitingForNetworks"
	// ReasonAllWorkersCreated: every worker pod exists (status True).
	ReasonAllWorkersCreated = "AllWorkersCreated"
	// ReasonCreatingWorkers: some worker pods are still to be created, or their creation failed.
	ReasonCreatingWorkers = "CreatingWorkers"
	// ReasonInvalidWorkerSpec: the worker template (or PyTorchJob spec) cannot be built.
	ReasonInvalidWorkerSpec = "InvalidWorkerSpec"
	// ReasonSecretConflict: the job's token Secret exists and is not the job's own.
	ReasonSecretConflict = "SecretConflict"
	// ReasonServiceConflict: a Service with the job's name exists and is not the job's own
	// (no controller reference to the job); the operator never takes it over.
	ReasonServiceConflict = "ServiceConflict"
	// ReasonNetworkPolicyConflict: a NetworkPolicy with the job's policy name exists and is not
	// the job's own; the operator never takes it over, and starts no workers unprotected.
	ReasonNetworkPolicyConflict = "NetworkPolicyConflict"
	// ReasonPyTorchJobCRDMissing: spec.pytorchJob is set but the cluster has no PyTorchJob CRD.
	ReasonPyTorchJobCRDMissing = "PyTorchJobCRDMissing"
	// ReasonPyTorchJobCreated: the PyTorchJob exists (status True).
	ReasonPyTorchJobCreated = "PyTorchJobCreated"
)

// Reasons of the RailsVerified condition.
const (
	// ReasonWaitingForWorkers: no worker runs yet (also used by RailsHealthy).
	ReasonWaitingForWorkers = "WaitingForWorkers"
	// ReasonAllRailsAttached: every running worker has an interface on every rail (status True).
	ReasonAllRailsAttached = "AllRailsAttached"
	// ReasonRailInterfaceMissing: a running worker lacks an interface on some rail.
	ReasonRailInterfaceMissing = "RailInterfaceMissing"
	// ReasonInvalidNetworkStatus: a worker's Multus network-status annotation cannot be read.
	ReasonInvalidNetworkStatus = "InvalidNetworkStatus"
	// ReasonPreflightPassed: the runtimes' start-up check passed on every rail (status True).
	ReasonPreflightPassed = "PreflightPassed"
	// ReasonPreflightFailed: a rail failed the runtimes' start-up check.
	ReasonPreflightFailed = "PreflightFailed"
	// ReasonPreflightWaiting: the runtimes hold the start until every rail passes
	// (onPreflightFailure: Wait).
	ReasonPreflightWaiting = "PreflightWaiting"
	// ReasonPreflightRecovered: a rail that failed the start-up check passed later (status True).
	ReasonPreflightRecovered = "PreflightRecovered"
)

// Reasons of the RailsHealthy and Degraded conditions.
const (
	// ReasonAllRailsUp: every rail is up under every worker (RailsHealthy True, Degraded False).
	ReasonAllRailsUp = "AllRailsUp"
	// ReasonRailDown: a worker's node reports a rail down or quarantined, or its runtime reports
	// the rail failed.
	ReasonRailDown = "RailDown"
	// ReasonRailNodeNotReported: a worker's node has no RailNode (status Unknown).
	ReasonRailNodeNotReported = "RailNodeNotReported"
	// ReasonAgentStale: a worker's node's rail agent stopped refreshing its RailNode (status
	// Unknown).
	ReasonAgentStale = "AgentStale"
	// ReasonBelowMinHealthyRails: fewer rails are healthy than failurePolicy.minHealthyRails
	// (Degraded True).
	ReasonBelowMinHealthyRails = "BelowMinHealthyRails"
)

// Reasons of the Succeeded and Failed conditions.
const (
	// ReasonAllWorkersSucceeded: every worker completed successfully (Succeeded True).
	ReasonAllWorkersSucceeded = "AllWorkersSucceeded"
	// ReasonWorkerFailed: a worker failed (Failed True).
	ReasonWorkerFailed = "WorkerFailed"
	// ReasonPyTorchJobSucceeded: the PyTorchJob succeeded (Succeeded True).
	ReasonPyTorchJobSucceeded = "PyTorchJobSucceeded"
	// ReasonPyTorchJobFailed: the PyTorchJob failed (Failed True).
	ReasonPyTorchJobFailed = "PyTorchJobFailed"
)

// Reasons of Events on a MultiRailJob that no condition carries.
const (
	// ReasonCreatedWorkers: worker pods were created.
	ReasonCreatedWorkers = "CreatedWorkers"
	// ReasonReplacedUnscheduledWorkers: unscheduled workers were recreated because the nodes to
	// avoid changed (node affinity is immutable).
	ReasonReplacedUnscheduledWorkers = "ReplacedUnscheduledWorkers"
	// ReasonRestartedWorkers: the workers were deleted to restart them (onRailLoss: Restart).
	ReasonRestartedWorkers = "RestartedWorkers"
	// ReasonRailLost: a (rail, node) pair under the job went down.
	ReasonRailLost = "RailLost"
	// ReasonRailRecovered: a (rail, node) pair under the job came back up.
	ReasonRailRecovered = "RailRecovered"
	// ReasonRailDrained: the operator drained a rail through the runtime's control endpoint
	// (operator/README.md "Rail steering").
	ReasonRailDrained = "RailDrained"
	// ReasonRailRestored: the operator restored a rail it had drained.
	ReasonRailRestored = "RailRestored"
	// ReasonRailActionFailed: a drain or restore request was refused or failed.
	ReasonRailActionFailed = "RailActionFailed"
)

// Reasons of Events on a RailNode: quarantine by evidence (operator/README.md "Quarantine").
const (
	// ReasonRailQuarantined: the operator put a rail that failed too often into
	// spec.quarantinedRails.
	ReasonRailQuarantined = "RailQuarantined"
	// ReasonRailReleased: a quarantined rail was released (after a stable period, or by an
	// administrator removing it from the spec).
	ReasonRailReleased = "RailReleased"
	// ReasonInvalidRailEvidence: the failure record annotation could not be read; the operator
	// starts a new record.
	ReasonInvalidRailEvidence = "InvalidRailEvidence"
)

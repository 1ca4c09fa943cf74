package v1alpha1

// Labels and annotations Nezha sets or reads. Child objects of a job carry JobNameLabel so they
// can be listed per job; workers also carry their rank.
const (
	// JobNameLabel is set on every object the operator creates for a MultiRailJob (Secret,
	// Service, NetworkAttachmentDefinitions, worker pods, PyTorchJob); value: the job's name.
	JobNameLabel = "nezha.io/job-name"

	// RankLabel is set on worker pods; value: the worker's rank as a decimal string.
	RankLabel = "nezha.io/rank"

	// RailLabel is set on NetworkAttachmentDefinitions the operator creates; value: RailClass name.
	RailLabel = "nezha.io/rail"

	// ManagedByLabel marks objects the operator owns; value: ManagedByValue.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "nezha-operator"

	// InjectRuntimeAnnotation on a MultiRailJob, with value "true", is the same as
	// spec.runtime.injectRuntime: the workers get libnezha from the operator's runtime image.
	InjectRuntimeAnnotation = "nezha.io/inject-runtime"

	// RailsAnnotation on worker pods records the rails in order as "name=iface:transport,...",
	// the same string as NEZHA_RAILS, so tools can read a pod's rails without parsing env.
	RailsAnnotation = "nezha.io/rails"

	// TemplateHashAnnotation on worker pods is a hash of everything the operator injected, so a
	// change of RailClass shows which pods were built from an older version.
	TemplateHashAnnotation = "nezha.io/template-hash"
)

// Pod interface names: rail i of spec.rails is "nz<i>" in every worker, well under the 15-byte
// Linux limit and independent of RailClass names.
const RailInterfacePrefix = "nz"

// The runtime contract: environment every worker container gets. The runtime (libnezha) reads
// these; runtime/README.md documents them on its side.
const (
	// EnvRails lists the rails as "name=iface:transport,..." in spec.rails order.
	EnvRails = "NEZHA_RAILS"
	// EnvRank is the worker's rank (PyTorchJob mode: the runtime falls back to RANK).
	EnvRank = "NEZHA_RANK"
	// EnvWorldSize is the number of workers (PyTorchJob mode: falls back to WORLD_SIZE).
	EnvWorldSize = "NEZHA_WORLD_SIZE"
	// EnvRendezvous is "host:port" of rank 0's rendezvous listener.
	EnvRendezvous = "NEZHA_RENDEZVOUS"
	// EnvJobToken is the per-job secret peers prove to each other, for bare use (no operator);
	// the operator sets EnvJobTokenFile instead.
	EnvJobToken = "NEZHA_JOB_TOKEN"
	// EnvJobTokenFile names a file holding the job token alone (the job's Secret, mounted
	// read-only); trailing whitespace in it is not part of the token.
	EnvJobTokenFile = "NEZHA_JOB_TOKEN_FILE"
	// EnvControlAddr is where the runtime serves /status and /metrics.
	EnvControlAddr = "NEZHA_CONTROL_ADDR"
	// EnvJobName is the job label of the runtime's metrics.
	EnvJobName = "NEZHA_JOB_NAME"
	// EnvPolicy is adaptive, static or single.
	EnvPolicy = "NEZHA_POLICY"
	// EnvColdThreshold is the cold-start threshold in bytes, or "auto".
	EnvColdThreshold = "NEZHA_COLD_THRESHOLD"
	// EnvPreflight is spec.failurePolicy.onPreflightFailure in the runtime's words: fail, degrade
	// or wait.
	EnvPreflight = "NEZHA_PREFLIGHT"
	// EnvIOTimeoutMillis is spec.runtime.failover.railTimeout in milliseconds (set only when
	// given): the runtime's no-progress deadline after which a rail fails.
	EnvIOTimeoutMillis = "NEZHA_IO_TIMEOUT_MS"

	// ControlPort is the runtime's control port (NEZHA_CONTROL_ADDR=":9402").
	ControlPort = 9402
	// ControlPortName names ControlPort on every worker's first container, so monitors find the
	// runtime's /metrics by name (the chart's PodMonitor).
	ControlPortName = "nezha-control"
	// NCCLControlPort is the NCCL plugin's control endpoint, the runtime's routes (/status,
	// /metrics, signed drain/restore; NEZHA_NCCL_CONTROL_ADDR=":9434"): inside the range the
	// job's NetworkPolicy already opens for control ports, above the runtime's own ports of the
	// first 32 local ranks.
	NCCLControlPort = ControlPort + 32
	// NCCLControlPortName names NCCLControlPort on the first container of an NCCL job.
	NCCLControlPortName = "nezha-nccl"
	// DefaultRendezvousPort is used when spec.runtime.rendezvousPort is unset.
	DefaultRendezvousPort = 29400

	// JobTokenKey is the key of the token in the job's Secret.
	JobTokenKey = "token"
)

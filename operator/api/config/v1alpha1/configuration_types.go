package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// +kubebuilder:object:root=true

// Configuration is the nezha-operator's configuration (the file named by --config). Every field
// is optional: SetDefaults_Configuration fills what is left out (defaults.go), except namespace,
// which networkPolicy.enabled needs.
type Configuration struct {
	metav1.TypeMeta `json:",inline"`

	// Namespace is the operator's own namespace: every job's NetworkPolicy lets the operator's
	// pods (networkPolicy.operatorPodLabels) in from it. Required while networkPolicy.enabled.
	Namespace string `json:"namespace,omitempty"`

	// WatchNamespaces, when set, limits the operator to these namespaces: it watches and writes
	// MultiRailJobs, pods, Secrets, Services, NetworkPolicies and NADs there only, so the Helm
	// chart can grant it Roles in them instead of a ClusterRole (namespaced install,
	// docs/install.md). Empty: every namespace.
	// +listType=set
	WatchNamespaces []string `json:"watchNamespaces,omitempty"`

	// Health is where the manager serves /healthz and /readyz.
	Health ControllerHealth `json:"health,omitempty"`
	// Metrics is where the manager serves Prometheus metrics.
	Metrics ControllerMetrics `json:"metrics,omitempty"`
	// Webhook is the admission webhook server (RailClass validation, rails of other
	// controllers' pods).
	Webhook ControllerWebhook `json:"webhook,omitempty"`
	// LeaderElection lets only one of several replicas reconcile.
	LeaderElection LeaderElection `json:"leaderElection,omitempty"`

	// Runtime is the Nezha runtime the operator injects into workers that ask for it.
	Runtime Runtime `json:"runtime,omitempty"`
	// RuntimeControl is how the operator reads, and steers, the runtimes of running workers.
	RuntimeControl RuntimeControl `json:"runtimeControl,omitempty"`
	// Quarantine is quarantine by evidence (operator/README.md "Quarantine by evidence").
	Quarantine Quarantine `json:"quarantine,omitempty"`
	// RailNodes is how long the operator believes a rail agent's RailNode.
	RailNodes RailNodes `json:"railNodes,omitempty"`
	// NetworkPolicy gives every job a NetworkPolicy.
	NetworkPolicy NetworkPolicy `json:"networkPolicy,omitempty"`
	// WorkerPods tunes how the operator creates and watches a job's worker pods
	// (docs/operator-scale.md).
	WorkerPods WorkerPods `json:"workerPods,omitempty"`
}

// ControllerHealth is the health probe endpoint.
type ControllerHealth struct {
	// HealthProbeBindAddress is the address of /healthz and /readyz, host:port; "0" disables
	// them. Default ":8081".
	HealthProbeBindAddress string `json:"healthProbeBindAddress,omitempty"`
}

// ControllerMetrics is the metrics endpoint.
type ControllerMetrics struct {
	// BindAddress is the address of /metrics, host:port; "0" disables it. Default ":8080".
	BindAddress string `json:"bindAddress,omitempty"`
}

// ControllerWebhook is the admission webhook server.
type ControllerWebhook struct {
	// Port of the webhook server; 0 disables the webhooks. Default 9443.
	Port *int32 `json:"port,omitempty"`
	// CertDir holds the serving certificate, tls.crt and tls.key. Default
	// "/tmp/k8s-webhook-server/serving-certs".
	CertDir string `json:"certDir,omitempty"`
}

// LeaderElection is the manager's leader election (a Lease named nezha-operator.nezha.io).
type LeaderElection struct {
	// LeaderElect turns leader election on. Default false.
	LeaderElect *bool `json:"leaderElect,omitempty"`
	// ResourceNamespace is the namespace of the Lease; empty: the operator pod's own namespace.
	ResourceNamespace string `json:"resourceNamespace,omitempty"`
}

// Runtime is the runtime the operator injects.
type Runtime struct {
	// Image holds /opt/nezha; an init container copies it into workers that ask for runtime
	// injection (spec.runtime.injectRuntime). Empty: such jobs are refused with a condition.
	Image string `json:"image,omitempty"`
	// Transports the injected runtime supports; a RailClass asking for another is refused at
	// admission. Default [tcp, rdma, sharp].
	Transports []nezhav1.Transport `json:"transports,omitempty"`
}

// RuntimeControl is the operator's use of the runtimes' control endpoint.
type RuntimeControl struct {
	// Probe folds each running worker's runtime /status (port 9402) into rail health.
	// Default false.
	Probe *bool `json:"probe,omitempty"`
	// ProbeTimeout is the timeout of one /status probe. Default 1s.
	ProbeTimeout *metav1.Duration `json:"probeTimeout,omitempty"`
	// SteerRails, with probe: drain, through the runtime's authenticated control endpoint, a rail
	// the node agents report down (or that is quarantined) while the job still uses it, and
	// restore it when it is up again. Default true.
	SteerRails *bool `json:"steerRails,omitempty"`
	// RailActionInterval is the least time between two drain (or restore) requests for one rail
	// of one job. Default 10s.
	RailActionInterval *metav1.Duration `json:"railActionInterval,omitempty"`
}

// Quarantine is quarantine by evidence: a rail that fails `failures` times within `window` on a
// node is quarantined there, and released after `releaseAfter` healthy without failure.
type Quarantine struct {
	// Failures within window that quarantine a rail; 0 turns quarantine by evidence off.
	// Default 3.
	Failures *int32 `json:"failures,omitempty"`
	// Window the failures are counted in. Default 10m.
	Window *metav1.Duration `json:"window,omitempty"`
	// ReleaseAfter is how long a quarantined rail must stay healthy without failure to be
	// released. Default 30m.
	ReleaseAfter *metav1.Duration `json:"releaseAfter,omitempty"`
}

// RailNodes is the operator's trust in the rail agents.
type RailNodes struct {
	// StaleAfter: a RailNode whose status.observedTime is older than this has a dead agent; its
	// rails count as unknown, not healthy. 0 trusts every RailNode. Default 90s (three of the
	// agent's 30 s resyncs).
	StaleAfter *metav1.Duration `json:"staleAfter,omitempty"`
}

// NetworkPolicy is the NetworkPolicy every job gets: its own pods reach its workers, the
// operator and monitoringNamespace only the runtime's control ports.
type NetworkPolicy struct {
	// Enabled gives every job a NetworkPolicy. Default true.
	Enabled *bool `json:"enabled,omitempty"`
	// MonitoringNamespace may scrape the runtime's /metrics; empty: no namespace. Default
	// "monitoring".
	MonitoringNamespace *string `json:"monitoringNamespace,omitempty"`
	// OperatorPodLabels select the operator's pods (in namespace). Default
	// {app.kubernetes.io/component: operator}.
	OperatorPodLabels map[string]string `json:"operatorPodLabels,omitempty"`
}

// WorkerPods tunes the handling of large jobs.
type WorkerPods struct {
	// EventBatch gathers a job's pod events this long before reconciling it (fewer reconciles and
	// status writes while thousands of workers start); 0 reconciles on every event. Default 1s.
	EventBatch *metav1.Duration `json:"eventBatch,omitempty"`
	// CreateParallelism is the number of concurrent worker pod creations per job, 1..256.
	// Default 64.
	CreateParallelism *int32 `json:"createParallelism,omitempty"`
}

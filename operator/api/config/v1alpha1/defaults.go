package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// Defaults of the Configuration's fields. The operator's controllers use the same constants for
// a zero value, so a field left out means the same wherever the operator is built.
const (
	DefaultHealthProbeBindAddress = ":8081"
	DefaultMetricsBindAddress     = ":8080"
	DefaultWebhookPort            = 9443
	DefaultWebhookCertDir         = "/tmp/k8s-webhook-server/serving-certs"

	DefaultProbeTimeout = time.Second
	// DefaultRailActionInterval keeps a rail that flaps faster than the runtimes can agree from
	// turning into a stream of drain requests.
	DefaultRailActionInterval = 10 * time.Second

	DefaultQuarantineFailures     = 3
	DefaultQuarantineWindow       = 10 * time.Minute
	DefaultQuarantineReleaseAfter = 30 * time.Minute

	// DefaultRailNodeStaleAfter is three of the agent's 30 s resyncs: one missed heartbeat (an API
	// hiccup, a slow node) is normal, three are not.
	DefaultRailNodeStaleAfter = 90 * time.Second

	DefaultMonitoringNamespace = "monitoring"

	// DefaultPodEventBatch: a second of a job's pod events in one reconcile
	// (docs/operator-scale.md).
	DefaultPodEventBatch = time.Second
	// DefaultCreateParallelism bounds one job's concurrent pod creations. A create waits on etcd
	// more than on CPU: 64 in flight made 3,000 workers 1.4x faster than 16 on the scale bench
	// (docs/operator-scale.md); API Priority and Fairness queues any excess.
	DefaultCreateParallelism = 64
)

// DefaultRuntimeTransports is what the runtime image built from this tree supports: tcp, rdma
// (libibverbs, loaded at run time from the worker image's rdma-core; docs/rdma.md) and sharp
// (NVIDIA's libsharp_coll.so, loaded at run time from HPC-X / DOCA-OFED, not in the image: a node
// without it fails the job at start with an error naming the rail and the library; docs/sharp.md).
func DefaultRuntimeTransports() []nezhav1.Transport {
	return []nezhav1.Transport{nezhav1.TransportTCP, nezhav1.TransportRDMA, nezhav1.TransportSHARP}
}

// DefaultOperatorPodLabels selects the pods of an operator installed from config/.
func DefaultOperatorPodLabels() map[string]string {
	return map[string]string{"app.kubernetes.io/component": "operator"}
}

// SetDefaults_Configuration fills every field left out of the file. Decoding through a scheme
// that AddToScheme set up calls it (the name is defaulter-gen's convention).
func SetDefaults_Configuration(c *Configuration) {
	if c.Health.HealthProbeBindAddress == "" {
		c.Health.HealthProbeBindAddress = DefaultHealthProbeBindAddress
	}
	if c.Metrics.BindAddress == "" {
		c.Metrics.BindAddress = DefaultMetricsBindAddress
	}
	if c.Webhook.Port == nil {
		c.Webhook.Port = ptr.To[int32](DefaultWebhookPort)
	}
	if c.Webhook.CertDir == "" {
		c.Webhook.CertDir = DefaultWebhookCertDir
	}
	if c.LeaderElection.LeaderElect == nil {
		c.LeaderElection.LeaderElect = ptr.To(false)
	}
	if c.Runtime.Transports == nil {
		c.Runtime.Transports = DefaultRuntimeTransports()
	}
	defaultBool(&c.RuntimeControl.Probe, false)
	defaultDuration(&c.RuntimeControl.ProbeTimeout, DefaultProbeTimeout)
	defaultBool(&c.RuntimeControl.SteerRails, true)
	defaultDuration(&c.RuntimeControl.RailActionInterval, DefaultRailActionInterval)
	if c.Quarantine.Failures == nil {
		c.Quarantine.Failures = ptr.To[int32](DefaultQuarantineFailures)
	}
	defaultDuration(&c.Quarantine.Window, DefaultQuarantineWindow)
	defaultDuration(&c.Quarantine.ReleaseAfter, DefaultQuarantineReleaseAfter)
	defaultDuration(&c.RailNodes.StaleAfter, DefaultRailNodeStaleAfter)
	defaultBool(&c.NetworkPolicy.Enabled, true)
	if c.NetworkPolicy.MonitoringNamespace == nil {
		c.NetworkPolicy.MonitoringNamespace = ptr.To(DefaultMonitoringNamespace)
	}
	if c.NetworkPolicy.OperatorPodLabels == nil {
		c.NetworkPolicy.OperatorPodLabels = DefaultOperatorPodLabels()
	}
	defaultDuration(&c.WorkerPods.EventBatch, DefaultPodEventBatch)
	if c.WorkerPods.CreateParallelism == nil {
		c.WorkerPods.CreateParallelism = ptr.To[int32](DefaultCreateParallelism)
	}
}

func defaultBool(field **bool, value bool) {
	if *field == nil {
		*field = ptr.To(value)
	}
}

func defaultDuration(field **metav1.Duration, value time.Duration) {
	if *field == nil {
		*field = &metav1.Duration{Duration: value}
	}
}

package v1alpha1

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

func duration(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// TestDefaultsFillEveryFieldLeftOut: an empty configuration gets every documented default (the
// ones the operator's flags had).
func TestDefaultsFillEveryFieldLeftOut(t *testing.T) {
	c := &Configuration{}
	SetDefaults_Configuration(c)
	want := &Configuration{
		Health:         ControllerHealth{HealthProbeBindAddress: ":8081"},
		Metrics:        ControllerMetrics{BindAddress: ":8080"},
		Webhook:        ControllerWebhook{Port: ptr.To[int32](9443), CertDir: "/tmp/k8s-webhook-server/serving-certs"},
		LeaderElection: LeaderElection{LeaderElect: ptr.To(false)},
		Runtime:        Runtime{Transports: []nezhav1.Transport{"tcp", "rdma", "sharp"}},
		RuntimeControl: RuntimeControl{Probe: ptr.To(false), ProbeTimeout: duration(time.Second), SteerRails: ptr.To(true),
			RailActionInterval: duration(10 * time.Second)},
		Quarantine: Quarantine{Failures: ptr.To[int32](3), Window: duration(10 * time.Minute), ReleaseAfter: duration(30 * time.Minute)},
		RailNodes:  RailNodes{StaleAfter: duration(90 * time.Second)},
		NetworkPolicy: NetworkPolicy{Enabled: ptr.To(true), MonitoringNamespace: ptr.To("monitoring"),
			OperatorPodLabels: map[string]string{"app.kubernetes.io/component": "operator"}},
		WorkerPods: WorkerPods{EventBatch: duration(time.Second), CreateParallelism: ptr.To[int32](64)},
	}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
}

// TestDefaultsKeepWhatTheFileSays: values whose zero means "off" (quarantine failures 0, webhook
// port 0, staleAfter 0s, no monitoring namespace, no probing) survive defaulting, as do the
// other values given.
func TestDefaultsKeepWhatTheFileSays(t *testing.T) {
	c := &Configuration{
		Namespace:      "ops",
		Metrics:        ControllerMetrics{BindAddress: "0"},
		Webhook:        ControllerWebhook{Port: ptr.To[int32](0)},
		LeaderElection: LeaderElection{LeaderElect: ptr.To(true), ResourceNamespace: "leases"},
		Runtime:        Runtime{Image: "reg/runtime:1", Transports: []nezhav1.Transport{"tcp"}},
		RuntimeControl: RuntimeControl{Probe: ptr.To(true), SteerRails: ptr.To(false)},
		Quarantine:     Quarantine{Failures: ptr.To[int32](0)},
		RailNodes:      RailNodes{StaleAfter: duration(0)},
		NetworkPolicy: NetworkPolicy{Enabled: ptr.To(false), MonitoringNamespace: ptr.To(""),
			OperatorPodLabels: map[string]string{"app": "op"}},
		WorkerPods: WorkerPods{EventBatch: duration(0), CreateParallelism: ptr.To[int32](8)},
	}
	given := c.DeepCopy()
	SetDefaults_Configuration(c)
	checks := map[string]bool{
		"namespace":                         c.Namespace == given.Namespace,
		"metrics.bindAddress":               c.Metrics.BindAddress == "0",
		"webhook.port":                      *c.Webhook.Port == 0,
		"leaderElection":                    *c.LeaderElection.LeaderElect && c.LeaderElection.ResourceNamespace == "leases",
		"runtime":                           c.Runtime.Image == "reg/runtime:1" && cmp.Equal(c.Runtime.Transports, []nezhav1.Transport{"tcp"}),
		"runtimeControl.probe":              *c.RuntimeControl.Probe,
		"runtimeControl.steerRails":         !*c.RuntimeControl.SteerRails,
		"quarantine.failures":               *c.Quarantine.Failures == 0,
		"railNodes.staleAfter":              c.RailNodes.StaleAfter.Duration == 0,
		"networkPolicy.enabled":             !*c.NetworkPolicy.Enabled,
		"networkPolicy.monitoringNamespace": *c.NetworkPolicy.MonitoringNamespace == "",
		"networkPolicy.operatorPodLabels":   cmp.Equal(c.NetworkPolicy.OperatorPodLabels, map[string]string{"app": "op"}),
		"workerPods.eventBatch":             c.WorkerPods.EventBatch.Duration == 0,
		"workerPods.createParallelism":      *c.WorkerPods.CreateParallelism == 8,
	}
	for field, ok := range checks {
		if !ok {
			t.Errorf("defaulting changed %s", field)
		}
	}
	// Defaulting is idempotent.
	again := c.DeepCopy()
	SetDefaults_Configuration(again)
	if diff := cmp.Diff(c, again); diff != "" {
		t.Errorf("defaulting twice changed (-once +twice):\n%s", diff)
	}
}

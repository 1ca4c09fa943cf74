package config

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	configapi "github.com/nezha-project/nezha/operator/api/config/v1alpha1"
	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// valid is a defaulted configuration Validate accepts.
func valid() *configapi.Configuration {
	c := &configapi.Configuration{Namespace: "nezha-system"}
	configapi.SetDefaults_Configuration(c)
	return c
}

func TestValidateAcceptsTheDefaultsAndTheOffSwitches(t *testing.T) {
	if errs := Validate(valid()); len(errs) != 0 {
		t.Fatalf("defaults refused: %v", errs)
	}
	c := valid()
	c.Namespace = "" // not needed without NetworkPolicies
	c.NetworkPolicy.Enabled = ptr.To(false)
	c.NetworkPolicy.MonitoringNamespace = ptr.To("")
	c.Metrics.BindAddress, c.Health.HealthProbeBindAddress = "0", "127.0.0.1:0"
	c.Webhook.Port, c.Webhook.CertDir = ptr.To[int32](0), ""
	c.Quarantine = configapi.Quarantine{Failures: ptr.To[int32](0)} // off: window and release unused
	c.RailNodes.StaleAfter = &metav1.Duration{}
	c.WorkerPods.EventBatch = &metav1.Duration{}
	c.WorkerPods.CreateParallelism = ptr.To[int32](256)
	if errs := Validate(c); len(errs) != 0 {
		t.Fatalf("off switches refused: %v", errs)
	}
}

// TestValidateNamesEachBadField: one bad value at a time, the error names exactly that field.
func TestValidateNamesEachBadField(t *testing.T) {
	neg := &metav1.Duration{Duration: -time.Second}
	for _, tc := range []struct {
		field string
		spoil func(c *configapi.Configuration)
	}{
		{"namespace", func(c *configapi.Configuration) { c.Namespace = "" }},
		{"namespace", func(c *configapi.Configuration) { c.Namespace = "Nezha_System" }},
		{"health.healthProbeBindAddress", func(c *configapi.Configuration) { c.Health.HealthProbeBindAddress = "8081" }},
		{"metrics.bindAddress", func(c *configapi.Configuration) { c.Metrics.BindAddress = ":http-alt" }},
		{"metrics.bindAddress", func(c *configapi.Configuration) { c.Metrics.BindAddress = ":70000" }},
		{"webhook.port", func(c *configapi.Configuration) { c.Webhook.Port = ptr.To[int32](-1) }},
		{"webhook.port", func(c *configapi.Configuration) { c.Webhook.Port = ptr.To[int32](65536) }},
		{"webhook.certDir", func(c *configapi.Configuration) { c.Webhook.CertDir = "" }},
		{"leaderElection.resourceNamespace", func(c *configapi.Configuration) { c.LeaderElection.ResourceNamespace = "-x" }},
		{"watchNamespaces[1]", func(c *configapi.Configuration) { c.WatchNamespaces = []string{"team-a", "Team_B"} }},
		{"watchNamespaces[1]", func(c *configapi.Configuration) { c.WatchNamespaces = []string{"team-a", "team-a"} }},
		{"watchNamespaces[0]", func(c *configapi.Configuration) { c.WatchNamespaces = []string{""} }},
		{"runtime.transports", func(c *configapi.Configuration) { c.Runtime.Transports = []nezhav1.Transport{} }},
		{"runtime.transports[1]", func(c *configapi.Configuration) { c.Runtime.Transports = []nezhav1.Transport{"tcp", "ib"} }},
		{"runtime.transports[1]", func(c *configapi.Configuration) { c.Runtime.Transports = []nezhav1.Transport{"rdma", "rdma"} }},
		{"runtimeControl.probeTimeout", func(c *configapi.Configuration) { c.RuntimeControl.ProbeTimeout = &metav1.Duration{} }},
		{"runtimeControl.railActionInterval", func(c *configapi.Configuration) { c.RuntimeControl.RailActionInterval = neg }},
		{"quarantine.failures", func(c *configapi.Configuration) { c.Quarantine.Failures = ptr.To[int32](-1) }},
		{"quarantine.window", func(c *configapi.Configuration) { c.Quarantine.Window = &metav1.Duration{} }},
		{"quarantine.releaseAfter", func(c *configapi.Configuration) { c.Quarantine.ReleaseAfter = neg }},
		{"railNodes.staleAfter", func(c *configapi.Configuration) { c.RailNodes.StaleAfter = neg }},
		{"networkPolicy.monitoringNamespace", func(c *configapi.Configuration) { c.NetworkPolicy.MonitoringNamespace = ptr.To("Mon") }},
		{"networkPolicy.operatorPodLabels", func(c *configapi.Configuration) { c.NetworkPolicy.OperatorPodLabels = map[string]string{} }},
		{"networkPolicy.operatorPodLabels", func(c *configapi.Configuration) {
			c.NetworkPolicy.OperatorPodLabels = map[string]string{"app": "not a label value"}
		}},
		{"workerPods.eventBatch", func(c *configapi.Configuration) { c.WorkerPods.EventBatch = neg }},
		{"workerPods.createParallelism", func(c *configapi.Configuration) { c.WorkerPods.CreateParallelism = ptr.To[int32](0) }},
		{"workerPods.createParallelism", func(c *configapi.Configuration) { c.WorkerPods.CreateParallelism = ptr.To[int32](257) }},
	} {
		c := valid()
		tc.spoil(c)
		errs := Validate(c)
		if len(errs) != 1 || !strings.HasPrefix(errs[0].Field, tc.field) {
			t.Errorf("%s: want one error naming it, got %v", tc.field, errs)
		}
	}
}

// TestValidateNamesEveryBadFieldAtOnce: a file with several mistakes is refused with all of
// them, so one start shows everything to fix.
func TestValidateNamesEveryBadFieldAtOnce(t *testing.T) {
	c := valid()
	c.Namespace = ""
	c.Webhook.Port = ptr.To[int32](-1)
	c.Quarantine.Window = &metav1.Duration{}
	c.WorkerPods.CreateParallelism = ptr.To[int32](0)
	errs := Validate(c)
	var fields []string
	for _, e := range errs {
		fields = append(fields, e.Field)
	}
	want := "namespace webhook.port quarantine.window workerPods.createParallelism"
	for _, f := range strings.Fields(want) {
		if !strings.Contains(" "+strings.Join(fields, " ")+" ", " "+f+" ") {
			t.Errorf("errors name %v, want each of %s", fields, want)
		}
	}
}

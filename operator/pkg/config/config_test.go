package config

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	configapi "github.com/nezha-project/nezha/operator/api/config/v1alpha1"
	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

const header = "apiVersion: config.nezha.io/v1alpha1\nkind: Configuration\n"

// TestLoadReadsEveryFieldAndDefaultsTheRest: a file setting some fields keeps them and gets the
// defaults for the others.
func TestLoadReadsEveryFieldAndDefaultsTheRest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(header+`namespace: ops
metrics: {bindAddress: "0"}
webhook: {port: 0}
leaderElection: {leaderElect: true, resourceNamespace: leases}
runtime:
  image: reg.example/nezha/runtime:1.2
  transports: [tcp]
runtimeControl: {probe: true, probeTimeout: 2s, railActionInterval: 30s}
quarantine: {failures: 0}
railNodes: {staleAfter: 0s}
networkPolicy:
  monitoringNamespace: ""
  operatorPodLabels: {app.kubernetes.io/instance: nezha, app.kubernetes.io/component: operator}
workerPods: {eventBatch: 500ms, createParallelism: 16}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]any{
		"namespace": c.Namespace, "metrics": c.Metrics.BindAddress, "health": c.Health.HealthProbeBindAddress,
		"webhook.port": *c.Webhook.Port, "leaderElect": *c.LeaderElection.LeaderElect, "leaseNamespace": c.LeaderElection.ResourceNamespace,
		"image": c.Runtime.Image, "transports": c.Runtime.Transports,
		"probe": *c.RuntimeControl.Probe, "probeTimeout": c.RuntimeControl.ProbeTimeout.Duration, "steerRails": *c.RuntimeControl.SteerRails,
		"railActionInterval": c.RuntimeControl.RailActionInterval.Duration,
		"failures":           *c.Quarantine.Failures, "window": c.Quarantine.Window.Duration, "staleAfter": c.RailNodes.StaleAfter.Duration,
		"netpol": *c.NetworkPolicy.Enabled, "monitoring": *c.NetworkPolicy.MonitoringNamespace, "labels": c.NetworkPolicy.OperatorPodLabels,
		"eventBatch": c.WorkerPods.EventBatch.Duration, "createParallelism": *c.WorkerPods.CreateParallelism,
	}
	want := map[string]any{
		"namespace": "ops", "metrics": "0", "health": ":8081",
		"webhook.port": int32(0), "leaderElect": true, "leaseNamespace": "leases",
		"image": "reg.example/nezha/runtime:1.2", "transports": []nezhav1.Transport{"tcp"},
		"probe": true, "probeTimeout": 2 * time.Second, "steerRails": true,
		"railActionInterval": 30 * time.Second,
		"failures":           int32(0), "window": 10 * time.Minute, "staleAfter": time.Duration(0),
		"netpol": true, "monitoring": "", "labels": map[string]string{"app.kubernetes.io/instance": "nezha", "app.kubernetes.io/component": "operator"},
		"eventBatch": 500 * time.Millisecond, "createParallelism": int32(16),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("loaded configuration (-want +got):\n%s", diff)
	}
}

// TestLoadRefusesBadFilesNamingTheField: what a typo or a wrong value in the file gives, and a
// missing file.
func TestLoadRefusesBadFilesNamingTheField(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"missing apiVersion", "kind: Configuration\nnamespace: x\n", "apiVersion: Required value"},
		{"other version", "apiVersion: config.nezha.io/v1\nkind: Configuration\n", `apiVersion: Unsupported value: "config.nezha.io/v1"`},
		{"other kind", "apiVersion: config.nezha.io/v1alpha1\nkind: RailClass\n", `kind: Unsupported value: "RailClass"`},
		{"unknown field", header + "namespace: x\nquarantine: {windw: 1m}\n", `unknown field "quarantine.windw"`},
		{"unknown top-level field", header + "namespace: x\nrailNodeStaleAfter: 1m\n", `unknown field "railNodeStaleAfter"`},
		{"duplicate field", header + "namespace: a\nnamespace: b\n", `"namespace" already set`},
		{"bad duration", header + "namespace: x\nquarantine: {window: ten}\n", `quarantine.window: Invalid value: "ten"`},
		{"bad number", header + "namespace: x\nworkerPods: {createParallelism: many}\n", `workerPods.createParallelism: Invalid value: "many"`},
		{"bad bool", header + "namespace: x\nruntimeControl: {probe: maybe}\n", `runtimeControl.probe: Invalid value: "maybe"`},
		{"invalid value", header + "namespace: x\nworkerPods: {createParallelism: 300}\n", "workerPods.createParallelism: Invalid value: 300"},
		{"namespace needed", header, "namespace: Required value"},
		{"not YAML", "{", "parse error"},
	} {
		_, err := Decode([]byte(tc.text))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: want an error containing %q, got %v", tc.name, tc.want, err)
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "absent.yaml")); err == nil || !strings.Contains(err.Error(), "absent.yaml") {
		t.Errorf("a missing file: want an error naming it, got %v", err)
	}
}

// TestDecodeGivesAConfigurationTheControllersCanUse: the defaults alone (plus the namespace) are
// the operator as it runs without any choice made.
func TestDecodeGivesAConfigurationTheControllersCanUse(t *testing.T) {
	c, err := Decode([]byte(header + "namespace: nezha-system\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := &configapi.Configuration{Namespace: "nezha-system"}
	want.APIVersion, want.Kind = configapi.GroupVersion.String(), "Configuration"
	configapi.SetDefaults_Configuration(want)
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("decoded (-want +got):\n%s", diff)
	}
}

// TestSampleShowsTheDefaults: config/manager/operator_config.yaml, the documented example, loads
// and says exactly what the defaults are.
func TestSampleShowsTheDefaults(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	sample, err := Load(filepath.Join(filepath.Dir(file), "..", "..", "..", "config", "manager", "operator_config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defaults, err := Decode([]byte(header + "namespace: nezha-system\n"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(defaults, sample); diff != "" {
		t.Errorf("the sample differs from the defaults (-defaults +sample):\n%s", diff)
	}
}

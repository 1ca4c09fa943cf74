package charts

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	configapi "github.com/nezha-project/nezha/operator/api/config/v1alpha1"
	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/pkg/config"
)

// renderedOperatorConfig renders the chart with the given --set values and returns the
// operator's configuration file from its ConfigMap.
func renderedOperatorConfig(t *testing.T, sets ...string) []byte {
	t.Helper()
	args := []string{"template", releaseName, chartDir, "--kube-version", kubeVersion, "--namespace", releaseNamespace,
		"--show-only", "templates/operator-config.yaml"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	objs := renderedObjects(t, runHelm(t, args...))
	if len(objs) != 1 || objs[0].GetKind() != "ConfigMap" {
		t.Fatalf("templates/operator-config.yaml renders %d objects, want its ConfigMap", len(objs))
	}
	text, ok := objs[0].Object["data"].(map[string]any)["config.yaml"].(string)
	if !ok {
		t.Fatalf("the operator's ConfigMap has no config.yaml")
	}
	return []byte(text)
}

// TestChartRendersAConfigurationTheOperatorAccepts loads the file the chart renders with the
// operator's own loader (operator/pkg/config: strict decoding, defaults, validation), for the
// default values and for values that change every setting, and checks each value arrives.
func TestChartRendersAConfigurationTheOperatorAccepts(t *testing.T) {
	c, err := config.Decode(renderedOperatorConfig(t))
	if err != nil {
		t.Fatalf("the operator refuses the chart's default configuration: %v", err)
	}
	got := map[string]any{
		"namespace": c.Namespace, "metrics": c.Metrics.BindAddress, "health": c.Health.HealthProbeBindAddress,
		"webhook": *c.Webhook.Port, "certDir": c.Webhook.CertDir, "leaderElect": *c.LeaderElection.LeaderElect,
		"image": c.Runtime.Image, "transports": c.Runtime.Transports,
		"probe": *c.RuntimeControl.Probe, "steerRails": *c.RuntimeControl.SteerRails,
		"railActionInterval": c.RuntimeControl.RailActionInterval.Duration, "failures": *c.Quarantine.Failures,
		"netpol": *c.NetworkPolicy.Enabled, "labels": c.NetworkPolicy.OperatorPodLabels,
		"createParallelism": *c.WorkerPods.CreateParallelism,
	}
	want := map[string]any{
		"namespace": releaseNamespace, "metrics": ":8080", "health": ":8081",
		"webhook": int32(9443), "certDir": "/etc/nezha/webhook", "leaderElect": true,
		"image": "nezha/runtime:0.1.0", "transports": []nezhav1.Transport{"tcp", "rdma", "sharp"},
		"probe": true, "steerRails": true, // the chart turns on rail steering (operator/README.md "Rail steering")
		"railActionInterval": 10 * time.Second, "failures": int32(3),
		"netpol": true, "labels": map[string]string{"app.kubernetes.io/instance": releaseName, "app.kubernetes.io/component": "operator"},
		"createParallelism": int32(64),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("default configuration (-want +got):\n%s", diff)
	}

	c, err = config.Decode(renderedOperatorConfig(t,
		"image.registry=reg.example:5000", "image.tag=1.2",
		"operator.metricsPort=9080", "operator.healthPort=9081", "webhook.enabled=false",
		"operator.leaderElection=false", "operator.leaderElectionNamespace=leases",
		"operator.runtimeTransports={tcp}", "operator.runtimeControl.probe=false",
		"operator.runtimeControl.probeTimeout=3s", "operator.runtimeControl.steerRails=false",
		"operator.runtimeControl.railActionInterval=30s",
		"operator.quarantine.failures=0", "operator.quarantine.window=5m", "operator.quarantine.releaseAfter=1h",
		"operator.railNodeStaleAfter=0s", "networkPolicy.enabled=false", "networkPolicy.monitoringNamespace=",
		"operator.podEventBatch=0s", "operator.createParallelism=256"))
	if err != nil {
		t.Fatalf("the operator refuses the chart's configuration for changed values: %v", err)
	}
	got = map[string]any{
		"metrics": c.Metrics.BindAddress, "health": c.Health.HealthProbeBindAddress, "webhook": *c.Webhook.Port,
		"leaderElect": *c.LeaderElection.LeaderElect, "leaseNamespace": c.LeaderElection.ResourceNamespace,
		"image": c.Runtime.Image, "transports": c.Runtime.Transports,
		"probe": *c.RuntimeControl.Probe, "probeTimeout": c.RuntimeControl.ProbeTimeout.Duration,
		"steerRails": *c.RuntimeControl.SteerRails, "railActionInterval": c.RuntimeControl.RailActionInterval.Duration,
		"failures": *c.Quarantine.Failures, "window": c.Quarantine.Window.Duration, "releaseAfter": c.Quarantine.ReleaseAfter.Duration,
		"staleAfter": c.RailNodes.StaleAfter.Duration, "netpol": *c.NetworkPolicy.Enabled,
		"monitoring": *c.NetworkPolicy.MonitoringNamespace,
		"eventBatch": c.WorkerPods.EventBatch.Duration, "createParallelism": *c.WorkerPods.CreateParallelism,
	}
	want = map[string]any{
		"metrics": ":9080", "health": ":9081", "webhook": int32(0),
		"leaderElect": false, "leaseNamespace": "leases",
		"image": "reg.example:5000/nezha/runtime:1.2", "transports": []nezhav1.Transport{"tcp"},
		"probe": false, "probeTimeout": 3 * time.Second,
		"steerRails": false, "railActionInterval": 30 * time.Second,
		"failures": int32(0), "window": 5 * time.Minute, "releaseAfter": time.Hour,
		"staleAfter": time.Duration(0), "netpol": false,
		"monitoring": "",
		"eventBatch": time.Duration(0), "createParallelism": int32(256),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("configuration for changed values (-want +got):\n%s", diff)
	}
}

// TestChartSetsEveryConfigurationField: each field of the Configuration is written by the chart
// (so values reach it, rather than the operator's default silently applying); a new field
// without a value fails here.
func TestChartSetsEveryConfigurationField(t *testing.T) {
	var doc map[string]any
	if err := yaml.Unmarshal(renderedOperatorConfig(t), &doc); err != nil {
		t.Fatal(err)
	}
	for _, path := range fieldPaths(reflect.TypeOf(configapi.Configuration{}), "") {
		var node any = doc
		for _, key := range strings.Split(path, ".") {
			m, ok := node.(map[string]any)
			if !ok {
				node = nil
				break
			}
			node, ok = m[key]
			if !ok {
				node = nil
				break
			}
		}
		if node == nil {
			t.Errorf("the chart's operator configuration does not set %s", path)
		}
	}
}

// fieldPaths lists the JSON paths of t's leaf fields (a map or a list is a leaf).
func fieldPaths(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var paths []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" { // TypeMeta, inlined
			paths = append(paths, "apiVersion", "kind")
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft.Name() != "Duration" {
			paths = append(paths, fieldPaths(ft, prefix+name+".")...)
			continue
		}
		paths = append(paths, prefix+name)
	}
	return paths
}

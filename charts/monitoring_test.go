package charts

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const podMonitorAPI = "monitoring.coreos.com/v1/PodMonitor"

func renderWith(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	base := []string{"template", releaseName, chartDir, "--kube-version", kubeVersion, "--namespace", releaseNamespace}
	return renderedObjects(t, runHelm(t, append(base, args...)...))
}

func byKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// TestChartRendersPodMonitorsOnlyWhereTheCRDExists: the monitors need the Prometheus operator's
// CRDs (an install elsewhere must not fail on an unknown kind); where they exist the workers'
// runtimes are scraped on the named control port with their own job label, and the operator and
// agents on their metrics ports.
func TestChartRendersPodMonitorsOnlyWhereTheCRDExists(t *testing.T) {
	if n := len(byKind(renderWith(t), "PodMonitor")); n != 0 {
		t.Errorf("without the CRD: %d PodMonitors rendered", n)
	}
	if n := len(byKind(renderWith(t, "--api-versions", podMonitorAPI, "--set", "monitoring.podMonitors.enabled=false"), "PodMonitor")); n != 0 {
		t.Errorf("podMonitors.enabled=false: %d PodMonitors rendered", n)
	}
	monitors := byKind(renderWith(t, "--api-versions", podMonitorAPI, "--set", "monitoring.podMonitors.labels.release=prom"), "PodMonitor")
	if len(monitors) != 2 {
		t.Fatalf("with the CRD: %d PodMonitors, want 2 (runtime, components)", len(monitors))
	}
	runtime := monitors[0]
	if runtime.GetName() != "nezha-runtime" || runtime.GetLabels()["release"] != "prom" {
		t.Errorf("runtime monitor %s labels %v", runtime.GetName(), runtime.GetLabels())
	}
	endpoints, _, _ := unstructured.NestedSlice(runtime.Object, "spec", "podMetricsEndpoints")
	ep, _ := endpoints[0].(map[string]interface{})
	// The port name the operator gives every worker (operator/internal/builder addControlPort).
	if ep["port"] != "nezha-control" || ep["path"] != "/metrics" || ep["honorLabels"] != true {
		t.Errorf("runtime endpoint %v", ep)
	}
	key, _, _ := unstructured.NestedSlice(runtime.Object, "spec", "selector", "matchExpressions")
	if len(key) != 1 || key[0].(map[string]interface{})["key"] != "nezha.io/job-name" {
		t.Errorf("runtime selector %v", key)
	}
}

// knownMetrics are the metric families Nezha exports, read from the code that defines them.
func knownMetrics(t *testing.T) map[string]bool {
	t.Helper()
	sources := map[string]*regexp.Regexp{
		"../runtime/src/comm/control_status.cc":      regexp.MustCompile(`(?:family|byRailReason)\(\s*"(nezha_[a-z0-9_]+)"`),
		"../cni/pkg/railmetrics/metrics.go":          regexp.MustCompile(`(?:NewDesc\(|Name:\s*)"(nezha_[a-z0-9_]+)"`),
		"../operator/internal/controller/metrics.go": regexp.MustCompile(`Name:\s*"(nezha_[a-z0-9_]+)"`),
		"../operator/internal/quarantine/metrics.go": regexp.MustCompile(`Name:\s*"(nezha_[a-z0-9_]+)"`),
	}
	known := map[string]bool{}
	for file, re := range sources {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		matches := re.FindAllStringSubmatch(string(src), -1)
		if len(matches) == 0 {
			t.Fatalf("%s: no metric names found (did its definitions move?)", file)
		}
		for _, m := range matches {
			known[m[1]] = true
		}
	}
	return known
}

var metricName = regexp.MustCompile(`nezha_[a-z0-9_]+`)

// unknownMetrics lists the metric names in a PromQL expression that no family provides (a
// summary's or histogram's _sum/_count/_bucket series count as their family).
func unknownMetrics(expr string, known map[string]bool) []string {
	var bad []string
	for _, name := range metricName.FindAllString(expr, -1) {
		base := name
		for _, suffix := range []string{"_sum", "_count", "_bucket"} {
			if trimmed, ok := strings.CutSuffix(name, suffix); ok && known[trimmed] {
				base = trimmed
			}
		}
		if !known[base] && !slices.Contains(bad, name) {
			bad = append(bad, name)
		}
	}
	return bad
}

func TestUnknownMetricsCatchesAQueryOnAMetricThatDoesNotExist(t *testing.T) {
	known := map[string]bool{"nezha_runtime_rail_bytes_total": true, "nezha_runtime_failover_stall_seconds": true}
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`sum(rate(nezha_runtime_rail_bytes_total[1m]))`, nil},
		{`rate(nezha_runtime_failover_stall_seconds_sum[5m]) / rate(nezha_runtime_failover_stall_seconds_count[5m])`, nil},
		{`sum(rate(nezha_runtime_rail_byte_total[1m]))`, []string{"nezha_runtime_rail_byte_total"}},
		{`nezha_rail_link_up`, []string{"nezha_rail_link_up"}},
	} {
		if got := unknownMetrics(tc.expr, known); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.expr, got, tc.want)
		}
	}
}

// TestGrafanaDashboardQueriesNameExistingMetrics: the dashboard the chart ships is valid JSON, is
// rendered into the sidecar's ConfigMap unchanged, and every query names metrics Nezha exports.
func TestGrafanaDashboardQueriesNameExistingMetrics(t *testing.T) {
	cms := byKind(renderWith(t), "ConfigMap")
	var data string
	for _, cm := range cms {
		if cm.GetLabels()["grafana_dashboard"] == "1" {
			data, _, _ = unstructured.NestedString(cm.Object, "data", "nezha.json")
		}
	}
	if data == "" {
		t.Fatalf("no ConfigMap labelled grafana_dashboard=1 with nezha.json (ConfigMaps: %d)", len(cms))
	}
	file, err := os.ReadFile(chartDir + "/files/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(data) != strings.TrimSpace(string(file)) {
		t.Errorf("the rendered dashboard differs from files/grafana-dashboard.json")
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(data), &dash); err != nil {
		t.Fatalf("dashboard is not valid JSON: %v", err)
	}
	known := knownMetrics(t)
	queries := 0
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			queries++
			if len(metricName.FindAllString(q.Expr, -1)) == 0 {
				t.Errorf("panel %q: query %q names no Nezha metric", p.Title, q.Expr)
			}
			if bad := unknownMetrics(q.Expr, known); len(bad) > 0 {
				t.Errorf("panel %q: query %q names metrics that do not exist: %v", p.Title, q.Expr, bad)
			}
		}
	}
	if queries < 10 {
		t.Errorf("only %d queries in the dashboard", queries)
	}
	if n := len(byKind(renderWith(t, "--set", "monitoring.grafanaDashboard.enabled=false"), "ConfigMap")); n != len(cms)-1 {
		t.Errorf("grafanaDashboard.enabled=false: %d ConfigMaps, want %d", n, len(cms)-1)
	}
}

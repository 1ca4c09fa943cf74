package controller_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// TestOperatorMetricsPassPromlint: the operator's own families pass the checks of
// `promtool check metrics` (promlint: HELP present, counters end in _total, base units).
// Vectors appear once a label set was used, so the always-present families are required and the
// rest are linted as far as the other tests of this package created them.
func TestOperatorMetricsPassPromlint(t *testing.T) {
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var ours []*dto.MetricFamily
	for _, mf := range families {
		if strings.HasPrefix(mf.GetName(), "nezha_operator_") {
			ours = append(ours, mf)
		}
	}
	found := map[string]bool{}
	for _, mf := range ours {
		found[mf.GetName()] = true
	}
	for _, name := range []string{"nezha_operator_reconcile_duration_seconds", "nezha_operator_worker_pods_created_total"} {
		if !found[name] {
			t.Errorf("%s not exposed (have %v)", name, found)
		}
	}
	problems, err := promlint.NewWithMetricFamilies(ours).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

package railmetrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

func TestMetricsExposeRailsWithUnits(t *testing.T) {
	st := nezhav1.RailNodeStatus{Rails: []nezhav1.RailInterfaceStatus{
		{Name: "rail0", Interface: "ens1f0", OperState: nezhav1.LinkUp, Carrier: true, SpeedMbps: 100000, MTU: 9000, Transitions: 3, RxErrors: 7},
		{Name: "rail1", Interface: "ens1f1", OperState: nezhav1.LinkDown, Transitions: 1},
	}}
	m := New(func() nezhav1.RailNodeStatus { return st }, func() int64 { return 42 })
	reg := prometheus.NewPedanticRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	m.Publishes.WithLabelValues("success").Inc()
	want := `
# HELP nezha_agent_rail_link_up 1 when the rail's host interface is up with carrier (the RailNode's healthy), else 0.
# TYPE nezha_agent_rail_link_up gauge
nezha_agent_rail_link_up{interface="ens1f0",rail="rail0"} 1
nezha_agent_rail_link_up{interface="ens1f1",rail="rail1"} 0
# HELP nezha_agent_rail_speed_bits_per_second Negotiated link speed of the rail's host interface in bit/s (0 when the driver reports none).
# TYPE nezha_agent_rail_speed_bits_per_second gauge
nezha_agent_rail_speed_bits_per_second{interface="ens1f0",rail="rail0"} 1e+11
nezha_agent_rail_speed_bits_per_second{interface="ens1f1",rail="rail1"} 0
# HELP nezha_agent_rail_transitions_total Changes between healthy and unhealthy seen by this agent since it started, flaps inside one coalescing window included.
# TYPE nezha_agent_rail_transitions_total counter
nezha_agent_rail_transitions_total{rail="rail0"} 3
nezha_agent_rail_transitions_total{rail="rail1"} 1
# HELP nezha_agent_rail_receive_errors_total Kernel receive error counter of the rail's host interface.
# TYPE nezha_agent_rail_receive_errors_total counter
nezha_agent_rail_receive_errors_total{interface="ens1f0",rail="rail0"} 7
nezha_agent_rail_receive_errors_total{interface="ens1f1",rail="rail1"} 0
# HELP nezha_agent_coalesced_events_total Link changes merged into an already pending RailNode write (writes saved).
# TYPE nezha_agent_coalesced_events_total counter
nezha_agent_coalesced_events_total 42
# HELP nezha_agent_publishes_total RailNode status writes by result.
# TYPE nezha_agent_publishes_total counter
nezha_agent_publishes_total{result="success"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"nezha_agent_rail_link_up", "nezha_agent_rail_speed_bits_per_second", "nezha_agent_rail_transitions_total",
		"nezha_agent_rail_receive_errors_total", "nezha_agent_coalesced_events_total", "nezha_agent_publishes_total"); err != nil {
		t.Error(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		// Link speeds are quoted in bits everywhere (ethtool, RailClass expectedBandwidthMbps);
		// the name is part of Nezha's interface, so this one lint rule is waived.
		if p.Metric == "nezha_agent_rail_speed_bits_per_second" && strings.Contains(p.Text, `"bytes" instead of "bits"`) {
			continue
		}
		t.Errorf("metric lint: %+v", p)
	}
}

// Package railmetrics exposes the rail agent's view as Prometheus metrics. Per-rail metrics are
// read from the tracker at scrape time (no second copy of the state to drift); the agent's own
// activity (writes, absorbed events, publish delay) is counted as it happens.
package railmetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// StatusFunc returns the current rails (the tracker's Status).
type StatusFunc func() nezhav1.RailNodeStatus

var (
	railLabels  = []string{"rail", "interface"}
	descLinkUp  = prometheus.NewDesc("nezha_agent_rail_link_up", "1 when the rail's host interface is up with carrier (the RailNode's healthy), else 0.", railLabels, nil)
	descCarrier = prometheus.NewDesc("nezha_agent_rail_carrier", "1 when the rail's host interface has carrier, else 0.", railLabels, nil)
	descTrans   = prometheus.NewDesc("nezha_agent_rail_transitions_total", "Changes between healthy and unhealthy seen by this agent since it started, flaps inside one coalescing window included.", []string{"rail"}, nil)
	descSpeed   = prometheus.NewDesc("nezha_agent_rail_speed_bits_per_second", "Negotiated link speed of the rail's host interface in bit/s (0 when the driver reports none).", railLabels, nil)
	descMTU     = prometheus.NewDesc("nezha_agent_rail_mtu_bytes", "MTU of the rail's host interface in bytes.", railLabels, nil)
	descRxErr   = prometheus.NewDesc("nezha_agent_rail_receive_errors_total", "Kernel receive error counter of the rail's host interface.", railLabels, nil)
	descTxErr   = prometheus.NewDesc("nezha_agent_rail_transmit_errors_total", "Kernel transmit error counter of the rail's host interface.", railLabels, nil)
	descRxDrop  = prometheus.NewDesc("nezha_agent_rail_receive_dropped_total", "Kernel receive drop counter of the rail's host interface.", railLabels, nil)
	descTxDrop  = prometheus.NewDesc("nezha_agent_rail_transmit_dropped_total", "Kernel transmit drop counter of the rail's host interface.", railLabels, nil)
	descRails   = prometheus.NewDesc("nezha_agent_rails", "Rails with an entry on this node, healthy or not.", nil, nil)
)

// Metrics holds the agent's metrics; register it on a registry with Register.
type Metrics struct {
	status StatusFunc

	// Publishes counts RailNode status writes by result ("success" or "error").
	Publishes *prometheus.CounterVec
	// CoalescedEvents counts link changes merged into an already pending write.
	CoalescedEvents prometheus.CounterFunc
	// PublishDelay is the time from the first unpublished change to the write that published it.
	PublishDelay prometheus.Histogram
}

// New returns the metrics; absorbed reports the coalescer's merged-event count.
func New(status StatusFunc, absorbed func() int64) *Metrics {
	return &Metrics{
		status: status,
		Publishes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nezha_agent_publishes_total",
			Help: "RailNode status writes by result.",
		}, []string{"result"}),
		CoalescedEvents: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "nezha_agent_coalesced_events_total",
			Help: "Link changes merged into an already pending RailNode write (writes saved).",
		}, func() float64 { return float64(absorbed()) }),
		PublishDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "nezha_agent_publish_delay_seconds",
			Help:    "Seconds from the first unpublished rail change to the RailNode write that published it.",
			Buckets: []float64{0.05, 0.1, 0.2, 0.3, 0.5, 1, 2, 5, 10, 30},
		}),
	}
}

// Register adds every metric to reg.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{railCollector{m.status}, m.Publishes, m.CoalescedEvents, m.PublishDelay} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

type railCollector struct{ status StatusFunc }

func (railCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLinkUp, descCarrier, descTrans, descSpeed, descMTU, descRxErr, descTxErr, descRxDrop, descTxDrop, descRails} {
		ch <- d
	}
}

func (c railCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.status()
	ch <- prometheus.MustNewConstMetric(descRails, prometheus.GaugeValue, float64(len(st.Rails)))
	for i := range st.Rails {
		r := &st.Rails[i]
		l := []string{r.Name, r.Interface}
		ch <- prometheus.MustNewConstMetric(descLinkUp, prometheus.GaugeValue, b2f(r.Healthy()), l...)
		ch <- prometheus.MustNewConstMetric(descCarrier, prometheus.GaugeValue, b2f(r.Carrier), l...)
		ch <- prometheus.MustNewConstMetric(descTrans, prometheus.CounterValue, float64(r.Transitions), r.Name)
		ch <- prometheus.MustNewConstMetric(descSpeed, prometheus.GaugeValue, float64(r.SpeedMbps)*1e6, l...)
		ch <- prometheus.MustNewConstMetric(descMTU, prometheus.GaugeValue, float64(r.MTU), l...)
		ch <- prometheus.MustNewConstMetric(descRxErr, prometheus.CounterValue, float64(r.RxErrors), l...)
		ch <- prometheus.MustNewConstMetric(descTxErr, prometheus.CounterValue, float64(r.TxErrors), l...)
		ch <- prometheus.MustNewConstMetric(descRxDrop, prometheus.CounterValue, float64(r.RxDropped), l...)
		ch <- prometheus.MustNewConstMetric(descTxDrop, prometheus.CounterValue, float64(r.TxDropped), l...)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

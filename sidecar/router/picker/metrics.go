package picker

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmroute/warmroute/sidecar/router/flow"
)

// Metrics are the picker's, registered with the router's others; each
// one's help says what it counts.
type Metrics struct {
	Picks, Handoffs            *prometheus.CounterVec
	PickErrors, Terms, Refused prometheus.Counter
	PickDuration               prometheus.Histogram
	Leader, Known              prometheus.Gauge
	Flow                       *flow.Metrics // recorded while this replica leads
}

// NewMetrics creates the metrics and registers them with reg (nil: none).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns = "warmroute_router"
	m := &Metrics{
		Picks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "picks_total",
			Help: "Routing decisions by who made them: leader (this replica, the elected picker), picker (the elected sibling, over the pick API), fallback (no picker answered: rendezvous hashing with this replica's own counts)."}, []string{"source"}),
		PickErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "pick_errors_total",
			Help: "Pick API calls that failed (the picker unreachable, not leading, or too slow); each sends the replica to the fallback for a moment."}),
		PickDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "pick_duration_seconds",
			Help: "Round trip of a pick API call to the elected sibling.", Buckets: prometheus.ExponentialBuckets(25e-6, 2, 14)}),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "picker_leader",
			Help: "1 while this replica is the elected picker of its endpoint."}),
		Known: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "picker_known",
			Help: "1 while this replica knows which replica is the picker (itself included); 0 while it routes every request by its fallback."}),
		Terms: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "picker_terms_total",
			Help: "Terms this replica started as the elected picker."}),
		Handoffs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "picker_handoffs_total",
			Help: "The picker's state handed from a leader that stepped down to its successor, by direction (sent, received) and result (sent: ok, failed, no_successor; received: restored, refused)."}, []string{"direction", "result"}),
		Refused: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "pick_api_refused_total",
			Help: "Pick API calls refused for want of a valid signature with the endpoint's key."}),
		Flow: flow.NewMetrics(reg),
	}
	if reg != nil {
		reg.MustRegister(m.Picks, m.PickErrors, m.PickDuration, m.Leader, m.Known, m.Terms, m.Handoffs, m.Refused)
	}
	return m
}

package metrics

import "github.com/prometheus/client_golang/prometheus"

// Peer pull results, as counted in warmroute_router_peer_pulls_total.
const (
	PullOK      = "ok"      // report fetched and applied
	PullError   = "error"   // peer unreachable, timed out or answered non-200
	PullInvalid = "invalid" // answer too large or not a report
)

// PeerMetrics are the metrics of the exchange between router replicas
// (sidecar/router/peers), so an operator sees when the shared picture of
// load degrades to the local one.
type PeerMetrics struct {
	Pulls *prometheus.CounterVec // result
	// Acks counts acknowledgements of applied reports sent to peers, by
	// result: while they fail, the peers count their own sends from an
	// older report, which keeps the threshold but spills more.
	Acks *prometheus.CounterVec // result
	// Pokes counts requests to peers to pull this replica at once, sent
	// after a long prefill, by result: while they fail, peers learn of
	// such prefills at their next pull only.
	Pokes *prometheus.CounterVec // result
}

// PeerGauges are read from the puller at scrape time.
type PeerGauges struct {
	// Peers reports the discovered peers whose last report is recent
	// (fresh) and those whose report is missing or too old (stale).
	Peers func() (fresh, stale int)
	// ReportAge is the age in seconds of the oldest peer report in use.
	ReportAge func() float64
}

// NewPeers registers the peer metrics on the router's registry.
func NewPeers(reg prometheus.Registerer, g PeerGauges) *PeerMetrics {
	m := &PeerMetrics{
		Pulls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "peer_pulls_total",
			Help: "Load report pulls from peer router replicas, by result (ok, error, invalid)."}, []string{"result"}),
		Acks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "peer_acks_total",
			Help: "Acknowledgements of applied reports sent to peer router replicas, by result (ok, error)."}, []string{"result"}),
		Pokes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "peer_pokes_total",
			Help: "Requests to peer router replicas to pull this replica's report at once, sent after a long prefill, by result (ok, error)."}, []string{"result"}),
	}
	peers := func(state string, pick func(fresh, stale int) int) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "peers",
			Help:        "Peer router replicas by state: fresh (report in use) or stale (unreachable; its load is left out).",
			ConstLabels: prometheus.Labels{"state": state}},
			func() float64 { return float64(pick(g.Peers())) })
	}
	reg.MustRegister(m.Pulls, m.Acks, m.Pokes,
		peers("fresh", func(fresh, _ int) int { return fresh }),
		peers("stale", func(_, stale int) int { return stale }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "peer_report_age_seconds",
			Help: "Age of the oldest peer report in use (0 without peers)."}, g.ReportAge),
	)
	return m
}

// Package metrics defines the router's Prometheus metrics, all named
// warmroute_router_*, on a registry of their own.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const ns = "warmroute_router"

// Metrics is every metric the router exports.
type Metrics struct {
	Registry *prometheus.Registry

	Requests         *prometheus.CounterVec   // backend, strategy, outcome
	InFlight         *prometheus.GaugeVec     // backend
	Spills           *prometheus.CounterVec   // reason
	DecisionDuration prometheus.Histogram     // seconds
	TimeToFirstByte  *prometheus.HistogramVec // stream
	UpstreamErrors   *prometheus.CounterVec   // backend, kind
	Retries          prometheus.Counter
	Ejections        *prometheus.CounterVec // backend, source
	ConfigReloads    *prometheus.CounterVec // result
	ConfigGeneration prometheus.Gauge
	PrefixMatchChars prometheus.Histogram
	BackendHealthy   *prometheus.GaugeVec // backend
}

// New registers the metrics; indexEntries and indexBytes report the prefix
// index's size when scraped.
func New(indexEntries, indexBytes func() float64) *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{
		Registry: r,
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "requests_total",
			Help: "Requests by backend, strategy and outcome (2xx, 4xx, 5xx, error, canceled, rejected)."}, []string{"backend", "strategy", "outcome"}),
		InFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "in_flight_requests",
			Help: "Requests in flight from this router, per backend."}, []string{"backend"}),
		Spills: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "spills_total",
			Help: "Requests not sent to their preferred instance, by reason (concurrency_threshold, all_busy, unhealthy)."}, []string{"reason"}),
		DecisionDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "decision_duration_seconds",
			Help:    "Time to extract the routing key and pick an instance.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 2, 16)}),
		TimeToFirstByte: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "time_to_first_byte_seconds",
			Help:    "Time from receiving a request to the first response byte from the backend.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}, []string{"stream"}),
		UpstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "upstream_errors_total",
			Help: "Failures talking to a backend, by kind (connect, response)."}, []string{"backend", "kind"}),
		Retries: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "retries_total",
			Help: "Requests retried on the next instance after a connection failure."}),
		Ejections: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "ejections_total",
			Help: "Backends taken out of rotation, by source (passive, active)."}, []string{"backend", "source"}),
		ConfigReloads: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "config_reloads_total",
			Help: "Routing document loads by result (applied, unchanged, rejected)."}, []string{"result"}),
		ConfigGeneration: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "config_generation",
			Help: "LLMEndpoint generation of the routing document in force."}),
		PrefixMatchChars: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "prefix_match_chars",
			Help:    "Estimated length of the routing text the chosen instance was recently sent (PREFIX_AWARE).",
			Buckets: prometheus.ExponentialBuckets(64, 2, 11)}),
		BackendHealthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "backend_healthy",
			Help: "1 when the backend is in rotation, 0 while ejected."}, []string{"backend"}),
	}
	r.MustRegister(m.Requests, m.InFlight, m.Spills, m.DecisionDuration, m.TimeToFirstByte, m.UpstreamErrors,
		m.Retries, m.Ejections, m.ConfigReloads, m.ConfigGeneration, m.PrefixMatchChars, m.BackendHealthy,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "prefix_index_entries",
			Help: "Entries in the bounded prefix index."}, indexEntries),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "prefix_index_bytes",
			Help: "Estimated memory of the prefix index and popularity sketch (bounded by flags)."}, indexBytes),
	)
	return m
}

// Handler serves the registry.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

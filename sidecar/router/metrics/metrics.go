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

	Requests       *prometheus.CounterVec // backend, strategy, outcome
	Spills         *prometheus.CounterVec // reason
	ColdPlacements prometheus.Counter     // PREFIX_AWARE: see policy.coldPlacement
	KeyMoves       *prometheus.CounterVec // PREFIX_AWARE: see policy.Choice.Moved
	// WarmRequests and WarmPromptTokens count the one-token copies sent
	// to joining instances (policy/warm.go), apart from Requests.
	WarmRequests     *prometheus.CounterVec
	WarmPromptTokens prometheus.Counter
	DecisionDuration prometheus.Histogram     // seconds
	TimeToFirstByte  *prometheus.HistogramVec // stream
	// TimeToFirstToken is observed at a stream's first event carrying
	// output; vLLM sends a stream's headers before prefill, so headers
	// (TimeToFirstByte) say nothing about the first token.
	TimeToFirstToken prometheus.Histogram
	// TimeToFullResponse is a non-streaming response's whole duration,
	// its only honest "first token".
	TimeToFullResponse prometheus.Histogram
	StaleConnRetries   prometheus.Counter
	UpstreamErrors     *prometheus.CounterVec // backend, kind
	Retries            prometheus.Counter
	Ejections          *prometheus.CounterVec // backend, source
	ConfigReloads      *prometheus.CounterVec // result
	ConfigGeneration   prometheus.Gauge
	PrefixMatchChars   prometheus.Histogram
	BackendHealthy     *prometheus.GaugeVec // backend
	BackendDraining    *prometheus.GaugeVec // backend
	// HoldWait is how long held requests waited, dispatched or not.
	HoldWait prometheus.Histogram
	// Activations counts runs of held requests: the first request held
	// while none was asks for an instance.
	Activations prometheus.Counter
}

// Gauges are read from the router at scrape time, so they can never drift
// from the counters the policy itself uses.
type Gauges struct {
	IndexEntries func() float64
	IndexBytes   func() float64
	// Buffered is the request body bytes held against the buffer budget.
	Buffered func() float64
	// Held is the requests held for an instance now.
	Held func() float64
	// InFlight reports requests in flight per configured backend.
	InFlight func(report func(backend string, n float64))
	// PrefillTokens reports, per configured backend, the prompt tokens
	// this router estimates the backend has yet to prefill for it (its own
	// requests only, so that a sum over router replicas counts each once).
	PrefillTokens func(report func(backend string, n float64))
}

// New registers the metrics.
func New(g Gauges) *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{
		Registry: r,
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "requests_total",
			Help: "Requests by backend, strategy and outcome (2xx, 4xx, 5xx; error: no answer; canceled: the client left before the answer began; rejected: refused by the router; client_disconnect, upstream_reset, upstream_timeout: a response cut mid-way by the client, by the backend, or by the stream idle timeout)."}, []string{"backend", "strategy", "outcome"}),
		Spills: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "spills_total",
			Help: "Requests not sent to their preferred instance, by reason (concurrency_threshold, all_busy, unhealthy, token_load)."}, []string{"reason"}),
		ColdPlacements: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "cold_placements_total",
			Help: "PREFIX_AWARE: new keys with a long prompt placed where their prefill would finish first rather than on their first choice."}),
		KeyMoves: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "key_moves_total",
			Help: "PREFIX_AWARE: known prefix keys placed off the instance the prefix index held them on, each at the cost of a cold prefill, by reason (share: that instance's request share was over 1.08 × the average; joining: the key's first choice joined the fleet; holder_left: that instance left, back to the one before)."}, []string{"reason"}),
		WarmRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "warm_requests_total",
			Help: "PREFIX_AWARE: one-token copies of requests sent to a joining instance to warm its cache before its keys move to it, by result (ok: answered 2xx; error: anything else). Not counted in requests_total."}, []string{"result"}),
		WarmPromptTokens: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "warm_prompt_tokens_total",
			Help: "PREFIX_AWARE: estimated prompt tokens sent to joining instances in warm copies (the cost of warming)."}),
		DecisionDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "decision_duration_seconds",
			Help:    "Time to extract the routing key and pick an instance.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 2, 16)}),
		TimeToFirstByte: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "time_to_first_byte_seconds",
			Help:    "Time from receiving a request to the backend's response headers (vLLM sends a stream's headers before prefill: see time_to_first_token_seconds).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}, []string{"stream"}),
		TimeToFirstToken: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "time_to_first_token_seconds",
			Help:    "Streams: time from receiving a request to the first event carrying output.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}),
		TimeToFullResponse: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "time_to_full_response_seconds",
			Help:    "Non-streaming requests: time from receiving a request to the end of the response.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}),
		StaleConnRetries: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "stale_connection_retries_total",
			Help: "Requests resent on a new connection after a pooled one turned out closed by the backend."}),
		UpstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "upstream_errors_total",
			Help: "Failures talking to a backend, by kind (connect, response, header_timeout: no response headers in time; reset and stream_idle: a response cut mid-way)."}, []string{"backend", "kind"}),
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
		BackendDraining: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "backend_draining",
			Help: "1 while the backend drains (terminating: no new keys, its keys warmed on their next owners), else 0."}, []string{"backend"}),
		// 50 ms (a wait that ends at the next routing document or
		// readmission) doubling to 410 s: a model load of 3 to 8 minutes
		// lands in the top buckets, and a wait to --hold-timeout's 10
		// minutes in +Inf.
		HoldWait: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "hold_wait_seconds",
			Help:    "Time requests were held while no instance could serve them, dispatched or not (--hold-timeout).",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 14)}),
		Activations: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "activations_requested_total",
			Help: "Times a request was held while none was: each asks for an instance (scale from zero)."}),
	}
	r.MustRegister(m.Requests, m.Spills, m.ColdPlacements, m.KeyMoves, m.WarmRequests, m.WarmPromptTokens, m.DecisionDuration, m.TimeToFirstByte, m.TimeToFirstToken, m.TimeToFullResponse, m.StaleConnRetries, m.UpstreamErrors,
		m.Retries, m.Ejections, m.ConfigReloads, m.ConfigGeneration, m.PrefixMatchChars, m.BackendHealthy, m.BackendDraining, m.HoldWait, m.Activations,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "prefix_index_entries",
			Help: "Entries in the bounded prefix index."}, g.IndexEntries),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "prefix_index_bytes",
			Help: "Estimated memory of the prefix index and popularity sketch (bounded by flags)."}, g.IndexBytes),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "buffered_request_bytes",
			Help: "Request body bytes held against the buffer budget (--max-buffered-bytes)."}, g.Buffered),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "held_requests",
			Help: "Requests held now because no instance can serve them (--hold-timeout, --max-held)."}, g.Held),
		perBackendCollector{desc: prometheus.NewDesc(ns+"_in_flight_requests", "Requests in flight from this router, per backend.",
			[]string{"backend"}, nil), report: g.InFlight},
		perBackendCollector{desc: prometheus.NewDesc(ns+"_prefill_tokens_in_flight",
			"Prompt tokens of this router's requests that the backend has yet to prefill, estimated (prompt length less the expected prefix-cache hit; released at the first token).",
			[]string{"backend"}, nil), report: g.PrefillTokens},
	)
	return m
}

// DeleteBackend drops every series of a backend that left the routing
// document. Instance names are pod names, new with every rollout, so
// keeping them would grow the registry without bound.
func (m *Metrics) DeleteBackend(id string) {
	l := prometheus.Labels{"backend": id}
	for _, v := range []*prometheus.MetricVec{m.Requests.MetricVec, m.UpstreamErrors.MetricVec, m.Ejections.MetricVec, m.BackendHealthy.MetricVec, m.BackendDraining.MetricVec} {
		v.DeletePartialMatch(l)
	}
}

// perBackendCollector reads a per-backend gauge from the router at scrape
// time: backends come and go with the routing document, and reading them
// then costs nothing per request and leaves no series behind.
type perBackendCollector struct {
	desc   *prometheus.Desc
	report func(func(string, float64))
}

func (c perBackendCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c perBackendCollector) Collect(ch chan<- prometheus.Metric) {
	c.report(func(backend string, n float64) {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, n, backend)
	})
}

// Handler serves the registry.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

package flow

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the controller's, per tenant: the tenants of the Config and
// DefaultName for all others, so their number is bounded by the Config's.
type Metrics struct {
	Queued         *prometheus.GaugeVec
	QueueWait      *prometheus.HistogramVec
	Shed           *prometheus.CounterVec
	RateLimited    *prometheus.CounterVec
	AdmittedTokens *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg (nil: none).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns, sub = "warmroute_router", "flow"
	m := &Metrics{
		Queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "queued",
			Help: "Requests queued because every instance that could serve them was full, by tenant."}, []string{"tenant"}),
		// From 1 ms to about 9 minutes, the longest queue timeout (10 m)
		// falling in the last bucket.
		QueueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "queue_wait_seconds",
			Help: "Time queued requests waited until they were released to an instance, by tenant.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 20)}, []string{"tenant"}),
		Shed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "shed_total",
			Help: "Requests refused by the queue, by tenant and reason: tenant_queue_full (429), not_queued, pressure, deadline (503)."}, []string{"tenant", "reason"}),
		RateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "rate_limited_total",
			Help: "Requests refused 429 by a rate limit, by tenant and limit (requests, tokens per minute)."}, []string{"tenant", "limit"}),
		AdmittedTokens: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "admitted_tokens_total",
			Help: "Tokens (prompt and completion, from the responses' usage) of admitted requests, by tenant."}, []string{"tenant"}),
	}
	if reg != nil {
		reg.MustRegister(m.Queued, m.QueueWait, m.Shed, m.RateLimited, m.AdmittedTokens)
	}
	return m
}

// tenantMetrics are one entry's series, resolved once per Update so that
// the request path does no label lookup.
type tenantMetrics struct {
	queued        prometheus.Gauge
	wait          prometheus.Observer
	tokens        prometheus.Counter
	shed, limited *prometheus.CounterVec // by reason
}

func (m *Metrics) tenant(name string) *tenantMetrics {
	l := prometheus.Labels{"tenant": name}
	return &tenantMetrics{queued: m.Queued.With(l), wait: m.QueueWait.With(l), tokens: m.AdmittedTokens.With(l),
		shed: m.Shed.MustCurryWith(l), limited: m.RateLimited.MustCurryWith(l)}
}

// forget drops a removed tenant's series.
func (m *Metrics) forget(name string) {
	l := prometheus.Labels{"tenant": name}
	for _, v := range []*prometheus.MetricVec{m.Queued.MetricVec, m.QueueWait.MetricVec, m.Shed.MetricVec, m.RateLimited.MetricVec, m.AdmittedTokens.MetricVec} {
		v.DeletePartialMatch(l)
	}
}

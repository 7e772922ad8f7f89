package flow

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

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
// the request path does no label lookup. A nil one records nothing.
type tenantMetrics struct {
	m      *Metrics
	name   string
	queued prometheus.Gauge
	wait   prometheus.Observer
	tokens prometheus.Counter
}

func (m *Metrics) tenant(name string) *tenantMetrics {
	if m == nil {
		return nil
	}
	return &tenantMetrics{m: m, name: name, queued: m.Queued.WithLabelValues(name),
		wait: m.QueueWait.WithLabelValues(name), tokens: m.AdmittedTokens.WithLabelValues(name)}
}

// forget drops a removed tenant's series.
func (m *Metrics) forget(name string) {
	if m == nil {
		return
	}
	l := prometheus.Labels{"tenant": name}
	m.Queued.DeletePartialMatch(l)
	m.QueueWait.DeletePartialMatch(l)
	m.Shed.DeletePartialMatch(l)
	m.RateLimited.DeletePartialMatch(l)
	m.AdmittedTokens.DeletePartialMatch(l)
}

func (t *tenantMetrics) setQueued(n int) {
	if t != nil {
		t.queued.Set(float64(n))
	}
}

func (t *tenantMetrics) waited(d time.Duration) {
	if t != nil {
		t.wait.Observe(d.Seconds())
	}
}

func (t *tenantMetrics) admitted(tokens int64) {
	if t != nil {
		t.tokens.Add(float64(tokens))
	}
}

func (t *tenantMetrics) shed(r Reason) {
	if t != nil {
		t.m.Shed.WithLabelValues(t.name, string(r)).Inc()
	}
}

func (t *tenantMetrics) limited(r Reason) {
	if t != nil {
		t.m.RateLimited.WithLabelValues(t.name, string(r)).Inc()
	}
}

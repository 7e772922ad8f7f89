// Package proxy is the router's HTTP side: it reads each request, asks the
// policy for an instance, and forwards the request with
// httputil.ReverseProxy, streaming the response back as it comes.
package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/router/extract"
	"github.com/warmroute/warmroute/sidecar/router/metrics"
	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// Options configures the router.
type Options struct {
	// MaxBodyBytes is the largest request body accepted (413 above it).
	MaxBodyBytes int64
	// MaxAttempts bounds how many instances a request tries when
	// connections fail before anything was sent.
	MaxAttempts int
	// EjectBase and EjectMax bound the passive ejection back-off, which
	// doubles with each consecutive failure.
	EjectBase, EjectMax time.Duration
	// HealthInterval is the period of active /health checks (0 disables).
	HealthInterval time.Duration
	// StrategyOverride replaces the document's strategy (benchmarks use it
	// to run the hidden baseline through the real binary).
	StrategyOverride policy.Strategy
	// Tuning tunes the policy.
	Tuning policy.Tuning
	// Transport overrides the upstream transport (tests).
	Transport http.RoundTripper
	Log       logr.Logger
	Metrics   *metrics.Metrics
}

// state is the part of the document the HTTP side needs.
type state struct {
	doc      *routingv1alpha1.Document
	strategy policy.Strategy
}

// Router serves traffic.
type Router struct {
	opts     Options
	policy   *policy.Policy
	state    atomic.Pointer[state]
	proxy    *httputil.ReverseProxy
	upstream http.RoundTripper

	mu       sync.Mutex
	failures map[string]int // consecutive passive failures per instance
}

// New returns a router with no document; it answers 503 until Apply.
func New(opts Options) *Router {
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 3
	}
	if opts.EjectBase <= 0 {
		opts.EjectBase = time.Second
	}
	if opts.EjectMax <= 0 {
		opts.EjectMax = 30 * time.Second
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 16 << 20
	}
	r := &Router{opts: opts, policy: policy.New(opts.Tuning), failures: map[string]int{}}
	if r.opts.Metrics == nil {
		r.opts.Metrics = metrics.New(r.Gauges())
	}
	r.upstream = opts.Transport
	if r.upstream == nil {
		r.upstream = NewTransport()
	}
	r.proxy = &httputil.ReverseProxy{
		Rewrite:        r.rewrite,
		Transport:      roundTripFunc(r.roundTrip),
		ModifyResponse: r.modifyResponse,
		ErrorHandler:   r.proxyError,
		ErrorLog:       nil,
		BufferPool:     bufferPool{},
	}
	return r
}

// NewTransport is tuned for many concurrent, long-lived requests to a few
// backends on the cluster network: generous idle pools (so bursts do not
// pay for new connections), short dial timeout (so a dead pod fails over
// fast), and no response timeout (generations are long).
func NewTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: 0,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
	}
}

// Gauges are the values metrics read from the router when scraped.
func (r *Router) Gauges() metrics.Gauges {
	return metrics.Gauges{
		IndexEntries: func() float64 { return float64(r.policy.IndexEntries()) },
		IndexBytes:   func() float64 { return float64(r.policy.MemoryBytes()) },
		InFlight: func(report func(backend string, n float64)) {
			for _, in := range r.policy.Instances() {
				report(in.ID, float64(r.policy.InFlight(in.ID)))
			}
		},
	}
}

// Metrics are the router's metrics.
func (r *Router) Metrics() *metrics.Metrics { return r.opts.Metrics }

// Policy exposes the policy (metrics, tests).
func (r *Router) Policy() *policy.Policy { return r.policy }

// Apply installs a routing document; it is the config loader's Apply.
func (r *Router) Apply(doc *routingv1alpha1.Document) error {
	strategy := policy.Strategy(doc.Strategy)
	if r.opts.StrategyOverride != "" {
		strategy = r.opts.StrategyOverride
	}
	cfg := policy.Config{
		Strategy:             strategy,
		Model:                doc.Model,
		HashSeed:             doc.HashSeed,
		PrefixLength:         doc.PrefixAware.PrefixLength,
		ConcurrencyThreshold: doc.PrefixAware.ConcurrencyThreshold,
		Adapters:             make(map[string][]string, len(doc.Adapters)),
	}
	for _, in := range doc.Instances {
		cfg.Instances = append(cfg.Instances, policy.Instance{ID: in.ID, Address: in.Address, Weight: in.InstanceWeight()})
	}
	for _, a := range doc.Adapters {
		cfg.Adapters[a.Name] = a.Ready
	}
	prev := r.state.Load()
	if err := r.policy.Update(cfg); err != nil {
		return fmt.Errorf("apply routing document: %w", err)
	}
	r.state.Store(&state{doc: doc, strategy: strategy})
	r.opts.Metrics.ConfigGeneration.Set(float64(doc.Generation))
	keep := map[string]bool{}
	for _, in := range doc.Instances {
		keep[in.ID] = true
		r.opts.Metrics.BackendHealthy.WithLabelValues(in.ID).Set(boolGauge(r.policy.Healthy(in.ID)))
	}
	if prev != nil {
		for _, in := range prev.doc.Instances {
			if !keep[in.ID] {
				r.opts.Metrics.BackendHealthy.DeleteLabelValues(in.ID)
			}
		}
	}
	return nil
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Ready reports whether a document with at least one instance is in force.
func (r *Router) Ready() bool {
	s := r.state.Load()
	return s != nil && len(s.doc.Instances) > 0
}

// Handler serves the traffic port.
func (r *Router) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /invocations", func(w http.ResponseWriter, req *http.Request) { r.serveInference(w, req, endpointInvocations) })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, req *http.Request) { r.serveInference(w, req, endpointChat) })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, req *http.Request) { r.serveInference(w, req, endpointCompletions) })
	mux.HandleFunc("GET /v1/models", r.serveModels)
	mux.HandleFunc("GET /ping", r.serveHealthz)
	r.HealthRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, req *http.Request) {
		writeError(w, http.StatusNotFound, "invalid_request_error", "not_found", "", "no route for "+req.Method+" "+req.URL.Path, 0)
	})
	return mux
}

// HealthRoutes adds /healthz (the process serves) and /readyz (a routing
// document with instances is in force).
func (r *Router) HealthRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", r.serveHealthz)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !r.Ready() {
			http.Error(w, "no routing document with instances yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
}

func (r *Router) serveHealthz(w http.ResponseWriter, _ *http.Request) {
	_, _ = io.WriteString(w, "ok\n")
}

type endpoint int

const (
	endpointInvocations endpoint = iota
	endpointChat
	endpointCompletions
)

// route is the per-request state the transport needs, carried in the
// request context from the handler through ReverseProxy.
type route struct {
	choice   *policy.Choice
	body     []byte
	start    time.Time
	stream   bool
	attempts int
}

type routeKey struct{}

func (r *Router) serveInference(w http.ResponseWriter, req *http.Request, ep endpoint) {
	start := time.Now()
	st := r.state.Load()
	if st == nil {
		r.reject(w, "", http.StatusServiceUnavailable, "service_unavailable", "no_routing_config", "", "the router has no routing configuration yet", 1)
		return
	}
	body, bad := r.readBody(w, req)
	decideStart := time.Now()
	var x extract.Request
	if bad == nil {
		x, bad = r.extractRouting(req, st, ep, body)
	}
	if bad != nil {
		r.reject(w, st.strategy, bad.status, "invalid_request_error", bad.code, bad.param, bad.msg, 0)
		return
	}
	choice, err := r.policy.Pick(policy.Request{Model: x.Model, Tenant: x.Tenant, Text: x.Text, WindowBytes: x.WindowBytes})
	x.Release() // the policy keeps hashes, never the text
	r.opts.Metrics.DecisionDuration.Observe(time.Since(decideStart).Seconds())
	switch {
	case errors.Is(err, policy.ErrUnknownModel):
		r.reject(w, st.strategy, http.StatusNotFound, "invalid_request_error", "model_not_found", "model",
			fmt.Sprintf("The model `%s` does not exist.", x.Model), 0)
		return
	case err != nil:
		r.reject(w, st.strategy, http.StatusServiceUnavailable, "service_unavailable", "no_instance", "",
			"no instance can serve this model right now", 1)
		return
	}
	if choice.Spill != policy.SpillNone {
		r.opts.Metrics.Spills.WithLabelValues(choice.Spill).Inc()
	}
	if choice.Strategy == policy.PrefixAware {
		r.opts.Metrics.PrefixMatchChars.Observe(float64(choice.MatchChars))
	}
	if ep != endpointInvocations && x.Tenant != "" && !x.HasCacheSalt {
		body = extract.WithCacheSalt(body, x.Tenant)
	}
	rt := &route{choice: choice, body: body, start: start, stream: x.Stream}
	r.forward(w, req, rt, string(st.strategy))
}

// forward proxies with the route attached and settles the accounting.
func (r *Router) forward(w http.ResponseWriter, req *http.Request, rt *route, strategy string) {
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		// The backend may have changed on retry; settle on the final one.
		final := rt.choice.Instance().ID
		rt.choice.Done()
		outcome := sw.outcome(req.Context())
		r.opts.Metrics.Requests.WithLabelValues(final, strategy, outcome).Inc()
		r.opts.Log.V(2).Info("request", "path", req.URL.Path, "backend", final, "status", sw.status, "spill", rt.choice.Spill,
			"attempts", rt.attempts, "duration", time.Since(rt.start).String())
	}()
	out := req.WithContext(context.WithValue(req.Context(), routeKey{}, rt))
	r.proxy.ServeHTTP(sw, out)
}

func (r *Router) reject(w http.ResponseWriter, strategy policy.Strategy, status int, typ, code, param, msg string, retryAfter int) {
	outcome := "rejected"
	r.opts.Metrics.Requests.WithLabelValues("", string(strategy), outcome).Inc()
	writeError(w, status, typ, code, param, msg, retryAfter)
}

// serveModels answers GET /v1/models from a healthy backend.
func (r *Router) serveModels(w http.ResponseWriter, req *http.Request) {
	choice, err := r.policy.PickAny()
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "service_unavailable", "no_instance", "", "no instance is available", 1)
		return
	}
	st := r.state.Load()
	r.forward(w, req, &route{choice: choice, start: time.Now()}, string(st.strategy))
}

func (r *Router) rewrite(pr *httputil.ProxyRequest) {
	rt := pr.In.Context().Value(routeKey{}).(*route)
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = rt.choice.Instance().Address
	pr.Out.Host = ""
	pr.SetXForwarded()
	if rt.body != nil {
		pr.Out.Body = io.NopCloser(bytes.NewReader(rt.body))
		pr.Out.ContentLength = int64(len(rt.body))
		pr.Out.Header.Set("Content-Length", strconv.Itoa(len(rt.body)))
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// roundTrip sends the request, moving along the key's preference order when
// the connection fails before anything was sent (so the request cannot have
// reached a backend and is safe to send elsewhere), ejecting the failed
// instance for a back-off.
func (r *Router) roundTrip(req *http.Request) (*http.Response, error) {
	rt := req.Context().Value(routeKey{}).(*route)
	for {
		rt.attempts++
		in := rt.choice.Instance()
		out := req
		if rt.attempts > 1 {
			out = req.Clone(req.Context())
			out.URL.Host = in.Address
			if rt.body != nil {
				out.Body = io.NopCloser(bytes.NewReader(rt.body))
			}
		}
		resp, err := r.upstream.RoundTrip(out)
		if err == nil {
			r.succeeded(in.ID)
			return resp, nil
		}
		if req.Context().Err() != nil {
			return nil, err
		}
		if !isConnectError(err) {
			r.opts.Metrics.UpstreamErrors.WithLabelValues(in.ID, "response").Inc()
			return nil, err
		}
		r.opts.Metrics.UpstreamErrors.WithLabelValues(in.ID, "connect").Inc()
		r.failed(in.ID, "passive")
		if rt.attempts >= r.opts.MaxAttempts || !rt.choice.Next() {
			return nil, err
		}
		r.opts.Metrics.Retries.Inc()
		r.opts.Log.V(1).Info("connection failed; retrying on the next instance", "backend", in.ID, "next", rt.choice.Instance().ID, "error", err.Error())
	}
}

// isConnectError reports a failure to connect, before any request byte left.
func isConnectError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// failed ejects an instance for a back-off that doubles per consecutive
// failure.
func (r *Router) failed(id, source string) {
	r.mu.Lock()
	r.failures[id]++
	n := r.failures[id]
	r.mu.Unlock()
	d := r.opts.EjectBase << min(n-1, 16)
	if d > r.opts.EjectMax || d <= 0 {
		d = r.opts.EjectMax
	}
	r.policy.Eject(id, time.Now().Add(d))
	r.opts.Metrics.Ejections.WithLabelValues(id, source).Inc()
	r.opts.Metrics.BackendHealthy.WithLabelValues(id).Set(0)
	r.opts.Log.Info("backend ejected", "backend", id, "source", source, "for", d.String(), "consecutiveFailures", n)
}

func (r *Router) succeeded(id string) {
	r.mu.Lock()
	n := r.failures[id]
	delete(r.failures, id)
	r.mu.Unlock()
	if n > 0 {
		r.policy.Readmit(id)
		r.opts.Metrics.BackendHealthy.WithLabelValues(id).Set(1)
	}
}

func (r *Router) modifyResponse(resp *http.Response) error {
	rt := resp.Request.Context().Value(routeKey{}).(*route)
	r.opts.Metrics.TimeToFirstByte.WithLabelValues(strconv.FormatBool(rt.stream)).Observe(time.Since(rt.start).Seconds())
	return nil
}

func (r *Router) proxyError(w http.ResponseWriter, req *http.Request, err error) {
	if req.Context().Err() != nil {
		// The client went away; nobody is left to answer.
		return
	}
	rt := req.Context().Value(routeKey{}).(*route)
	r.opts.Log.Error(err, "upstream request failed", "backend", rt.choice.Instance().ID, "attempts", rt.attempts)
	status, code := http.StatusBadGateway, "upstream_error"
	if isConnectError(err) {
		status, code = http.StatusServiceUnavailable, "upstream_unavailable"
	}
	writeError(w, status, "service_unavailable", code, "", "the model server could not be reached", 1)
}

// statusWriter records the status for metrics and logs. Unwrap lets
// ReverseProxy's ResponseController reach the real writer's Flush.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusWriter) outcome(ctx context.Context) string {
	switch {
	case ctx.Err() != nil && s.status == 0:
		return "canceled"
	case s.status == 0:
		return "error"
	case s.status < 300:
		return "2xx"
	case s.status < 500:
		return "4xx"
	}
	return "5xx"
}

// bufferPool reuses ReverseProxy's copy buffers.
type bufferPool struct{}

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *copyBuffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { copyBuffers.Put(&b) }

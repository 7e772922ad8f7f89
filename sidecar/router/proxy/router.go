// Package proxy is the router's HTTP side: it reads each request, admits
// it (admission.go: the caller, the routing text, the salt, the key and
// the picker's choice), and forwards it with httputil.ReverseProxy,
// streaming the response back as it comes. The Endpoint Picker Protocol
// (package epp) runs the same admission and forwards nothing.
package proxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/router/flow"
	"github.com/warmroute/warmroute/sidecar/router/metrics"
	"github.com/warmroute/warmroute/sidecar/router/picker"
	"github.com/warmroute/warmroute/sidecar/router/policy"
	"github.com/warmroute/warmroute/sidecar/router/tenancy"
)

// Options configures the router; the router's flags of the same names
// document each limit. A zero or negative limit takes its default.
type Options struct {
	MaxBodyBytes, MaxBufferedBytes int64
	BodyReadTimeout                time.Duration
	// StreamIdleTimeout bounds the silence between chunks of a response
	// and a stream's wait for its headers; ResponseHeaderTimeout bounds
	// the wait for the headers of a response that is not streamed.
	StreamIdleTimeout, ResponseHeaderTimeout time.Duration
	// AllowLoopbackBackends accepts loopback instance addresses, which in
	// a pod would point at the router itself.
	AllowLoopbackBackends bool
	MaxAttempts           int
	// EjectBase and EjectMax bound the ejection back-off, which doubles
	// with each consecutive failure.
	EjectBase, EjectMax time.Duration
	HealthInterval      time.Duration // 0: no active health checks
	// StrategyOverride replaces the document's strategy (benchmarks).
	StrategyOverride policy.Strategy
	Tuning           policy.Tuning
	// Picker says who decides: "" or PickerSelf, this router; a host:port,
	// the sibling whose pick listener that is; PickerElected, whoever the
	// election names (the caller runs Picker().Elect).
	Picker  string
	Replica string
	// Keys key the block hashes and sign the pick API; every replica of
	// an endpoint needs the same (zero: this router decides alone).
	Keys        picker.Keys
	PickTimeout time.Duration
	// Salts derives each tenant's cache_salt (nil: a random key).
	Salts *tenancy.Salter
	// Auth says where the tenant comes from (zero: the client's claim).
	Auth tenancy.Auth
	// UpstreamAPIKey is vLLM's own --api-key, sent in place of the
	// client's Authorization only when Auth authenticates clients: with
	// Auth off the client's Authorization passes through for vLLM to
	// check, and sending the key for clients nobody checked would open a
	// way around it.
	UpstreamAPIKey string
	// HoldTimeout is how long a request that finds no instance is held
	// for one (hold.go); 0 answers it 503 at once.
	HoldTimeout time.Duration
	MaxHeld     int
	// OnHold (a request asks for an instance: scale from zero) and
	// OnForward (a request is sent: the endpoint's idle clock) may be nil
	// and must return at once.
	OnHold, OnForward func()
	Log               logr.Logger
}

// Who decides (Options.Picker).
const (
	PickerSelf    = "self"
	PickerElected = "elected"
)

// state is the part of the document the HTTP side needs.
type state struct {
	doc      *routingv1alpha1.Document
	strategy policy.Strategy
	ids      map[string]bool
	models   []byte // the /v1/models answer
}

// Router serves traffic.
type Router struct {
	opts Options
	m    *metrics.Metrics
	// picker decides; own is this replica's policy, which the picker
	// hashes and decides with while no picker answers, and whose counters
	// and instances the metrics and health checks read.
	picker   *picker.Picker
	own      *policy.Policy
	state    atomic.Pointer[state]
	proxy    *httputil.ReverseProxy
	upstream http.RoundTripper
	// seedFromDocument: no endpoint key was given (see New).
	seedFromDocument bool
	// upstreamAuth replaces the client's Authorization ("": passed
	// through), see UpstreamAPIKey.
	upstreamAuth string

	budget   budget
	holder   holder
	draining atomic.Bool // see Drain

	mu       sync.Mutex
	failures map[string]failure // per instance, since its last success
}

// failure is an instance's run of consecutive failures.
type failure struct {
	n int
	// stalled: the last failure was a stream gone silent, which a passing
	// /health check says nothing about, so only a completed request (or
	// the back-off running out) brings the instance back.
	stalled bool
}

// New returns a router with no document; it answers 503 until Apply.
func New(opts Options) *Router {
	// max maps a negative to zero, which cmp.Or replaces.
	opts.MaxAttempts = cmp.Or(max(opts.MaxAttempts, 0), DefaultMaxAttempts)
	opts.EjectBase = cmp.Or(max(opts.EjectBase, 0), DefaultEjectBase)
	opts.EjectMax = cmp.Or(max(opts.EjectMax, 0), DefaultEjectMax)
	opts.MaxBodyBytes = cmp.Or(max(opts.MaxBodyBytes, 0), DefaultMaxBodyBytes)
	opts.MaxBufferedBytes = cmp.Or(max(opts.MaxBufferedBytes, 0), DefaultMaxBufferedBytes)
	opts.BodyReadTimeout = cmp.Or(max(opts.BodyReadTimeout, 0), DefaultBodyReadTimeout)
	opts.StreamIdleTimeout = cmp.Or(max(opts.StreamIdleTimeout, 0), DefaultStreamIdleTimeout)
	opts.ResponseHeaderTimeout = cmp.Or(max(opts.ResponseHeaderTimeout, 0), DefaultResponseHeaderTimeout)
	opts.MaxHeld = cmp.Or(max(opts.MaxHeld, 0), DefaultMaxHeld)
	if opts.Salts == nil {
		opts.Salts = tenancy.RandomSalter()
	}
	// Without the endpoint's key the router decides alone: keys of its own
	// sign its pick API, so nobody can call it, and its block hashes are
	// keyed by the document's seed, so that routers deciding alone place
	// alike.
	seedFromDocument := opts.Keys.Zero()
	if seedFromDocument {
		opts.Keys = picker.RandomKeys()
	}
	r := &Router{opts: opts, own: policy.New(opts.Tuning), failures: map[string]failure{}, seedFromDocument: seedFromDocument,
		upstream: newTransport()}
	if opts.UpstreamAPIKey != "" && opts.Auth.Authenticated() {
		r.upstreamAuth = "Bearer " + opts.UpstreamAPIKey
	}
	r.budget.limit = opts.MaxBufferedBytes
	r.holder.wake = make(chan struct{}, 1)
	r.m = metrics.New(r.Gauges())
	r.proxy = &httputil.ReverseProxy{
		Rewrite:        r.rewrite,
		Transport:      roundTripFunc(r.roundTrip),
		ModifyResponse: r.modifyResponse,
		ErrorHandler:   r.proxyError,
		ErrorLog:       StdLogger(opts.Log.WithName("reverseproxy")),
		BufferPool:     bufferPool{},
	}
	r.picker = picker.New(picker.Options{Replica: opts.Replica, Keys: opts.Keys, Own: r.own, Tuning: opts.Tuning,
		PickTimeout: opts.PickTimeout, Tries: opts.MaxAttempts, Metrics: picker.NewMetrics(r.m.Registry), Log: opts.Log.WithName("picker")})
	switch opts.Picker {
	case "", PickerSelf:
		if err := r.picker.Lead(); err != nil {
			panic(err) // no configuration yet: Lead cannot fail
		}
	case PickerElected:
	default:
		r.picker.Follow(opts.Picker)
	}
	return r
}

// Defaults of the options (the router's flags show the same).
const (
	DefaultMaxAttempts       = 3
	DefaultEjectBase         = time.Second
	DefaultEjectMax          = 30 * time.Second
	DefaultMaxBodyBytes      = 16 << 20
	DefaultMaxBufferedBytes  = 1 << 30
	DefaultBodyReadTimeout   = 30 * time.Second
	DefaultStreamIdleTimeout = 60 * time.Second
	// DefaultResponseHeaderTimeout: a response that is not streamed has
	// its headers only once the whole completion is generated; 16 K tokens
	// at 20 tokens/s, a slow decode under load, take 13.7 minutes.
	DefaultResponseHeaderTimeout = 15 * time.Minute
)

// newTransport is tuned for many concurrent, long-lived requests to a few
// backends on the cluster network: generous idle pools, a short dial
// timeout (a dead pod fails over fast), no response timeout (generations
// are long). Pooled connections close after 4 s idle, before vLLM's
// server (uvicorn) closes them at 5 s: a request written onto a
// connection the server is closing that moment fails, a race left to the
// rare case roundTrip's stale-connection retry covers.
func newTransport() *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     4 * time.Second,
		DisableCompression:  true,
	}
}

// Gauges are the values metrics read from the router when scraped.
func (r *Router) Gauges() metrics.Gauges {
	perInstance := func(get func(id string) int64) func(report func(backend string, n float64)) {
		return func(report func(backend string, n float64)) {
			for _, in := range r.own.Instances() {
				report(in.ID, float64(get(in.ID)))
			}
		}
	}
	return metrics.Gauges{
		IndexEntries:  func() float64 { return float64(r.own.IndexEntries()) },
		IndexBytes:    func() float64 { return float64(r.own.MemoryBytes()) },
		Buffered:      func() float64 { return float64(r.budget.used.Load()) },
		Held:          func() float64 { return float64(r.heldCount()) },
		InFlight:      perInstance(r.own.InFlight),
		PrefillTokens: perInstance(r.own.PrefillTokens),
	}
}

// Options are the router's options, defaults applied.
func (r *Router) Options() Options { return r.opts }

// Metrics are the router's metrics.
func (r *Router) Metrics() *metrics.Metrics { return r.m }

// Picker exposes who decides (the election, the pick listener, tests).
func (r *Router) Picker() *picker.Picker { return r.picker }

// Apply installs a routing document; it is the config loader's Apply. An
// error leaves the document in force unchanged.
func (r *Router) Apply(doc *routingv1alpha1.Document) error {
	if !r.opts.AllowLoopbackBackends {
		for i, in := range doc.Instances {
			if routingv1alpha1.IsLoopbackAddress(in.Address) {
				return fmt.Errorf("apply routing document: instances[%d].address: %q is a loopback address, "+
					"which in a pod is the router itself (start the router with --allow-loopback-backends on a local cluster)", i, in.Address)
			}
		}
	}
	strategy := cmp.Or(r.opts.StrategyOverride, policy.Strategy(doc.Strategy))
	cfg := policy.Config{
		Strategy:             strategy,
		Model:                doc.Model,
		HashSeed:             r.opts.Keys.HashSeed,
		PrefixLength:         doc.PrefixAware.PrefixLength,
		ConcurrencyThreshold: doc.PrefixAware.ConcurrencyThreshold,
		Adapters:             make(map[string][]string, len(doc.Adapters)),
	}
	if r.seedFromDocument {
		cfg.HashSeed = doc.HashSeed
	}
	ids := make(map[string]bool, len(doc.Instances))
	for _, in := range doc.Instances {
		cfg.Instances = append(cfg.Instances, policy.Instance{ID: in.ID, Address: in.Address, Weight: in.InstanceWeight(), Draining: in.Draining})
		ids[in.ID] = true
	}
	for _, a := range doc.Adapters {
		cfg.Adapters[a.Name] = a.Ready
	}
	prev := r.state.Load()
	if err := r.picker.Update(cfg); err != nil {
		return fmt.Errorf("apply routing document: %w", err)
	}
	r.picker.SetFlow(flow.FromDocument(doc.FlowControl))
	r.state.Store(&state{doc: doc, strategy: strategy, ids: ids, models: modelList(doc, time.Now())})
	r.m.ConfigGeneration.Set(float64(doc.Generation))
	for _, in := range doc.Instances {
		r.m.BackendHealthy.WithLabelValues(in.ID).Set(boolGauge(r.picker.InRotation(in.ID)))
		r.m.BackendDraining.WithLabelValues(in.ID).Set(boolGauge(in.Draining))
	}
	// Forget removed instances: their series (instance names are pod
	// names, new with every rollout) and their failure runs.
	if prev != nil {
		for id := range prev.ids {
			if !ids[id] {
				r.m.DeleteBackend(id)
			}
		}
	}
	r.mu.Lock()
	for id := range r.failures {
		if !ids[id] {
			delete(r.failures, id)
		}
	}
	r.mu.Unlock()
	r.wakeHeld()
	return nil
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Ready reports whether a document is in force and the router is not
// draining. A document without instances keeps the router ready: while
// every instance restarts, clients get 503 with Retry-After from it rather
// than connection refused.
func (r *Router) Ready() bool { return r.state.Load() != nil && !r.draining.Load() }

// Drain starts a graceful shutdown: /readyz fails, so endpoints stop
// sending new traffic, and every response closes its connection, so that by
// the time the listener closes no client still holds a kept-alive
// connection to reuse (closing idle connections at once instead races with
// clients writing a request on them, which resets it). A leader hands
// over first, keeping its state for its successor, which starts warm.
func (r *Router) Drain() {
	r.draining.Store(true)
	r.picker.StepDown()
}

// Handler serves the traffic port. Until the first document arrives every
// path but /healthz answers 503.
func (r *Router) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /invocations", r.serveInference)
	mux.HandleFunc("POST /v1/chat/completions", r.serveInference)
	mux.HandleFunc("POST /v1/completions", r.serveInference)
	mux.HandleFunc("GET /v1/models", r.serveModels)
	mux.HandleFunc("GET /ping", serveOK)
	r.HealthRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, req *http.Request) {
		invalid(http.StatusNotFound, "not_found", "", "no route for "+req.Method+" "+truncate(req.URL.Path, maxEchoBytes)).write(w)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.draining.Load() {
			w.Header().Set("Connection", "close")
		}
		if r.state.Load() == nil && req.URL.Path != "/healthz" {
			w.Header().Set("Connection", "close") // the body is left unread
			noConfig().write(w)
			return
		}
		mux.ServeHTTP(w, req)
	})
}

// HealthRoutes adds /healthz (the process serves) and /readyz (Ready), on
// the traffic mux and on the metrics listener's, where the probes are.
func (r *Router) HealthRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", serveOK)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, req *http.Request) {
		if !r.Ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		serveOK(w, req)
	})
}

func serveOK(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") }

// route is the per-request state the transport needs, carried in the
// request context from the handler through ReverseProxy.
type route struct {
	*Placement
	bodyLen  int64 // of Placement.Body
	start    time.Time
	attempts int
	// staleRetried: the one retry on a pooled connection the backend had
	// closed is spent.
	staleRetried bool
	// cancel ends the upstream request, with errStreamIdle or
	// errHeaderTimeout as the cause when the backend fell silent.
	cancel   context.CancelCauseFunc
	upstream context.Context
	resp     *responseBody
}

type routeKey struct{}

// serveInference admits an inference request and forwards it. A refusal
// before the body is read whole (the caller's headers, the body's limits)
// closes the connection: the rest of the body is left unread.
func (r *Router) serveInference(w http.ResponseWriter, req *http.Request) {
	start := time.Now()
	id, refused := r.Identify(req.Header)
	if refused != nil {
		w.Header().Set("Connection", "close")
		r.reject(w, refused)
		return
	}
	body, held, refused := r.readBody(w, req)
	defer r.budget.release(held)
	if refused != nil {
		w.Header().Set("Connection", "close")
		r.reject(w, refused)
		return
	}
	p, refused := r.Admit(req.Context(), Admission{Method: req.Method, Path: req.URL.Path, Header: req.Header,
		Caller: id, Body: body, Held: held, Forward: true})
	if refused != nil {
		if req.Context().Err() != nil {
			r.CountUnplaced(OutcomeCanceled) // nobody is left to answer
			return
		}
		r.reject(w, refused)
		return
	}
	rt := &route{Placement: p, start: start}
	for _, piece := range p.Body {
		rt.bodyLen += int64(len(piece))
	}
	sw := &statusWriter{ResponseWriter: w}
	rt.upstream, rt.cancel = context.WithCancelCause(context.WithValue(req.Context(), routeKey{}, rt))
	defer func() {
		// Runs on ReverseProxy's http.ErrAbortHandler panic too (a stream
		// cut mid-way), which it lets pass on to the server.
		rt.cancel(nil)
		// The backend may have changed on retry; settle on the final one.
		outcome := r.settle(req.Context(), rt, sw)
		rt.Finish(outcome)
		r.opts.Log.V(2).Info("request", "path", req.URL.Path, "backend", rt.Instance().ID, "status", sw.status, "outcome", outcome,
			"spill", rt.Spill, "attempts", rt.attempts, "duration", time.Since(rt.start).String())
	}()
	r.proxy.ServeHTTP(sw, req.WithContext(rt.upstream))
}

// settle names a finished request's outcome and books the backend's part
// in it: a stream cut by the client, by the backend, or by a timeout is
// not a success, whatever status went out first.
func (r *Router) settle(client context.Context, rt *route, sw *statusWriter) string {
	id := rt.Instance().ID
	resp := rt.resp
	cause := context.Cause(rt.upstream)
	switch {
	case sw.status == 0 && client.Err() != nil:
		return OutcomeCanceled
	case sw.status == 0:
		return "error"
	case errors.Is(cause, errStreamIdle), errors.Is(cause, errHeaderTimeout):
		label := "stream_idle"
		if errors.Is(cause, errHeaderTimeout) {
			label = "header_timeout"
		}
		r.m.UpstreamErrors.WithLabelValues(id, label).Inc()
		r.failed(id, "passive", true)
		return "upstream_timeout"
	case client.Err() != nil || sw.writeErr != nil:
		return OutcomeClientDisconnect
	case resp != nil && resp.readErr != nil:
		r.m.UpstreamErrors.WithLabelValues(id, "reset").Inc()
		return "upstream_reset"
	}
	if resp != nil && resp.eof {
		r.succeeded(id, false)
	}
	return StatusOutcome(sw.status)
}

// Outcomes of warmroute_router_requests_total that the Endpoint Picker
// Protocol's requests share with the proxy's.
const (
	// OutcomeRejected: answered by the router, placed nowhere.
	OutcomeRejected = "rejected"
	// OutcomeCanceled: the client left before the response began.
	OutcomeCanceled = "canceled"
	// OutcomeClientDisconnect: the client left during the response.
	OutcomeClientDisconnect = "client_disconnect"
)

// StatusOutcome is the outcome of a response that ran to its end: its
// status class, 2xx, 4xx or 5xx.
func StatusOutcome(status int) string {
	switch {
	case status < 300:
		return "2xx"
	case status < 500:
		return "4xx"
	}
	return "5xx"
}

func (r *Router) reject(w http.ResponseWriter, refused *Refusal) {
	r.CountUnplaced(OutcomeRejected)
	refused.write(w)
}

// countChoice records what a decision did beyond its pick: spills, cold
// placements, key moves, the matched prefix.
func (r *Router) countChoice(choice *picker.Ticket) {
	if choice.Spill != policy.SpillNone {
		r.m.Spills.WithLabelValues(choice.Spill).Inc()
	}
	if choice.ColdPlaced {
		r.m.ColdPlacements.Inc()
	}
	if choice.Moved != policy.MoveNone {
		r.m.KeyMoves.WithLabelValues(choice.Moved).Inc()
	}
	if choice.Strategy == policy.PrefixAware {
		r.m.PrefixMatchChars.Observe(float64(choice.MatchChars))
	}
}

// countRequest counts a finished request in requests_total on the
// instance it ended on ("" when refused before placement).
func (r *Router) countRequest(backend, strategy, outcome string) {
	r.m.Requests.WithLabelValues(backend, strategy, outcome).Inc()
	if st := r.state.Load(); backend != "" && st != nil && !st.ids[backend] {
		// Removed while this request ran: do not bring its series back.
		r.m.DeleteBackend(backend)
	}
}

// serveModels answers GET /v1/models from the document: the base model and
// every adapter ready on some instance, which no single instance can tell
// (each holds only its own adapters). With API keys it too needs one:
// adapter names are the users' business.
func (r *Router) serveModels(w http.ResponseWriter, req *http.Request) {
	if _, refused := r.Identify(req.Header); refused != nil {
		w.Header().Set("Connection", "close")
		refused.write(w)
		return
	}
	st := r.state.Load()
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(st.models)))
	_, _ = w.Write(st.models)
}

// authorize replaces the client's credentials with what vLLM is sent
// (see Options.UpstreamAPIKey).
func (r *Router) authorize(h http.Header) {
	r.opts.Auth.Strip(h)
	if r.upstreamAuth != "" {
		h.Set("Authorization", r.upstreamAuth)
	}
}

func (r *Router) rewrite(pr *httputil.ProxyRequest) {
	rt := pr.In.Context().Value(routeKey{}).(*route)
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = rt.Instance().Address
	pr.Out.Host = ""
	pr.SetXForwarded()
	r.authorize(pr.Out.Header)
	if rt.Body != nil {
		pr.Out.Body = rt.newBody()
		// GetBody lets the transport resend on a fresh connection when a
		// pooled one fails before anything was written.
		pr.Out.GetBody = func() (io.ReadCloser, error) { return rt.newBody(), nil }
		// The transport sends this, never a Content-Length header.
		pr.Out.ContentLength = rt.bodyLen
	}
}

// newBody reads the body to send from its start.
func (rt *route) newBody() io.ReadCloser {
	b := net.Buffers(slices.Clone(rt.Body)) // reading consumes the list
	return io.NopCloser(&b)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// roundTrip sends the request, moving along the key's preference order when
// the connection fails before anything was sent (so the request cannot have
// reached a backend and is safe to send elsewhere), ejecting the failed
// instance for a back-off. A pooled connection that fails with no response
// is retried once on the same instance: that is the backend closing an
// idle keep-alive connection as the request went out, not a dead backend.
func (r *Router) roundTrip(req *http.Request) (*http.Response, error) {
	rt := req.Context().Value(routeKey{}).(*route)
	for {
		rt.attempts++
		in := rt.Instance()
		out := req
		if rt.attempts > 1 {
			out = req.Clone(req.Context())
			out.URL.Host = in.Address
			if rt.Body != nil {
				out.Body = rt.newBody()
			}
		}
		var reused bool
		var deadline headerDeadline
		after := r.headerTimeout(rt.stream)
		out = out.WithContext(httptrace.WithClientTrace(out.Context(), &httptrace.ClientTrace{
			GotConn:      func(c httptrace.GotConnInfo) { reused = c.Reused; deadline.arm(rt, after) },
			WroteRequest: func(httptrace.WroteRequestInfo) { deadline.arm(rt, after) },
		}))
		resp, err := r.upstream.RoundTrip(out)
		deadline.stop()
		if err == nil {
			r.succeeded(in.ID, true) // a stall run needs a completed response
			return resp, nil
		}
		if req.Context().Err() != nil {
			return nil, err
		}
		if reused && !rt.staleRetried && !isConnectError(err) {
			rt.staleRetried = true
			r.m.StaleConnRetries.Inc()
			r.opts.Log.V(1).Info("pooled connection closed by the backend; retrying on a new one", "backend", in.ID, "error", err.Error())
			continue
		}
		if !isConnectError(err) {
			r.m.UpstreamErrors.WithLabelValues(in.ID, "response").Inc()
			return nil, err
		}
		r.m.UpstreamErrors.WithLabelValues(in.ID, "connect").Inc()
		r.failed(in.ID, "passive", false)
		if rt.attempts >= r.opts.MaxAttempts || !rt.Next() {
			return nil, err
		}
		r.m.Retries.Inc()
		r.opts.Log.V(1).Info("connection failed; retrying on the next instance", "backend", in.ID, "next", rt.Instance().ID, "error", err.Error())
	}
}

// isConnectError reports a failure to connect, before any request byte left.
func isConnectError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// failed ejects an instance for a back-off that doubles per consecutive
// failure; stalled marks a stream gone silent.
func (r *Router) failed(id, source string, stalled bool) {
	r.mu.Lock()
	if st := r.state.Load(); st != nil && !st.ids[id] {
		r.mu.Unlock() // removed meanwhile; nothing to eject
		return
	}
	f := r.failures[id]
	f.n++
	f.stalled = stalled || f.stalled
	r.failures[id] = f
	r.mu.Unlock()
	d := r.opts.EjectBase << min(f.n-1, 16)
	if d > r.opts.EjectMax || d <= 0 {
		d = r.opts.EjectMax
	}
	r.picker.Eject(id, time.Now().Add(d))
	r.m.Ejections.WithLabelValues(id, source).Inc()
	r.m.BackendHealthy.WithLabelValues(id).Set(0)
	r.opts.Log.Info("backend ejected", "backend", id, "source", source, "for", d.String(), "consecutiveFailures", f.n, "stalled", f.stalled)
}

// succeeded ends an instance's failure run and readmits it. Only a
// completed response vouches for an instance whose streams stall: a
// health check or a response's headers (partial) leave it to its
// back-off.
func (r *Router) succeeded(id string, partial bool) {
	r.mu.Lock()
	f, ok := r.failures[id]
	if ok && partial && f.stalled {
		r.mu.Unlock()
		return
	}
	delete(r.failures, id)
	r.mu.Unlock()
	if ok {
		r.picker.Readmit(id)
		r.m.BackendHealthy.WithLabelValues(id).Set(1)
		r.wakeHeld()
	}
}

// modifyResponse wraps the backend's body (see responseBody) and arms the
// idle timer, which cancels the upstream request with errStreamIdle.
func (r *Router) modifyResponse(resp *http.Response) error {
	rt := resp.Request.Context().Value(routeKey{}).(*route)
	r.m.TimeToFirstByte.WithLabelValues(strconv.FormatBool(rt.stream)).Observe(time.Since(rt.start).Seconds())
	mediaType, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
	rt.resp = &responseBody{
		ReadCloser: resp.Body, rt: rt,
		sse:  strings.EqualFold(strings.TrimSpace(mediaType), "text/event-stream"),
		idle: time.AfterFunc(r.opts.StreamIdleTimeout, func() { rt.cancel(errStreamIdle) }),
	}
	resp.Body = rt.resp
	return nil
}

func (r *Router) proxyError(w http.ResponseWriter, req *http.Request, err error) {
	rt := req.Context().Value(routeKey{}).(*route)
	switch {
	case errors.Is(context.Cause(rt.upstream), errHeaderTimeout):
		// The backend's failure is booked in settle.
		r.opts.Log.Info("backend sent no response headers in time", "backend", rt.Instance().ID, "timeout", r.headerTimeout(rt.stream).String())
		unavailable(http.StatusGatewayTimeout, "upstream_timeout", "the model server did not answer in time", 0).write(w)
	case req.Context().Err() != nil:
		// The client went away; nobody is left to answer.
	default:
		r.opts.Log.Error(err, "upstream request failed", "backend", rt.Instance().ID, "attempts", rt.attempts)
		status, code := http.StatusBadGateway, "upstream_error"
		if isConnectError(err) {
			status, code = http.StatusServiceUnavailable, "upstream_unavailable"
		}
		unavailable(status, code, "the model server could not be reached", 1).write(w)
	}
}

// statusWriter records the status for metrics and logs. Unwrap lets
// ReverseProxy's ResponseController reach the real writer's Flush.
type statusWriter struct {
	http.ResponseWriter
	status   int
	writeErr error // the client stopped taking the response
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
	n, err := s.ResponseWriter.Write(b)
	if err != nil && s.writeErr == nil {
		s.writeErr = err
	}
	return n, err
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// bufferPool reuses ReverseProxy's copy buffers.
type bufferPool struct{}

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *copyBuffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { copyBuffers.Put(&b) }

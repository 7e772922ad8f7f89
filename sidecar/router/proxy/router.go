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

// Options configures the router.
type Options struct {
	// MaxBodyBytes is the largest request body accepted (413 above it).
	MaxBodyBytes int64
	// MaxBufferedBytes bounds the request bodies held at once across all
	// requests (503 with Retry-After past it).
	MaxBufferedBytes int64
	// BodyReadTimeout bounds the time a client has to send its body (408).
	BodyReadTimeout time.Duration
	// StreamIdleTimeout bounds the silence between chunks of a backend's
	// response, and a stream's wait for its response headers; a backend
	// that stalls is cut off and ejected.
	StreamIdleTimeout time.Duration
	// ResponseHeaderTimeout bounds a response that is not streamed from
	// the request written to its headers, which come with the whole
	// completion; past it the client gets 504 and the backend is ejected.
	ResponseHeaderTimeout time.Duration
	// AllowLoopbackBackends accepts loopback instance addresses (local
	// clusters and tests); in a cluster they would point at the router's
	// own pod.
	AllowLoopbackBackends bool
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
	// Picker says who decides: "" or PickerSelf, this router (alone, or
	// the leader of a fixed set); a host:port, the sibling whose pick
	// listener that is; PickerElected, whoever the election names (the
	// caller runs Picker().Elect).
	Picker string
	// Replica names this router to the picker.
	Replica string
	// Keys key the block hashes and sign the pick API; every replica of
	// an endpoint needs the same (zero: keys of this process's own, for a
	// router that decides alone).
	Keys picker.Keys
	// PickTimeout bounds a pick call (0: picker.DefaultPickTimeout).
	PickTimeout time.Duration
	// Salts derives each tenant's cache_salt (nil: a random key of this
	// process's own, see tenancy.RandomSalter).
	Salts *tenancy.Salter
	// Auth says where the tenant comes from (zero: the client's claim,
	// unauthenticated).
	Auth tenancy.Auth
	// UpstreamAPIKey is vLLM's own API key (its --api-key). The router
	// sends it as "Authorization: Bearer <key>" on every forwarded request,
	// but only when Auth authenticates clients: the router has then
	// checked the client and removed whatever Authorization the client
	// sent. With Auth off the client's own Authorization passes through
	// for vLLM to check, and the key is not used: sending it for clients
	// nobody checked would open a way around vLLM's key.
	UpstreamAPIKey string
	// HoldTimeout is how long a request that finds no instance is held
	// for one (see hold.go); 0 answers it 503 at once.
	HoldTimeout time.Duration
	// MaxHeld bounds the requests held at once (0: DefaultMaxHeld).
	MaxHeld int
	// OnHold is called as requests are held (nil: nothing); it asks for
	// an instance (scale from zero) and must return at once.
	OnHold func()
	// OnForward is called as a request is sent to an instance (nil:
	// nothing); it records that the endpoint is in use (its idle clock)
	// and must return at once.
	OnForward func()
	// Transport overrides the upstream transport (tests).
	Transport http.RoundTripper
	Log       logr.Logger
	Metrics   *metrics.Metrics
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
	// picker decides, and answers every question of a decision (keys,
	// rotation). own is this replica's policy, which the picker hashes
	// and decides with while no picker answers; the router reads its
	// counters for metrics and the instances for health checks.
	picker   *picker.Picker
	own      *policy.Policy
	state    atomic.Pointer[state]
	proxy    *httputil.ReverseProxy
	upstream http.RoundTripper
	// seedFromDocument: no endpoint key was given (see New).
	seedFromDocument bool
	// upstreamAuth is the Authorization value sent to vLLM in place of
	// the client's ("" to pass the client's through), see UpstreamAPIKey.
	upstreamAuth string

	budget budget
	holder holder
	// draining: shutting down (Drain), so not ready and closing each
	// client connection after its response.
	draining atomic.Bool

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
	// An unset or non-positive limit takes its default (max maps a
	// negative to zero, which cmp.Or replaces).
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
	// Without the endpoint's key the router decides alone: nobody can
	// call its pick API (keys of its own sign it), no hash leaves it, and
	// its block hashes are keyed by the routing document's seed, as every
	// such router's are, so that routers deciding alone place alike.
	seedFromDocument := opts.Keys.Zero()
	if seedFromDocument {
		opts.Keys = picker.RandomKeys()
	}
	r := &Router{opts: opts, own: policy.New(opts.Tuning), failures: map[string]failure{}, seedFromDocument: seedFromDocument}
	if opts.UpstreamAPIKey != "" && opts.Auth.Authenticated() {
		r.upstreamAuth = "Bearer " + opts.UpstreamAPIKey
	}
	r.budget.limit = opts.MaxBufferedBytes
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
		ErrorLog:       StdLogger(opts.Log.WithName("reverseproxy")),
		BufferPool:     bufferPool{},
	}
	r.picker = picker.New(picker.Options{Replica: opts.Replica, Keys: opts.Keys, Own: r.own, Tuning: opts.Tuning,
		PickTimeout: opts.PickTimeout, Tries: opts.MaxAttempts, Metrics: picker.NewMetrics(r.opts.Metrics.Registry), Log: opts.Log.WithName("picker")})
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

// upstreamIdleConnTimeout closes pooled backend connections before vLLM
// does: its server (uvicorn) closes a kept-alive connection after 5 s idle,
// and a request written onto a connection the server is closing that very
// moment fails. Closing ours first leaves that race to the rare case the
// stale-connection retry in roundTrip covers.
const upstreamIdleConnTimeout = 4 * time.Second

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
		IdleConnTimeout:       upstreamIdleConnTimeout,
		ExpectContinueTimeout: 0,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
	}
}

// Gauges are the values metrics read from the router when scraped.
func (r *Router) Gauges() metrics.Gauges {
	return metrics.Gauges{
		IndexEntries:  func() float64 { return float64(r.own.IndexEntries()) },
		IndexBytes:    func() float64 { return float64(r.own.MemoryBytes()) },
		Buffered:      func() float64 { return float64(r.budget.used.Load()) },
		Held:          func() float64 { return float64(r.heldCount()) },
		InFlight:      r.perInstance(r.own.InFlight),
		PrefillTokens: r.perInstance(r.own.PrefillTokens),
	}
}

// perInstance reports a policy figure for every configured instance.
func (r *Router) perInstance(get func(id string) int64) func(report func(backend string, n float64)) {
	return func(report func(backend string, n float64)) {
		for _, in := range r.own.Instances() {
			report(in.ID, float64(get(in.ID)))
		}
	}
}

// Options are the router's options, defaults applied.
func (r *Router) Options() Options { return r.opts }

// Metrics are the router's metrics.
func (r *Router) Metrics() *metrics.Metrics { return r.opts.Metrics }

// Policy exposes this replica's own policy (metrics, tests).
func (r *Router) Policy() *policy.Policy { return r.own }

// Picker exposes who decides (the election, the pick listener, tests).
func (r *Router) Picker() *picker.Picker { return r.picker }

// hashSeed keys the block hashes: the endpoint's key when the router has
// it, the document's seed for a router that decides alone.
func (r *Router) hashSeed(doc *routingv1alpha1.Document) uint64 {
	if r.seedFromDocument {
		return doc.HashSeed
	}
	return r.opts.Keys.HashSeed
}

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
	strategy := policy.Strategy(doc.Strategy)
	if r.opts.StrategyOverride != "" {
		strategy = r.opts.StrategyOverride
	}
	cfg := policy.Config{
		Strategy:             strategy,
		Model:                doc.Model,
		HashSeed:             r.hashSeed(doc),
		PrefixLength:         doc.PrefixAware.PrefixLength,
		ConcurrencyThreshold: doc.PrefixAware.ConcurrencyThreshold,
		Adapters:             make(map[string][]string, len(doc.Adapters)),
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
	r.opts.Metrics.ConfigGeneration.Set(float64(doc.Generation))
	for _, in := range doc.Instances {
		r.opts.Metrics.BackendHealthy.WithLabelValues(in.ID).Set(boolGauge(r.own.Healthy(in.ID)))
		r.opts.Metrics.BackendDraining.WithLabelValues(in.ID).Set(boolGauge(in.Draining))
	}
	// Forget removed instances: their series (instance names are pod
	// names, new with every rollout) and their failure runs.
	if prev != nil {
		for id := range prev.ids {
			if !ids[id] {
				r.opts.Metrics.DeleteBackend(id)
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
// clients writing a request on them, which resets it).
//
// A leader hands over first: it stops deciding, keeps its state for its
// successor and releases the Lease, so the successor starts warm; its own
// requests from then on are decided by the successor or the fallback.
func (r *Router) Drain() {
	r.draining.Store(true)
	r.picker.StepDown()
}

// Handler serves the traffic port. Until the first document arrives every
// path but /healthz answers 503.
func (r *Router) Handler() http.Handler {
	mux := r.routes()
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

func (r *Router) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /invocations", r.serveInference)
	mux.HandleFunc("POST /v1/chat/completions", r.serveInference)
	mux.HandleFunc("POST /v1/completions", r.serveInference)
	mux.HandleFunc("GET /v1/models", r.serveModels)
	mux.HandleFunc("GET /ping", r.serveHealthz)
	r.HealthRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, req *http.Request) {
		invalid(http.StatusNotFound, "not_found", "", "no route for "+req.Method+" "+truncate(req.URL.Path, maxEchoBytes)).write(w)
	})
	return mux
}

// HealthRoutes adds /healthz (the process serves) and /readyz (Ready), on
// the traffic mux and on the metrics listener's, where the probes are.
func (r *Router) HealthRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", r.serveHealthz)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !r.Ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
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
	*Placement
	bodyLen  int64 // of Placement.Body
	start    time.Time
	attempts int
	// staleRetried: the one retry on a pooled connection the backend had
	// closed is spent.
	staleRetried bool
	// cancel ends the upstream request (cause errStreamIdle on a stall).
	cancel   context.CancelCauseFunc
	upstream context.Context
	resp     *responseBody
	tokenAt  time.Time
}

// firstToken is called once, when the first streamed event carrying output
// passes through: the instance has finished this request's prefill, so its
// prompt leaves the instance's prefill load (a non-streamed response shows
// no such moment and stays counted as prefill until it is done).
func (rt *route) firstToken() {
	rt.Prefilled()
	rt.tokenAt = time.Now()
	rt.router.opts.Metrics.TimeToFirstToken.Observe(rt.tokenAt.Sub(rt.start).Seconds())
}

// fullResponse is called when a non-streaming response has been read whole.
func (rt *route) fullResponse() {
	rt.router.opts.Metrics.TimeToFullResponse.Observe(time.Since(rt.start).Seconds())
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
	body, held, err := r.readBody(w, req)
	defer r.budget.release(held)
	if err != nil {
		w.Header().Set("Connection", "close")
		r.reject(w, r.bodyRefusal(err))
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
	r.forward(w, req, rt)
}

// forward proxies with the route attached and settles the accounting.
func (r *Router) forward(w http.ResponseWriter, req *http.Request, rt *route) {
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
// in it: a stream cut by the client, by the backend, or by the idle timeout
// is not a success, whatever status went out first.
func (r *Router) settle(client context.Context, rt *route, sw *statusWriter) string {
	id := rt.Instance().ID
	resp := rt.resp
	switch {
	case sw.status == 0 && client.Err() != nil:
		return OutcomeCanceled
	case sw.status == 0:
		return "error"
	case errors.Is(context.Cause(rt.upstream), errStreamIdle):
		r.opts.Metrics.UpstreamErrors.WithLabelValues(id, "stream_idle").Inc()
		r.failed(id, "passive", true)
		return "upstream_timeout"
	case errors.Is(context.Cause(rt.upstream), errHeaderTimeout):
		r.opts.Metrics.UpstreamErrors.WithLabelValues(id, "header_timeout").Inc()
		r.failed(id, "passive", true)
		return "upstream_timeout"
	case client.Err() != nil || sw.writeErr != nil:
		return OutcomeClientDisconnect
	case resp != nil && resp.readErr != nil:
		r.opts.Metrics.UpstreamErrors.WithLabelValues(id, "reset").Inc()
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
		r.opts.Metrics.Spills.WithLabelValues(choice.Spill).Inc()
	}
	if choice.ColdPlaced {
		r.opts.Metrics.ColdPlacements.Inc()
	}
	if choice.Moved != policy.MoveNone {
		r.opts.Metrics.KeyMoves.WithLabelValues(choice.Moved).Inc()
	}
	if choice.Strategy == policy.PrefixAware {
		r.opts.Metrics.PrefixMatchChars.Observe(float64(choice.MatchChars))
	}
}

// countRequest counts a finished request in requests_total on the
// instance it ended on ("" when refused before placement).
func (r *Router) countRequest(backend, strategy, outcome string) {
	r.opts.Metrics.Requests.WithLabelValues(backend, strategy, outcome).Inc()
	if st := r.state.Load(); backend != "" && st != nil && !st.ids[backend] {
		// Removed while this request ran: do not bring its series back.
		r.opts.Metrics.DeleteBackend(backend)
	}
}

// serveModels answers GET /v1/models from the document: the base model and
// every adapter ready on some instance, which no single instance can tell
// (each holds only its own adapters). It reads no request body. With API
// keys it too needs one: adapter names are the users' business.
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

func (r *Router) rewrite(pr *httputil.ProxyRequest) {
	rt := pr.In.Context().Value(routeKey{}).(*route)
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = rt.Instance().Address
	pr.Out.Host = ""
	pr.SetXForwarded()
	r.opts.Auth.Strip(pr.Out.Header)
	if r.upstreamAuth != "" {
		pr.Out.Header.Set("Authorization", r.upstreamAuth)
	}
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
		deadline := newHeaderDeadline(rt, r.headerTimeout(rt.stream))
		out = out.WithContext(httptrace.WithClientTrace(out.Context(), &httptrace.ClientTrace{
			GotConn:      func(c httptrace.GotConnInfo) { reused = c.Reused; deadline.arm() },
			WroteRequest: func(httptrace.WroteRequestInfo) { deadline.arm() },
		}))
		resp, err := r.upstream.RoundTrip(out)
		deadline.stop()
		if err == nil {
			r.readmitAfterConnect(in.ID)
			return resp, nil
		}
		if req.Context().Err() != nil {
			return nil, err
		}
		if reused && !rt.staleRetried && !isConnectError(err) {
			rt.staleRetried = true
			r.opts.Metrics.StaleConnRetries.Inc()
			r.opts.Log.V(1).Info("pooled connection closed by the backend; retrying on a new one", "backend", in.ID, "error", err.Error())
			continue
		}
		if !isConnectError(err) {
			r.opts.Metrics.UpstreamErrors.WithLabelValues(in.ID, "response").Inc()
			return nil, err
		}
		r.opts.Metrics.UpstreamErrors.WithLabelValues(in.ID, "connect").Inc()
		r.failed(in.ID, "passive", false)
		if rt.attempts >= r.opts.MaxAttempts || !rt.Next() {
			return nil, err
		}
		r.opts.Metrics.Retries.Inc()
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
	r.opts.Metrics.Ejections.WithLabelValues(id, source).Inc()
	r.opts.Metrics.BackendHealthy.WithLabelValues(id).Set(0)
	r.opts.Log.Info("backend ejected", "backend", id, "source", source, "for", d.String(), "consecutiveFailures", f.n, "stalled", f.stalled)
}

// succeeded ends an instance's failure run and readmits it. A health check
// (probe) cannot vouch for an instance whose streams stall while /health
// answers, so it leaves such an instance to its back-off.
func (r *Router) succeeded(id string, probe bool) {
	r.mu.Lock()
	f, ok := r.failures[id]
	if ok && probe && f.stalled {
		r.mu.Unlock()
		return
	}
	delete(r.failures, id)
	r.mu.Unlock()
	if ok {
		r.picker.Readmit(id)
		r.opts.Metrics.BackendHealthy.WithLabelValues(id).Set(1)
		r.wakeHeld()
	}
}

// readmitAfterConnect ends a run of connection failures once a request
// gets a response again; a stall run needs the response to complete.
func (r *Router) readmitAfterConnect(id string) {
	r.mu.Lock()
	f, ok := r.failures[id]
	r.mu.Unlock()
	if ok && !f.stalled {
		r.succeeded(id, false)
	}
}

// modifyResponse wraps the backend's body (see responseBody) and arms the
// idle timer, which cancels the upstream request with errStreamIdle.
func (r *Router) modifyResponse(resp *http.Response) error {
	rt := resp.Request.Context().Value(routeKey{}).(*route)
	r.opts.Metrics.TimeToFirstByte.WithLabelValues(strconv.FormatBool(rt.stream)).Observe(time.Since(rt.start).Seconds())
	mediaType, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
	rt.resp = &responseBody{
		ReadCloser: resp.Body, rt: rt, after: r.opts.StreamIdleTimeout,
		sse:  strings.EqualFold(strings.TrimSpace(mediaType), "text/event-stream"),
		idle: time.AfterFunc(r.opts.StreamIdleTimeout, func() { rt.cancel(errStreamIdle) }),
	}
	resp.Body = rt.resp
	return nil
}

func (r *Router) proxyError(w http.ResponseWriter, req *http.Request, err error) {
	rt := req.Context().Value(routeKey{}).(*route)
	if headerTimedOut(w, rt) {
		r.opts.Log.Info("backend sent no response headers in time", "backend", rt.Instance().ID, "timeout", r.headerTimeout(rt.stream).String())
		return
	}
	if req.Context().Err() != nil {
		// The client went away; nobody is left to answer.
		return
	}
	r.opts.Log.Error(err, "upstream request failed", "backend", rt.Instance().ID, "attempts", rt.attempts)
	status, code := http.StatusBadGateway, "upstream_error"
	if isConnectError(err) {
		status, code = http.StatusServiceUnavailable, "upstream_unavailable"
	}
	unavailable(status, code, "the model server could not be reached", 1).write(w)
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

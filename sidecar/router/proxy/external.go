package proxy

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/warmroute/warmroute/sidecar/router/extract"
	"github.com/warmroute/warmroute/sidecar/router/picker"
	"github.com/warmroute/warmroute/sidecar/router/policy"
	"github.com/warmroute/warmroute/sidecar/router/tenancy"
)

// Decided is a request the router placed for a caller that forwards it
// itself (the Endpoint Picker Protocol, sidecar/router/epp): the same
// identification, extraction, salting and decision serveInference makes,
// without the forwarding.
type Decided struct {
	// Ticket holds the decision until Done; the caller reports the first
	// token (Prefilled) and the end (Done).
	*picker.Ticket
	// Body is what goes to vLLM, in pieces (see route.body).
	Body [][]byte
	// RemoveHeaders are the request's headers vLLM must not see (the
	// tenant's, the client's credentials: tenancy.Auth.Strip), lower case.
	// vLLM's own key (Options.UpstreamAPIKey) is never part of the answer:
	// the gateway adds it (README, InferencePool).
	RemoveHeaders []string
	router        *Router
	strategy      string
}

// Finish ends the request (Ticket.Done) and counts it in
// warmroute_router_requests_total under outcome (the proxy's: 2xx, 4xx,
// 5xx, canceled, client_disconnect), on the instance it ended on.
// Calling it again counts nothing more.
func (d *Decided) Finish(outcome string) {
	if d.router == nil {
		return
	}
	id := d.Instance().ID
	d.Done()
	d.router.countRequest(id, d.strategy, outcome)
	d.router = nil
}

// CountUnplaced counts a request that ended before it was placed in
// warmroute_router_requests_total: outcome rejected for one answered with
// a Refusal (as the proxy counts its refusals), canceled for one whose
// client left first.
func (r *Router) CountUnplaced(outcome string) {
	strategy := ""
	if st := r.state.Load(); st != nil {
		strategy = string(st.strategy)
	}
	r.countRequest("", strategy, outcome)
}

// Refusal is the answer to a request the router will not place: status,
// headers and an OpenAI-style body, as the proxy would have written them.
type Refusal struct {
	Status int
	Header http.Header
	Body   []byte
}

func refusal(bad *badRequest) *Refusal { return refusalOn(httptest.NewRecorder(), bad) }

// refusalOn is bad written on rec, which may hold headers already
// (identify's WWW-Authenticate), less the hop-by-hop Connection: the
// gateway's own business.
func refusalOn(rec *httptest.ResponseRecorder, bad *badRequest) *Refusal {
	bad.write(rec)
	rec.Header().Del("Connection")
	return &Refusal{Status: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}
}

// Admit identifies the caller from the request's headers alone, as the
// proxy does before it reads a body: nil, or the refusal (401 with
// WWW-Authenticate, 400) to answer before any body is held.
func (r *Router) Admit(h http.Header) *Refusal {
	_, refused := r.admit(h)
	return refused
}

func (r *Router) admit(h http.Header) (tenancy.Identity, *Refusal) {
	rec := httptest.NewRecorder()
	id, bad := r.identify(rec, &http.Request{Header: h})
	if bad == nil {
		return id, nil
	}
	return id, refusalOn(rec, bad)
}

// TooLarge is the refusal of a body over MaxBodyBytes.
func (r *Router) TooLarge() *Refusal { return refusal(r.bodyRefusal(errBodyTooLarge)) }

// BodyTimedOut is the refusal of a body that took longer than
// BodyReadTimeout.
func (r *Router) BodyTimedOut() *Refusal { return refusal(r.bodyRefusal(errBodyTimeout)) }

// MaxBodyBytes is the largest request body the router accepts.
func (r *Router) MaxBodyBytes() int64 { return r.opts.MaxBodyBytes }

// Hold takes n bytes of the router-wide body budget, or reports false
// (then Overloaded is the answer); Release gives them back.
func (r *Router) Hold(n int64) bool { return r.budget.reserve(n) }

// Release returns bytes taken by Hold.
func (r *Router) Release(n int64) { r.budget.release(n) }

// Overloaded is the refusal while the body budget is spent: the request
// is shed, 429 as the Endpoint Picker Protocol asks (the proxy answers 503
// with Retry-After, which its own clients retry alike).
func (r *Router) Overloaded() *Refusal {
	return refusal(&badRequest{status: http.StatusTooManyRequests, typ: "rate_limit_exceeded", code: "router_overloaded",
		msg: "the router is holding as many request bodies as it may; retry shortly", retryAfter: 1})
}

// Decide places a request given its method, path, headers and whole body.
// Inference paths are read as the proxy reads them; any other request
// (GET /v1/models, /health) carries no routing text and is placed by
// load alone under the served model. The caller counts the request when
// it ends: Decided.Finish, or CountUnplaced for a refusal.
func (r *Router) Decide(ctx context.Context, method, path string, h http.Header, body []byte) (*Decided, *Refusal) {
	start := time.Now()
	st := r.state.Load()
	if st == nil {
		return nil, refusal(noConfig)
	}
	id, refused := r.admit(h)
	if refused != nil {
		return nil, refused
	}
	d := &Decided{router: r, strategy: string(st.strategy)}
	kept := h.Clone()
	r.opts.Auth.Strip(kept)
	for k := range h {
		if _, ok := kept[k]; !ok {
			d.RemoveHeaders = append(d.RemoveHeaders, strings.ToLower(k))
		}
	}
	var key policy.Key
	var x extract.Request
	var bad *badRequest
	ep, inference := inferencePath(method, path)
	if inference {
		x, bad = r.extractRouting(st, ep, body, id)
		if bad == nil {
			d.Body, bad = r.saltedBody(body, x)
		}
		if bad != nil {
			return nil, refusal(bad)
		}
		// The key refers to the routing text until the pick is made.
		key = r.policy.Key(policyRequest(x))
	} else {
		key = r.policy.Key(policy.Request{})
		d.Body = [][]byte{body}
	}
	t, err := r.picker.Pick(ctx, key)
	x.Release()
	r.opts.Metrics.DecisionDuration.Observe(time.Since(start).Seconds())
	// Every candidate ejected (the policy fails open) is no instance too:
	// the proxy tries one anyway and moves on when the connection fails; a
	// gateway has no such fallback, and the protocol asks for 503.
	t, err = r.inRotation(t, err)
	if errors.Is(err, policy.ErrNoInstance) && r.opts.OnHold != nil && waitsForInstance(st, key.Model) {
		// A gateway holds nothing for the picker: the request gets its
		// 503, and still asks for an instance (scale from zero), as a
		// request the proxy would hold does.
		r.opts.OnHold()
	}
	if err != nil {
		return nil, refusal(unpickable(err, key.Model))
	}
	r.countChoice(t)
	if inference {
		// The picker has the body: it sends the warm copy itself.
		r.warm(t, path, d.Body, h)
		if r.opts.OnForward != nil {
			r.opts.OnForward()
		}
	} else {
		t.Warmed(false)
	}
	d.Ticket = t
	return d, nil
}

func inferencePath(method, path string) (endpoint, bool) {
	if method != http.MethodPost {
		return 0, false
	}
	switch path {
	case "/invocations":
		return endpointInvocations, true
	case "/v1/chat/completions":
		return endpointChat, true
	case "/v1/completions":
		return endpointCompletions, true
	}
	return 0, false
}

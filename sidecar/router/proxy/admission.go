package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/warmroute/warmroute/sidecar/router/extract"
	"github.com/warmroute/warmroute/sidecar/router/picker"
	"github.com/warmroute/warmroute/sidecar/router/policy"
	"github.com/warmroute/warmroute/sidecar/router/tenancy"
)

// Admission is a request as the admission pipeline (Admit) takes it: the
// caller as its headers identified it (Identify, run before the body took
// any of the buffer budget) and its whole body.
type Admission struct {
	Method, Path string
	Header       http.Header
	Caller       tenancy.Identity
	Body         []byte
	// Held is the buffer budget the body holds, which a held request keeps
	// (see hold).
	Held int64
	// Forward: the router forwards the request itself (the proxy). It may
	// then hold a request that finds no instance (Options.HoldTimeout),
	// and, when it does not, try an ejected instance and move along the
	// decision's order when the connection fails. A caller that forwards
	// nothing (a gateway) can do neither: such a request is refused.
	Forward bool
}

// Placement is an admitted request: its decision, held until Finish, and
// the body that goes to the instance.
type Placement struct {
	// Ticket holds the decision; the caller reports the first token
	// (Prefilled) and the end (Finish).
	*picker.Ticket
	// Body is what goes to vLLM, in pieces: the client's body around the
	// router's cache_salt (extract.SaltedBody).
	Body     [][]byte
	stream   bool
	strategy string
	router   *Router
	finished bool
	// usage, while flow control is on, keeps the response's end, whose
	// usage settles the tenant's token rate limit (see Response).
	usage *usageTail
}

// Admit runs the admission pipeline: extract the routing text, salt the
// body, make the key, pick, check the pick is in rotation, and hold the
// request for an instance when the caller forwards it and holds. Inference
// paths are read as the proxy serves them; any other request (GET
// /v1/models, /health through a gateway) carries no routing text and is
// placed by load alone under the served model. The caller counts the
// request when it ends: Placement.Finish, or CountUnplaced for a refusal.
func (r *Router) Admit(ctx context.Context, in Admission) (*Placement, *Refusal) {
	start := time.Now()
	st := r.state.Load()
	if st == nil {
		return nil, noConfig()
	}
	p := &Placement{router: r, strategy: string(st.strategy)}
	var x extract.Request
	// The key refers to the routing text until the pick is made, which for
	// a held request is when an instance can take it (the picker is sent
	// hashes, never the text).
	defer func() { x.Release() }()
	ep, inference := inferencePath(in.Method, in.Path)
	if inference {
		var refused *Refusal
		if x, refused = r.extractRouting(st, ep, in.Body, in.Caller); refused == nil {
			p.Body, refused = r.saltedBody(in.Body, x)
		}
		if refused != nil {
			return nil, refused
		}
		p.stream = x.Stream
	} else {
		p.Body = [][]byte{in.Body}
	}
	s, refused := sender(in.Header, x.Tenant, st.doc.FlowControl)
	if refused != nil {
		return nil, refused
	}
	if st.doc.FlowControl != nil {
		p.usage = &usageTail{}
	}
	key := r.own.Key(policy.Request{Model: x.Model, Tenant: x.Tenant, Text: x.Text, WindowBytes: x.WindowBytes, PromptBytes: x.PromptBytes})
	t, err := r.picker.Pick(ctx, key, s)
	r.opts.Metrics.DecisionDuration.Observe(time.Since(start).Seconds())
	waits := waitsForInstance(st, key.Model)
	holds := in.Forward && r.opts.HoldTimeout > 0 && waits
	if holds || !in.Forward {
		t, err = r.inRotation(t, err)
	}
	if errors.Is(err, policy.ErrNoInstance) && waits {
		if holds {
			t, err = r.hold(ctx, key, s, in.Held)
		} else if r.opts.OnHold != nil {
			// Answered 503 at once, the request still asks for an
			// instance (scale from zero), as a held one does.
			r.opts.OnHold()
		}
	}
	if err != nil {
		return nil, r.unplaced(err, key.Model)
	}
	r.countChoice(t)
	p.Ticket = t
	if !inference {
		t.Warmed(false)
		return p, nil
	}
	r.warm(t, in.Path, p.Body, in.Header)
	if r.opts.OnForward != nil {
		r.opts.OnForward()
	}
	return p, nil
}

// Response is a piece of the response as it passes: its end tells the
// tokens the request used.
func (p *Placement) Response(chunk []byte) {
	if p.usage != nil {
		p.usage.write(chunk)
	}
}

// Finish ends the request (Ticket.Done) and counts it in
// warmroute_router_requests_total under outcome (2xx, 4xx, 5xx, canceled,
// client_disconnect), on the instance it ended on. Calling it again counts
// nothing more.
func (p *Placement) Finish(outcome string) {
	if p.finished {
		return
	}
	p.finished = true
	if p.usage != nil {
		p.Used(p.usage.tokens())
	}
	id := p.Instance().ID
	p.Done()
	p.router.countRequest(id, p.strategy, outcome)
}

// CountUnplaced counts a request that ended before it was placed in
// warmroute_router_requests_total: OutcomeRejected for one answered with a
// Refusal, OutcomeCanceled for one whose client left first.
func (r *Router) CountUnplaced(outcome string) {
	strategy := ""
	if st := r.state.Load(); st != nil {
		strategy = string(st.strategy)
	}
	r.countRequest("", strategy, outcome)
}

// unplaced is the answer to a request that found no instance.
func (r *Router) unplaced(err error, model string) *Refusal {
	if f := flowRefusal(err); f != nil {
		return f
	}
	switch {
	case errors.Is(err, policy.ErrUnknownModel):
		return invalid(http.StatusNotFound, "model_not_found", "model",
			fmt.Sprintf("The model `%s` does not exist.", truncate(model, maxEchoBytes)))
	case errors.Is(err, errHoldTimeout):
		return unavailable(http.StatusGatewayTimeout, "no_instance_in_time",
			"no instance could serve this model within "+r.opts.HoldTimeout.String()+"; retry later", 5)
	case errors.Is(err, errHoldFull):
		return unavailable(http.StatusServiceUnavailable, "router_overloaded",
			"no instance can serve this model right now and the router holds as many requests as it may; retry shortly", 1)
	}
	return unavailable(http.StatusServiceUnavailable, "no_instance", "no instance can serve this model right now", 1)
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

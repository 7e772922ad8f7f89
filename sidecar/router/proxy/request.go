package proxy

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/warmroute/warmroute/sidecar/router/extract"
	"github.com/warmroute/warmroute/sidecar/router/policy"
	"github.com/warmroute/warmroute/sidecar/router/tenancy"
)

// badRequest is a request refused before routing, as the client sees it.
type badRequest struct {
	status                int
	typ, code, param, msg string
	retryAfter            int
}

func invalid(status int, code, param, msg string) *badRequest {
	return &badRequest{status: status, typ: "invalid_request_error", code: code, param: param, msg: msg}
}

func (b *badRequest) write(w http.ResponseWriter) {
	writeError(w, b.status, b.typ, b.code, b.param, b.msg, b.retryAfter)
}

// noConfig answers every request until the first routing document.
var noConfig = &badRequest{status: http.StatusServiceUnavailable, typ: "service_unavailable", code: "no_routing_config",
	msg: "the router has no routing configuration yet", retryAfter: 1}

// unpickable is the answer to a request the policy found no instance for.
func unpickable(err error, model string) *badRequest {
	if errors.Is(err, policy.ErrUnknownModel) {
		return invalid(http.StatusNotFound, "model_not_found", "model",
			fmt.Sprintf("The model `%s` does not exist.", truncate(model, maxEchoBytes)))
	}
	return &badRequest{status: http.StatusServiceUnavailable, typ: "service_unavailable", code: "no_instance",
		msg: "no instance can serve this model right now", retryAfter: 1}
}

// readRequest reads the body within the router's limits (readBody) and
// turns a refusal into what the client sees. The caller releases held
// from the buffer budget once it no longer needs the body.
func (r *Router) readRequest(w http.ResponseWriter, req *http.Request) (body []byte, held int64, bad *badRequest) {
	body, held, err := r.readBody(w, req)
	if err == nil {
		return body, held, nil
	}
	// The body may be left unread: close the connection after answering.
	w.Header().Set("Connection", "close")
	return nil, held, r.bodyRefusal(err)
}

// bodyRefusal is the answer to a body readBody refused.
func (r *Router) bodyRefusal(err error) *badRequest {
	switch {
	case errors.Is(err, errBodyTooLarge):
		return invalid(http.StatusRequestEntityTooLarge, "request_too_large", "",
			fmt.Sprintf("request body exceeds %d bytes", r.opts.MaxBodyBytes))
	case errors.Is(err, errBodyTimeout):
		return invalid(http.StatusRequestTimeout, "request_timeout", "",
			fmt.Sprintf("the request body did not arrive within %s", r.opts.BodyReadTimeout))
	case errors.Is(err, errOverBudget):
		return &badRequest{status: http.StatusServiceUnavailable, typ: "service_unavailable", code: "router_overloaded",
			msg: "the router is holding as many request bodies as it may; retry shortly", retryAfter: 1}
	}
	return invalid(http.StatusBadRequest, "", "", "could not read the request body")
}

// policyRequest is what the policy is told of an extracted request.
func policyRequest(x extract.Request) policy.Request {
	return policy.Request{Model: x.Model, Tenant: x.Tenant, Text: x.Text, WindowBytes: x.WindowBytes, PromptBytes: x.PromptBytes}
}

// identify resolves who the client is from its headers (tenancy.Auth):
// with API keys a request without a known key, and with a trusted header a
// request without exactly one value of it, is refused here, before its
// body is read, with an OpenAI-style body that never quotes the key.
func (r *Router) identify(w http.ResponseWriter, req *http.Request) (tenancy.Identity, *badRequest) {
	id, outcome := r.opts.Auth.Identify(req.Header)
	if outcome == tenancy.Resolved {
		return id, nil
	}
	w.Header().Set("Connection", "close") // the body is left unread
	if outcome == tenancy.AmbiguousHeader {
		return id, invalid(http.StatusBadRequest, "ambiguous_tenant", id.Param,
			fmt.Sprintf("the %s header must be given once, with one value", id.Param))
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="warmroute"`) // every 401 names a scheme (RFC 9110 §15.5.2)
	if outcome == tenancy.MissingHeader {
		return id, invalid(http.StatusUnauthorized, "missing_tenant", id.Param,
			fmt.Sprintf("the %s header is required: requests must come through the authenticating gateway", id.Param))
	}
	msg := "Incorrect API key provided."
	if outcome == tenancy.MissingKey {
		msg = "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
	}
	return id, invalid(http.StatusUnauthorized, "invalid_api_key", "", msg)
}

// extractRouting reads what the policy needs from a body sent to ep, under
// the routing document in force, for the client id is.
func (r *Router) extractRouting(st *state, ep endpoint, body []byte, id tenancy.Identity) (extract.Request, *badRequest) {
	lim := extract.Limits{Window: st.doc.PrefixAware.PrefixLength}
	if st.strategy == policy.PrefixAware {
		lim.Lookahead = r.policy.LookaheadBytes()
	}
	var x extract.Request
	var err error
	switch ep {
	case endpointInvocations:
		x, err = extract.Invocations(body, id.Tenant, lim)
	case endpointChat:
		x, err = extract.OpenAI(extract.Chat, body, id.Tenant, lim)
	case endpointCompletions:
		x, err = extract.OpenAI(extract.Completions, body, id.Tenant, lim)
	}
	if err == nil && id.Claim {
		err = x.ClaimBodyTenant()
	}
	if err != nil {
		x.Release()
		param := extract.Param(err)
		if errors.Is(err, extract.ErrBadTenant) && param == "" {
			param = id.Param
		}
		return extract.Request{}, invalid(http.StatusBadRequest, "", param, err.Error())
	}
	return x, nil
}

// saltedBody is the body as it goes to vLLM: with the router's cache_salt
// for the tenant as its only one, and neither the client's cache_salt nor
// its prompt_cache_key (extract.SaltedBody). Every path's body was read
// whole as JSON by extractRouting already, /invocations included.
func (r *Router) saltedBody(body []byte, x extract.Request) ([][]byte, *badRequest) {
	pieces, err := extract.SaltedBody(body, r.opts.Salts.Salt(x.Tenant), x.TenantFields)
	if err != nil { // not expected: the body was read whole already
		return nil, invalid(http.StatusBadRequest, "", "", err.Error())
	}
	return pieces, nil
}

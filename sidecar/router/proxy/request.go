package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/warmroute/warmroute/sidecar/router/extract"
	"github.com/warmroute/warmroute/sidecar/router/policy"
	"github.com/warmroute/warmroute/sidecar/router/tenancy"
)

// noConfig answers every request until the first routing document.
func noConfig() *Refusal {
	return unavailable(http.StatusServiceUnavailable, "no_routing_config", "the router has no routing configuration yet", 1)
}

// bodyRefusal is the answer to a body readBody refused.
func (r *Router) bodyRefusal(err error) *Refusal {
	switch {
	case errors.Is(err, errBodyTooLarge):
		return invalid(http.StatusRequestEntityTooLarge, "request_too_large", "",
			fmt.Sprintf("request body exceeds %d bytes", r.opts.MaxBodyBytes))
	case errors.Is(err, errBodyTimeout):
		return invalid(http.StatusRequestTimeout, "request_timeout", "",
			fmt.Sprintf("the request body did not arrive within %s", r.opts.BodyReadTimeout))
	case errors.Is(err, errOverBudget):
		return unavailable(http.StatusServiceUnavailable, "router_overloaded", overloadedMsg, 1)
	}
	return invalid(http.StatusBadRequest, "", "", "could not read the request body")
}

// Identify resolves who the caller is from its headers alone
// (tenancy.Auth), before its body takes any of the buffer budget: with API
// keys a request without a known key, and with a trusted header a request
// without exactly one value of it, is refused, with an OpenAI-style body
// that never quotes the key.
func (r *Router) Identify(h http.Header) (tenancy.Identity, *Refusal) {
	id, outcome := r.opts.Auth.Identify(h)
	switch outcome {
	case tenancy.Resolved:
		return id, nil
	case tenancy.AmbiguousHeader:
		return id, invalid(http.StatusBadRequest, "ambiguous_tenant", id.Param,
			fmt.Sprintf("the %s header must be given once, with one value", id.Param))
	}
	var refused *Refusal
	switch outcome {
	case tenancy.MissingHeader:
		refused = invalid(http.StatusUnauthorized, "missing_tenant", id.Param,
			fmt.Sprintf("the %s header is required: requests must come through the authenticating gateway", id.Param))
	case tenancy.MissingKey:
		refused = invalid(http.StatusUnauthorized, "invalid_api_key", "",
			"You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
	default:
		refused = invalid(http.StatusUnauthorized, "invalid_api_key", "", "Incorrect API key provided.")
	}
	refused.Header.Set("WWW-Authenticate", `Bearer realm="warmroute"`) // every 401 names a scheme (RFC 9110 §15.5.2)
	return id, refused
}

// StrippedHeaders are the names, lower case, of the headers in h that vLLM
// must not see (the tenant's, the client's credentials: tenancy.Auth.Strip),
// for a caller that forwards the request itself. vLLM's own key
// (Options.UpstreamAPIKey) is never part of them: the gateway adds it.
func (r *Router) StrippedHeaders(h http.Header) []string {
	kept := h.Clone()
	r.opts.Auth.Strip(kept)
	var out []string
	for k := range h {
		if _, ok := kept[k]; !ok {
			out = append(out, strings.ToLower(k))
		}
	}
	return out
}

// extractRouting reads what the policy needs from a body sent to ep, under
// the routing document in force, for the client id is.
func (r *Router) extractRouting(st *state, ep endpoint, body []byte, id tenancy.Identity) (extract.Request, *Refusal) {
	lim := extract.Limits{Window: st.doc.PrefixAware.PrefixLength}
	if st.strategy == policy.PrefixAware {
		lim.Lookahead = r.own.LookaheadBytes()
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
func (r *Router) saltedBody(body []byte, x extract.Request) ([][]byte, *Refusal) {
	pieces, err := extract.SaltedBody(body, r.opts.Salts.Salt(x.Tenant), x.TenantFields)
	if err != nil { // not expected: the body was read whole already
		return nil, invalid(http.StatusBadRequest, "", "", err.Error())
	}
	return pieces, nil
}

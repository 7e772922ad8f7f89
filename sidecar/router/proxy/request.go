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

// inferencePaths read the routing text of each inference path's body.
var inferencePaths = map[string]func(body []byte, tenant string, lim extract.Limits) (extract.Request, error){
	"/invocations": extract.Invocations,
	"/v1/chat/completions": func(body []byte, tenant string, lim extract.Limits) (extract.Request, error) {
		return extract.OpenAI(extract.Chat, body, tenant, lim)
	},
	"/v1/completions": func(body []byte, tenant string, lim extract.Limits) (extract.Request, error) {
		return extract.OpenAI(extract.Completions, body, tenant, lim)
	},
}

// extractRouting reads what the policy needs from a body, under the
// routing document in force, for the client id is.
func (r *Router) extractRouting(st *state, read func([]byte, string, extract.Limits) (extract.Request, error), body []byte, id tenancy.Identity) (extract.Request, *Refusal) {
	lim := extract.Limits{Window: st.doc.PrefixAware.PrefixLength}
	if st.strategy == policy.PrefixAware {
		lim.Lookahead = r.picker.LookaheadBytes()
	}
	x, err := read(body, id.Tenant, lim)
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

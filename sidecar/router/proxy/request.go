package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/warmroute/warmroute/sidecar/router/extract"
	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// badRequest is a request refused before routing, as the client sees it.
type badRequest struct {
	status           int
	code, param, msg string
}

// readBody reads the request body within MaxBodyBytes.
func (r *Router) readBody(w http.ResponseWriter, req *http.Request) ([]byte, *badRequest) {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, r.opts.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, &badRequest{http.StatusRequestEntityTooLarge, "request_too_large", "",
				fmt.Sprintf("request body exceeds %d bytes", r.opts.MaxBodyBytes)}
		}
		return nil, &badRequest{http.StatusBadRequest, "", "", "could not read the request body"}
	}
	return body, nil
}

// extractRouting reads what the policy needs from a body sent to ep, under
// the routing document in force.
func (r *Router) extractRouting(req *http.Request, st *state, ep endpoint, body []byte) (extract.Request, *badRequest) {
	tenant := req.Header.Get(extract.TenantHeader)
	if tenant == "" {
		tenant = req.Header.Get(extract.TenantHeaderAlias)
	}
	lim := extract.Limits{Window: st.doc.PrefixAware.PrefixLength}
	if st.strategy == policy.PrefixAware {
		lim.Lookahead = r.policy.LookaheadBytes()
	}
	var x extract.Request
	var err error
	switch ep {
	case endpointInvocations:
		x, err = extract.Invocations(body, tenant, lim)
	case endpointChat:
		x, err = extract.OpenAI(extract.Chat, body, tenant, lim)
	case endpointCompletions:
		x, err = extract.OpenAI(extract.Completions, body, tenant, lim)
	}
	if err != nil {
		param := extract.Param(err)
		if errors.Is(err, extract.ErrBadTenant) && param == "" {
			param = extract.TenantHeader
		}
		return x, &badRequest{http.StatusBadRequest, "", param, err.Error()}
	}
	return x, nil
}

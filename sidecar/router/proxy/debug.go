package proxy

import (
	"encoding/json"
	"net/http"

	"github.com/warmroute/warmroute/sidecar/router/extract"
	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// Traffic paths by endpoint, for the debug route's ?endpoint=.
var endpointPaths = map[string]endpoint{
	"/invocations":         endpointInvocations,
	"/v1/chat/completions": endpointChat,
	"/v1/completions":      endpointCompletions,
}

// DebugRoute serves POST /debug/route[?endpoint=/v1/completions]: it reads
// an inference body exactly as the traffic port would (default
// /v1/chat/completions) and answers peek's policy.Peeked
// ({"instance":"<id>","placed":"<id>","spill":"<reason>"}), without
// sending the request or counting it anywhere, so benchmarks and e2e tests
// measure whether replicas agree. Never exposed on the traffic port.
func (r *Router) DebugRoute(peek func(policy.Request) (policy.Peeked, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		st := r.state.Load()
		if st == nil {
			noConfig.write(w)
			return
		}
		path := req.URL.Query().Get("endpoint")
		if path == "" {
			path = "/v1/chat/completions"
		}
		ep, ok := endpointPaths[path]
		if !ok {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "", "endpoint", "endpoint must be a traffic path: /v1/chat/completions, /v1/completions or /invocations", 0)
			return
		}
		who, bad := r.identify(w, req)
		if bad != nil {
			bad.write(w)
			return
		}
		body, held, bad := r.readRequest(w, req)
		defer r.budget.release(held)
		var x extract.Request
		if bad == nil {
			x, bad = r.extractRouting(st, ep, body, who)
		}
		if bad != nil {
			bad.write(w)
			return
		}
		d, err := peek(policyRequest(x))
		x.Release()
		if err != nil {
			unpickable(err, x.Model).write(w)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(d)
	})
}

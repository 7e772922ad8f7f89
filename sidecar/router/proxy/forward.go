package proxy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"

	"github.com/warmroute/warmroute/sidecar/router/extract"
)

// ForwardedHeader marks a request a peer forwarded to this replica as the
// owner of its instance (see policy.Owner): it is decided here and never
// forwarded again, so a request makes at most one extra hop even while two
// replicas briefly disagree on who owns what. A client that sends it only
// has its request decided by the replica it reached.
const ForwardedHeader = "X-Warmroute-Forwarded"

// toOwner forwards the request, body as the client sent it, to the router
// replica that owns the instance the policy places it on, when that is
// another replica, and reports whether it did. The owner reads, routes and
// accounts for the request as if the client had sent it there; this
// replica only relays the answer. When the owner cannot be reached (it is
// leaving, or gone before the reports said so), nothing was sent and the
// request is decided here.
func (r *Router) toOwner(w http.ResponseWriter, req *http.Request, body []byte, x extract.Request) bool {
	if req.Header.Get(ForwardedHeader) != "" {
		r.opts.Metrics.Forwards.WithLabelValues("received").Inc()
		return false
	}
	if !r.policy.Forwarding() {
		return false
	}
	peeked, err := r.policy.Peek(policyRequest(x))
	if err != nil {
		return false
	}
	// Peek named the owner already; only its address is left to look up.
	owner := peeked.Owner
	addr := r.policy.ForwardAddr(owner)
	if addr == "" {
		return false
	}
	o := &ownerRoute{addr: addr, body: body}
	r.owners.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), ownerKey{}, o)))
	if o.unreachable {
		r.opts.Metrics.Forwards.WithLabelValues("fallback").Inc()
		r.opts.Log.V(1).Info("owner unreachable; deciding here", "owner", owner, "address", addr)
		return false
	}
	r.opts.Metrics.Forwards.WithLabelValues("forwarded").Inc()
	return true
}

// ownerRoute is a forward's state, carried in the request context.
type ownerRoute struct {
	addr string
	body []byte
	// reused: the forward went out on a pooled connection.
	reused bool
	// unreachable: the forward failed before any answer, on a new
	// connection that could not be made (nothing was sent) or on a pooled
	// one the owner had closed (restarted, or closed it idle as the
	// request went out); the request is then decided here. In the second
	// case the owner may, rarely, have read it before it died: a
	// generation computed twice costs less than a request failed.
	unreachable bool
}

type ownerKey struct{}

// newOwnerProxy relays requests to owners: streamed answers flush as they
// come, and the client's credentials go along (the owner checks them).
func (r *Router) newOwnerProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			o := pr.In.Context().Value(ownerKey{}).(*ownerRoute)
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = o.addr
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
			pr.SetXForwarded()
			pr.Out.Header.Set(ForwardedHeader, "1")
			pr.Out.Body = io.NopCloser(bytes.NewReader(o.body))
			pr.Out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(o.body)), nil }
			pr.Out.ContentLength = int64(len(o.body))
			pr.Out = pr.Out.WithContext(httptrace.WithClientTrace(pr.Out.Context(), &httptrace.ClientTrace{
				GotConn: func(c httptrace.GotConnInfo) { o.reused = c.Reused },
			}))
		},
		Transport:     r.peerTransport,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			if req.Context().Err() != nil {
				return
			}
			o := req.Context().Value(ownerKey{}).(*ownerRoute)
			if isConnectError(err) || o.reused {
				o.unreachable = true
				return
			}
			r.opts.Log.Error(err, "forward to the owner failed", "address", o.addr)
			writeError(w, http.StatusBadGateway, "service_unavailable", "upstream_error", "", "the router replica that owns the model server could not answer", 1)
		},
		ErrorLog:   StdLogger(r.opts.Log.WithName("forward")),
		BufferPool: bufferPool{},
	}
}

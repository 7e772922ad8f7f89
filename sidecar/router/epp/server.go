// Package epp serves the Gateway API Inference Extension's Endpoint Picker
// Protocol: Envoy's ext_proc v3 stream in FULL_DUPLEX_STREAMED mode, one
// stream per HTTP request. The server holds the request body whole (within
// the router's body limit and budget), admits it through the proxy's own
// pipeline (proxy.Router.Identify, then Admit), answers with the chosen
// endpoint in the x-gateway-destination-endpoint header and the envoy.lb
// dynamic metadata, and streams the body on. It watches the response go by
// to end the request's load accounting.
//
// The port trusts no caller it has not authenticated (TLS with a required
// client certificate, transport.go), and the gateway's answer never carries
// vLLM's key. Each stream is bounded in time and in what it may hold; a
// protocol violation ends it.
package epp

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/warmroute/warmroute/sidecar/router/proxy"
	"github.com/warmroute/warmroute/sidecar/router/tenancy"
)

// The protocol's names (Inference Extension proposal 004).
const (
	// DestinationHeader and the same key in the MetadataNamespace of the
	// dynamic metadata name the chosen endpoint, ip:port.
	DestinationHeader = "x-gateway-destination-endpoint"
	MetadataNamespace = "envoy.lb"
	// SubsetNamespace/SubsetKey in the request's filter metadata list the
	// endpoints the picker may choose from.
	SubsetNamespace = "envoy.lb.subset_hint"
	SubsetKey       = "x-gateway-destination-endpoint-subset"
	// ServedKey in the MetadataNamespace of the response phase's filter
	// metadata names the endpoint the gateway actually sent to.
	ServedKey = "x-gateway-destination-endpoint-served"
	// ServiceName is the ext_proc service, as gRPC health names it.
	ServiceName = "envoy.service.ext_proc.v3.ExternalProcessor"
	// LivenessService is a health service name that answers SERVING as
	// long as the process serves, for a liveness probe.
	LivenessService = "liveness"
)

// Options bound what one stream may take; zero values take the defaults.
// Its time is bounded by the router's own timeouts (proxy.Options): the
// whole request within BodyReadTimeout of the stream's start (408 after),
// the response headers within ResponseHeaderTimeout of the decision, then
// no silence longer than StreamIdleTimeout.
type Options struct {
	// MaxHeaderBytes bounds the request's header block, names and values
	// (431 above): the proxy's --max-header-bytes.
	MaxHeaderBytes int
	// MaxStreams bounds the streams open at once on the server; past it a
	// stream is refused with RESOURCE_EXHAUSTED.
	MaxStreams int
}

// Defaults of Options: the proxy's header limit, and a stream bound for
// the gateway's concurrency (each request in flight holds one stream for
// its whole response; 4096 is 16 vLLM instances at vLLM's default 256
// running sequences each), at about two goroutines and a message each.
const (
	DefaultMaxHeaderBytes = 64 << 10
	DefaultMaxStreams     = 4096
)

// Server is the ext_proc service in front of a router.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	healthpb.UnimplementedHealthServer
	router  *proxy.Router
	log     logr.Logger
	opts    Options
	timeout proxy.Options // the router's, for its timeouts
	streams chan struct{} // a slot per open stream
}

// New returns the service for r.
func New(r *proxy.Router, log logr.Logger, opts Options) *Server {
	opts.MaxHeaderBytes = cmp.Or(max(opts.MaxHeaderBytes, 0), DefaultMaxHeaderBytes)
	opts.MaxStreams = cmp.Or(max(opts.MaxStreams, 0), DefaultMaxStreams)
	return &Server{router: r, log: log, opts: opts, timeout: r.Options(), streams: make(chan struct{}, opts.MaxStreams)}
}

// Check answers SERVING for LivenessService while the process runs, and
// for "" and ServiceName while the router is ready (a document loaded,
// not draining).
func (s *Server) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	switch req.GetService() {
	case LivenessService:
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	case "", ServiceName:
		if s.router.Ready() {
			return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
		}
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
	}
	return nil, status.Error(codes.NotFound, "unknown service")
}

// exchange is one HTTP request's state on its stream.
type exchange struct {
	s      *Server
	stream extprocv3.ExternalProcessor_ProcessServer
	method string
	path   string
	header http.Header
	subset []string // nil: no hint
	// caller is who the headers identified, carried into the admission.
	caller  tenancy.Identity
	body    []byte
	held    int64
	decided *proxy.Placement
	// began: request headers came; placed: the request was decided (it
	// stays true once the decision ended); ended: the request is counted;
	// prefilled: the first response body chunk has passed.
	began, placed, ended, prefilled bool
	start, placedAt                 time.Time // the stream's start, the decision's
	status                          int       // the response's :status, 0 before it
}

// received is one Recv's outcome.
type received struct {
	req *extprocv3.ProcessingRequest
	err error
}

// Process serves one HTTP request's stream. Whatever way it ends, the
// request's accounting ends with it.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	select {
	case s.streams <- struct{}{}:
		defer func() { <-s.streams }()
	default:
		return status.Error(codes.ResourceExhausted, "the picker serves as many streams as it may")
	}
	x := &exchange{s: s, stream: stream, header: http.Header{}, start: time.Now()}
	defer func() { x.finish(x.cut()) }()
	// Recv blocks with no deadline of its own: it runs apart, so that a
	// deadline ends the stream (returning cancels the stream's context,
	// which ends the Recv), and every other step stays on this goroutine.
	msgs := make(chan received)
	ctx := stream.Context()
	go func() {
		for {
			req, err := stream.Recv()
			select {
			case msgs <- received{req, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	timer := time.NewTimer(x.deadline(time.Now()))
	defer timer.Stop()
	for {
		select {
		case m := <-msgs:
			if errors.Is(m.err, io.EOF) || status.Code(m.err) == codes.Canceled {
				return nil
			}
			if m.err != nil {
				return m.err
			}
			done, err := x.handle(m.req)
			if err != nil || done {
				return err
			}
			timer.Reset(x.deadline(time.Now()))
		case <-timer.C:
			// Before the decision the request is answered 408, as the
			// proxy answers a slow body; after it the stream is cut.
			if !x.placed {
				return x.immediate(x.s.router.BodyTimedOut())
			}
			return status.Error(codes.DeadlineExceeded, "the gateway sent nothing within the stream's deadline")
		case <-ctx.Done(): // the gateway cancelled the stream
			return nil
		}
	}
}

// deadline is how long the stream may wait for its next message, at now
// (see Options).
func (x *exchange) deadline(now time.Time) time.Duration {
	o := &x.s.timeout
	switch {
	case !x.placed:
		return x.start.Add(o.BodyReadTimeout).Sub(now)
	case x.status == 0 && !x.ended:
		return x.placedAt.Add(o.ResponseHeaderTimeout).Sub(now)
	}
	return o.StreamIdleTimeout
}

// violation ends a stream that broke the protocol's order.
func violation(msg string) error { return status.Error(codes.InvalidArgument, msg) }

// finish ends the request's accounting, gives back its body budget and
// counts it under outcome; calling it again is harmless.
func (x *exchange) finish(outcome string) {
	x.releaseBody()
	switch {
	case x.decided != nil:
		x.decided.Finish(outcome)
		x.decided = nil
	case x.began && !x.ended:
		x.s.router.CountUnplaced(outcome)
	}
	x.ended = true
}

// cut is the outcome of a stream that ends before the response did: the
// gateway (the picker's client) left before the answer began, or during
// the response, which the protocol does not say who cut.
func (x *exchange) cut() string {
	if x.status == 0 {
		return proxy.OutcomeCanceled
	}
	return proxy.OutcomeClientDisconnect
}

// handle answers one message; done once an immediate response has ended
// the exchange.
func (x *exchange) handle(req *extprocv3.ProcessingRequest) (done bool, err error) {
	switch m := req.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		if x.began {
			return true, violation("one request per stream: request headers came twice")
		}
		x.began = true
		if !x.readHeaders(m.RequestHeaders.GetHeaders()) { // net/http's answer, as the proxy's
			return true, x.immediate(&proxy.Refusal{Status: http.StatusRequestHeaderFieldsTooLarge,
				Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, Body: []byte("431 Request Header Fields Too Large")})
		}
		// Who the caller is decides whether its body is held at all.
		var refused *proxy.Refusal
		if x.caller, refused = x.s.router.Identify(x.header); refused != nil {
			return true, x.immediate(refused)
		}
		x.subset = subsetHint(req.GetMetadataContext())
		if m.RequestHeaders.GetEndOfStream() {
			return x.decide(noBody)
		}
		return false, nil // answered with the body, once it is whole
	case *extprocv3.ProcessingRequest_RequestBody:
		if !x.began || x.placed {
			return true, violation("a request body outside the request")
		}
		return x.requestBody(m.RequestBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		if !x.began {
			return true, violation("request trailers before the request headers")
		}
		if !x.placed {
			if done, err := x.decide(trailersFollow); done || err != nil {
				return done, err
			}
		}
		return false, x.stream.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
			RequestTrailers: &extprocv3.TrailersResponse{}}})
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		if !x.placed || x.status != 0 {
			return true, violation("response headers before the decision, or twice")
		}
		x.status = responseStatus(m.ResponseHeaders.GetHeaders())
		x.served(req.GetMetadataContext())
		if m.ResponseHeaders.GetEndOfStream() { // a response without a body
			x.finish(proxy.StatusOutcome(x.status))
		}
		return false, x.stream.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
			ResponseHeaders: &extprocv3.HeadersResponse{}}})
	case *extprocv3.ProcessingRequest_ResponseBody:
		if !x.placed {
			return true, violation("a response body before the decision")
		}
		b := m.ResponseBody
		if x.decided != nil {
			x.decided.Response(b.GetBody())
			if !x.prefilled && len(b.GetBody()) > 0 {
				x.prefilled = true
				x.decided.Prefilled()
			}
		}
		if b.GetEndOfStream() {
			x.finish(proxy.StatusOutcome(x.status))
		}
		return false, x.stream.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
			ResponseBody: streamed(b.GetBody(), b.GetEndOfStream())}})
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		if !x.placed {
			return true, violation("response trailers before the decision")
		}
		x.finish(proxy.StatusOutcome(x.status))
		return false, x.stream.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
			ResponseTrailers: &extprocv3.TrailersResponse{}}})
	}
	return false, nil
}

// responseStatus is the response's :status; 200 if absent.
func responseStatus(hm *corev3.HeaderMap) int {
	for _, h := range hm.GetHeaders() {
		if h.GetKey() == ":status" {
			if n, err := strconv.Atoi(headerValue(h)); err == nil {
				return n
			}
		}
	}
	return http.StatusOK
}

// headerValue is h's value: raw_value when set, else value (a HeaderValue
// may carry either).
func headerValue(h *corev3.HeaderValue) string {
	if len(h.GetRawValue()) > 0 {
		return string(h.GetRawValue())
	}
	return h.GetValue()
}

// readHeaders reads the request's headers; false when they exceed
// MaxHeaderBytes.
func (x *exchange) readHeaders(hm *corev3.HeaderMap) bool {
	n := 0
	for _, h := range hm.GetHeaders() {
		v := headerValue(h)
		if n += len(h.GetKey()) + len(v); n > x.s.opts.MaxHeaderBytes {
			return false
		}
		switch k := strings.ToLower(h.GetKey()); k {
		case ":method":
			x.method = v
		case ":path":
			x.path, _, _ = strings.Cut(v, "?")
		default:
			if !strings.HasPrefix(k, ":") {
				x.header.Add(k, v)
			}
		}
	}
	return true
}

// requestBody holds a chunk within the router's limits; at the end of
// the body the request is placed.
func (x *exchange) requestBody(b *extprocv3.HttpBody) (bool, error) {
	chunk := b.GetBody()
	var refused *proxy.Refusal
	if x.held, refused = x.s.router.HoldBody(x.held, int64(len(x.body)+len(chunk))); refused != nil {
		return true, x.immediate(refused)
	}
	x.body = append(x.body, chunk...)
	if b.GetEndOfStream() {
		return x.decide(bodyEnds)
	}
	return false, nil
}

// How the request's body ends, which says how the body sent back ends.
type bodyEnd int

const (
	noBody         bodyEnd = iota // the headers ended the request
	bodyEnds                      // a body chunk ended it
	trailersFollow                // trailers end it: the body sent back must not
)

// decide places the request and answers the request headers with the
// endpoint, then sends the body on (unless the request has none).
func (x *exchange) decide(end bodyEnd) (bool, error) {
	d, refused := x.s.router.Admit(x.stream.Context(), proxy.Admission{Method: x.method, Path: x.path, Header: x.header,
		Caller: x.caller, Body: x.body})
	if refused != nil {
		return true, x.immediate(refused)
	}
	x.decided, x.placed, x.placedAt = d, true, time.Now()
	if x.subset != nil && !x.moveTo(func(addr string) bool { return slices.Contains(x.subset, addr) }) {
		return true, x.immediate(&proxy.Refusal{Status: http.StatusServiceUnavailable, Header: http.Header{"Content-Type": {"application/json"}},
			Body: []byte(`{"error":{"message":"no endpoint of the gateway's subset can serve this request","type":"service_unavailable","param":null,"code":"no_instance"}}`)})
	}
	addr := d.Instance().Address
	mut := &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{header(DestinationHeader, addr)}}
	n := 0
	for _, p := range d.Body {
		n += len(p)
	}
	if end != noBody {
		// The salt may have changed the body's length.
		mut.SetHeaders = append(mut.SetHeaders, header("content-length", strconv.Itoa(n)))
	}
	mut.RemoveHeaders = x.s.router.StrippedHeaders(x.header)
	md, err := structpb.NewStruct(map[string]any{MetadataNamespace: map[string]any{DestinationHeader: addr}})
	if err != nil {
		return true, err
	}
	if err := x.stream.Send(&extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{HeaderMutation: mut, ClearRouteCache: true}}},
		DynamicMetadata: md,
	}); err != nil || end == noBody {
		return err != nil, err
	}
	pieces := chunked(d.Body)
	for i, p := range pieces {
		if err := x.stream.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
			RequestBody: streamed(p, end == bodyEnds && i == len(pieces)-1)}}); err != nil {
			return true, err
		}
	}
	// The body is the gateway's now: its budget is free for other
	// requests while this one's response runs.
	x.body, d.Body = nil, nil
	x.releaseBody()
	return false, nil
}

// releaseBody gives the body's bytes back to the buffer budget; calling
// it again is harmless.
func (x *exchange) releaseBody() {
	x.s.router.Release(x.held)
	x.held = 0
}

// maxChunk bounds each body piece sent back, as the protocol recommends: a
// gateway's gRPC client may refuse larger messages.
const maxChunk = 64 << 10

// chunked splits the body's pieces into pieces of at most maxChunk; an
// empty body is one empty piece, which ends the stream.
func chunked(body [][]byte) [][]byte {
	var out [][]byte
	for _, p := range body {
		for ; len(p) > 0; p = p[min(len(p), maxChunk):] {
			out = append(out, p[:min(len(p), maxChunk)])
		}
	}
	if out == nil {
		out = [][]byte{nil}
	}
	return out
}

// moveTo moves the decision along its fallback order to the first
// instance whose address ok accepts (the gateway's subset hint, the
// endpoint it served); false when none does.
func (x *exchange) moveTo(ok func(addr string) bool) bool {
	for !ok(x.decided.Instance().Address) {
		if !x.decided.Next() {
			return false
		}
	}
	return true
}

// served moves the accounting to the endpoint the gateway reports it
// sent to, when that is another instance of the decision's order.
func (x *exchange) served(md *corev3.Metadata) {
	if x.decided == nil {
		return
	}
	v := md.GetFilterMetadata()[MetadataNamespace].GetFields()[ServedKey].GetStringValue()
	if v != "" && !x.moveTo(func(addr string) bool { return addr == v }) {
		x.s.log.V(1).Info("gateway served an endpoint outside the decision's order", "served", v)
	}
}

// subsetHint reads the gateway's subset hint: nil without one, an empty
// non-nil list for a hint that lists nothing (nothing may be chosen).
func subsetHint(md *corev3.Metadata) []string {
	f, ok := md.GetFilterMetadata()[SubsetNamespace].GetFields()[SubsetKey]
	if !ok {
		return nil
	}
	out := []string{}
	for _, v := range f.GetListValue().GetValues() {
		out = append(out, v.GetStringValue())
	}
	return out
}

// immediate answers the request in the picker's place and counts it
// rejected, as the proxy counts its refusals.
func (x *exchange) immediate(r *proxy.Refusal) error {
	if x.decided != nil {
		x.decided.Done()
		x.decided = nil
	}
	x.finish(proxy.OutcomeRejected)
	mut := &extprocv3.HeaderMutation{}
	for k, vs := range r.Header {
		for _, v := range vs {
			mut.SetHeaders = append(mut.SetHeaders, header(strings.ToLower(k), v))
		}
	}
	return x.stream.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode(r.Status)},
			Headers: mut, Body: r.Body}}})
}

func streamed(b []byte, end bool) *extprocv3.BodyResponse {
	return &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
		Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: b, EndOfStream: end}}}}}
}

func header(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
}

// Package epp serves the Gateway API Inference Extension's Endpoint Picker
// Protocol: Envoy's ext_proc v3 stream, request and response bodies in
// FULL_DUPLEX_STREAMED mode. For each request the gateway sends the
// headers and the body in chunks; the server holds the body whole (within
// the router's body limit and budget), has the router place it exactly as
// the proxy would (proxy.Router.Decide: the same extraction, salt and
// picker), and answers with the chosen endpoint in the
// x-gateway-destination-endpoint header and the envoy.lb dynamic metadata,
// then streams the body on. It watches the response go by to end the
// request's load accounting: the first token at the first response body
// chunk, the end at the response's end of stream or when the stream ends
// early.
package epp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/warmroute/warmroute/sidecar/router/proxy"
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

// Server is the ext_proc service in front of a router.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	healthpb.UnimplementedHealthServer
	router *proxy.Router
	log    logr.Logger
}

// New returns the service for r.
func New(r *proxy.Router, log logr.Logger) *Server { return &Server{router: r, log: log} }

// Register adds the ext_proc and health services to g.
func (s *Server) Register(g *grpc.Server) {
	extprocv3.RegisterExternalProcessorServer(g, s)
	healthpb.RegisterHealthServer(g, s)
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
	s       *Server
	stream  extprocv3.ExternalProcessor_ProcessServer
	method  string
	path    string
	header  http.Header
	subset  []string // nil: no hint
	body    []byte
	held    int64
	decided *proxy.Decided
	// began: request headers came; ended: the request is counted.
	began, ended bool
	// status is the response's :status, 0 before the response headers.
	status int
	// prefilled: the first response body chunk has passed.
	prefilled bool
}

// Process serves one HTTP request's stream. Whatever way it ends, the
// request's accounting ends with it.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	x := &exchange{s: s, stream: stream, header: http.Header{}}
	defer func() { x.finish(x.cut()) }()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
			return nil
		}
		if err != nil {
			return err
		}
		done, err := x.handle(req)
		if err != nil || done {
			return err
		}
	}
}

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
		x.began = true
		x.readHeaders(m.RequestHeaders.GetHeaders())
		x.subset = subsetHint(req.GetMetadataContext())
		if m.RequestHeaders.GetEndOfStream() {
			return x.decide(noBody)
		}
		return false, nil // answered with the body, once it is whole
	case *extprocv3.ProcessingRequest_RequestBody:
		return x.requestBody(m.RequestBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		if x.decided == nil {
			if done, err := x.decide(trailersFollow); done || err != nil {
				return done, err
			}
		}
		return false, x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
			RequestTrailers: &extprocv3.TrailersResponse{}}})
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		x.status = responseStatus(m.ResponseHeaders.GetHeaders())
		x.served(req.GetMetadataContext())
		if m.ResponseHeaders.GetEndOfStream() { // a response without a body
			x.finish(proxy.StatusOutcome(x.status))
		}
		return false, x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
			ResponseHeaders: &extprocv3.HeadersResponse{}}})
	case *extprocv3.ProcessingRequest_ResponseBody:
		b := m.ResponseBody
		if x.decided != nil && !x.prefilled && len(b.GetBody()) > 0 {
			x.prefilled = true
			x.decided.Prefilled()
		}
		if b.GetEndOfStream() {
			x.finish(proxy.StatusOutcome(x.status))
		}
		return false, x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
			ResponseBody: streamed(b.GetBody(), b.GetEndOfStream())}})
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		x.finish(proxy.StatusOutcome(x.status))
		return false, x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
			ResponseTrailers: &extprocv3.TrailersResponse{}}})
	}
	return false, nil
}

// responseStatus is the response's :status; 200 when the gateway sent
// none (the protocol always carries it).
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

func (x *exchange) readHeaders(hm *corev3.HeaderMap) {
	for _, h := range hm.GetHeaders() {
		v := headerValue(h)
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
}

// requestBody holds a chunk within the router's limits; at the end of
// the body the request is placed.
func (x *exchange) requestBody(b *extprocv3.HttpBody) (bool, error) {
	chunk := b.GetBody()
	if int64(len(x.body)+len(chunk)) > x.s.router.MaxBodyBytes() {
		return true, x.immediate(x.s.router.TooLarge())
	}
	if grow := int64(len(x.body) + len(chunk)); grow > x.held {
		if !x.s.router.Hold(grow - x.held) {
			return true, x.immediate(x.s.router.Overloaded())
		}
		x.held = grow
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
	d, refused := x.s.router.Decide(x.stream.Context(), x.method, x.path, x.header, x.body)
	if refused != nil {
		return true, x.immediate(refused)
	}
	x.decided = d
	if x.subset != nil && !x.inSubset() {
		return true, x.immediate(noEndpoint())
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
	mut.RemoveHeaders = d.RemoveHeaders
	if d.Authorization != "" {
		mut.SetHeaders = append(mut.SetHeaders, header("authorization", d.Authorization))
	}
	md, err := structpb.NewStruct(map[string]any{MetadataNamespace: map[string]any{DestinationHeader: addr}})
	if err != nil {
		return true, err
	}
	if err := x.send(&extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{HeaderMutation: mut, ClearRouteCache: true}}},
		DynamicMetadata: md,
	}); err != nil || end == noBody {
		return err != nil, err
	}
	pieces := chunked(d.Body)
	for i, p := range pieces {
		if err := x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
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

// maxChunk bounds each body piece sent back. The protocol recommends at
// most 64 KiB a piece: a gateway's gRPC client may refuse larger messages
// (gRPC's Go client refuses over 4 MiB by default).
const maxChunk = 64 << 10

// chunked splits the body's pieces into pieces of at most maxChunk; an
// empty body is one empty piece, which ends the stream.
func chunked(body [][]byte) [][]byte {
	var out [][]byte
	for _, p := range body {
		for len(p) > maxChunk {
			out = append(out, p[:maxChunk])
			p = p[maxChunk:]
		}
		if len(p) > 0 {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		out = [][]byte{nil}
	}
	return out
}

// inSubset moves the decision along its fallback order to the first
// instance the gateway's subset hint allows; false when none is.
func (x *exchange) inSubset() bool {
	for {
		addr := x.decided.Instance().Address
		for _, s := range x.subset {
			if s == addr {
				return true
			}
		}
		if !x.decided.Next() {
			return false
		}
	}
}

// served moves the accounting to the endpoint the gateway reports it
// sent to, when that is another instance of the decision's order.
func (x *exchange) served(md *corev3.Metadata) {
	if x.decided == nil {
		return
	}
	v := md.GetFilterMetadata()[MetadataNamespace].GetFields()[ServedKey].GetStringValue()
	if v == "" || v == x.decided.Instance().Address {
		return
	}
	want := v
	for x.decided.Instance().Address != want {
		if !x.decided.Next() {
			x.s.log.V(1).Info("gateway served an endpoint outside the decision's order", "served", want)
			return
		}
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

func noEndpoint() *proxy.Refusal {
	return &proxy.Refusal{Status: http.StatusServiceUnavailable, Header: http.Header{"Content-Type": {"application/json"}},
		Body: []byte(`{"error":{"message":"no endpoint of the gateway's subset can serve this request","type":"service_unavailable","param":null,"code":"no_instance"}}`)}
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
	return x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode(r.Status)},
			Headers: mut, Body: r.Body}}})
}

func (x *exchange) send(r *extprocv3.ProcessingResponse) error { return x.stream.Send(r) }

func streamed(b []byte, end bool) *extprocv3.BodyResponse {
	return &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
		Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: b, EndOfStream: end}}}}}
}

func header(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
}

package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/warmroute/warmroute/sidecar/router/epp"
	"github.com/warmroute/warmroute/test/workload"
)

// gatewayChunk is the size of the request body chunks a gateway sends
// the picker: the body as a proxy's connection reads deliver it.
const gatewayChunk = 16 << 10

// gateway plays Gateway API gateways in front of the picker: Envoy's
// ext_proc filter in FULL_DUPLEX_STREAMED mode, with go-control-plane's
// client. It is an http.RoundTripper the workload driver sends through;
// for each request it opens a stream on one of its connections (one per
// gateway replica, taken in turn), sends the request headers and the
// body in chunks, end of stream on the last, reads the endpoint the
// picker chose (x-gateway-destination-endpoint, checked against the
// envoy.lb metadata), applies the header mutation and sends the body
// streamed back to that simulator, then passes the response headers,
// every body chunk as the simulator sends it and the trailers (or an
// empty end of stream) through the stream, handing the driver what the
// picker sends back. The picker's accounting of the request ends with
// the response, as behind Envoy.
//
// It forwards once the whole body has come back rather than as it
// comes: the picker sends it back at once, in the same moment.
type gateway struct {
	conns    []*grpc.ClientConn
	clients  []extprocv3.ExternalProcessorClient
	upstream *http.Transport
	next     atomic.Uint64

	mu sync.Mutex
	// added is the picker's added time per placed request: from the
	// last body chunk sent to the destination received.
	added []time.Duration
}

// dialGateways connects n gateways to the picker's ext_proc address.
func dialGateways(addr string, n int) (*gateway, error) {
	g := &gateway{upstream: workload.NewClient().Transport.(*http.Transport)}
	for range n {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			g.close()
			return nil, fmt.Errorf("connect to the picker at %s: %w", addr, err)
		}
		g.conns = append(g.conns, cc)
		g.clients = append(g.clients, extprocv3.NewExternalProcessorClient(cc))
	}
	return g, nil
}

func (g *gateway) close() {
	for _, cc := range g.conns {
		_ = cc.Close()
	}
	g.upstream.CloseIdleConnections()
}

func (g *gateway) addedTimes() []time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]time.Duration(nil), g.added...)
}

func (g *gateway) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	ctx, cancel := context.WithCancel(req.Context())
	resp, err := g.exchange(ctx, cancel, req, body)
	if err != nil {
		cancel() // ends the stream: the picker ends the request
		return nil, err
	}
	return resp, nil
}

// exchange runs one request through a stream; on success the response
// body owns the stream and cancel.
func (g *gateway) exchange(ctx context.Context, cancel context.CancelFunc, req *http.Request, body []byte) (*http.Response, error) {
	client := g.clients[g.next.Add(1)%uint64(len(g.clients))]
	stream, err := client.Process(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(requestHeaders(req, len(body))); err != nil {
		return nil, err
	}
	for i := 0; i < len(body); i += gatewayChunk {
		end := min(i+gatewayChunk, len(body))
		if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: body[i:end], EndOfStream: end == len(body)}}}); err != nil {
			return nil, err
		}
	}
	sent := time.Now()
	answer, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	if im := answer.GetImmediateResponse(); im != nil {
		cancel()
		return immediateResponse(req, im), nil
	}
	dest, err := destination(answer)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.added = append(g.added, time.Since(sent))
	g.mu.Unlock()
	out := req.Clone(ctx)
	mut := answer.GetRequestHeaders().GetResponse().GetHeaderMutation()
	for _, h := range mut.GetSetHeaders() {
		out.Header.Set(h.GetHeader().GetKey(), headerValue(h.GetHeader()))
	}
	for _, k := range mut.GetRemoveHeaders() {
		out.Header.Del(k)
	}
	var fwd []byte
	for {
		piece, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		sr := piece.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			return nil, fmt.Errorf("picker answered %T where the request body was due", piece.GetResponse())
		}
		fwd = append(fwd, sr.GetBody()...)
		if sr.GetEndOfStream() {
			break
		}
	}
	out.URL.Host, out.Host = dest, dest
	out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(fwd)), int64(len(fwd))
	out.Header.Del("Content-Length")
	resp, err := g.upstream.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	if err := roundTripMsg(stream, responseHeaders(resp), nil); err != nil {
		_ = resp.Body.Close()
		return nil, err
	}
	resp.Body = &gatewayBody{up: resp.Body, resp: resp, stream: stream, cancel: cancel, buf: make([]byte, 32<<10)}
	return resp, nil
}

// destination reads the chosen endpoint from the answer to the request
// headers: the header and the envoy.lb metadata must name the same one.
func destination(answer *extprocv3.ProcessingResponse) (string, error) {
	rh := answer.GetRequestHeaders()
	if rh == nil {
		return "", fmt.Errorf("picker answered %T where the request headers' answer was due", answer.GetResponse())
	}
	var header string
	for _, h := range rh.GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == epp.DestinationHeader {
			header = headerValue(h.GetHeader())
		}
	}
	md := answer.GetDynamicMetadata().GetFields()[epp.MetadataNamespace].GetStructValue().GetFields()[epp.DestinationHeader].GetStringValue()
	if header == "" || md != header {
		return "", fmt.Errorf("picker named endpoint %q in the header and %q in the metadata", header, md)
	}
	return header, nil
}

func headerValue(h *corev3.HeaderValue) string {
	if len(h.GetRawValue()) > 0 {
		return string(h.GetRawValue())
	}
	return h.GetValue()
}

func requestHeaders(req *http.Request, bodyLen int) *extprocv3.ProcessingRequest {
	hm := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte(req.Method)},
		{Key: ":path", RawValue: []byte(req.URL.RequestURI())},
		{Key: ":authority", RawValue: []byte(req.URL.Host)},
		{Key: ":scheme", RawValue: []byte("http")},
		{Key: "content-length", RawValue: []byte(strconv.Itoa(bodyLen))},
	}}
	hm.Headers = append(hm.Headers, headerList(req.Header)...)
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: hm, EndOfStream: bodyLen == 0}}}
}

func responseHeaders(resp *http.Response) *extprocv3.ProcessingRequest {
	hm := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", RawValue: []byte(strconv.Itoa(resp.StatusCode))}}}
	hm.Headers = append(hm.Headers, headerList(resp.Header)...)
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: hm}}}
}

func headerList(h http.Header) []*corev3.HeaderValue {
	var out []*corev3.HeaderValue
	for k, vs := range h {
		for _, v := range vs {
			out = append(out, &corev3.HeaderValue{Key: strings.ToLower(k), RawValue: []byte(v)})
		}
	}
	return out
}

// immediateResponse is the gateway's answer in the picker's place.
func immediateResponse(req *http.Request, im *extprocv3.ImmediateResponse) *http.Response {
	h := http.Header{}
	for _, o := range im.GetHeaders().GetSetHeaders() {
		h.Set(o.GetHeader().GetKey(), headerValue(o.GetHeader()))
	}
	return &http.Response{StatusCode: int(im.GetStatus().GetCode()), Header: h, Request: req,
		Body: io.NopCloser(bytes.NewReader(im.GetBody())), ContentLength: int64(len(im.GetBody()))}
}

// roundTripMsg sends one response-phase message and reads the picker's
// answer to it, appending any body it streams back to out.
func roundTripMsg(stream extprocv3.ExternalProcessor_ProcessClient, m *extprocv3.ProcessingRequest, out *[]byte) error {
	if err := stream.Send(m); err != nil {
		return err
	}
	answer, err := stream.Recv()
	if err != nil {
		return err
	}
	if out != nil {
		*out = append(*out, answer.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody()...)
	}
	return nil
}

// gatewayBody passes the simulator's response through the picker's
// stream as the driver reads it.
type gatewayBody struct {
	up     io.ReadCloser
	resp   *http.Response // its Trailer fills in at the body's end
	stream extprocv3.ExternalProcessor_ProcessClient
	cancel context.CancelFunc
	buf    []byte
	out    []byte // what the picker sent back, not yet read
	done   bool   // the response's end went through
}

func (b *gatewayBody) Read(p []byte) (int, error) {
	for len(b.out) == 0 {
		if b.done {
			return 0, io.EOF
		}
		n, err := b.up.Read(b.buf)
		if n > 0 {
			chunk := append([]byte(nil), b.buf[:n]...)
			if err := roundTripMsg(b.stream, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
				ResponseBody: &extprocv3.HttpBody{Body: chunk}}}, &b.out); err != nil {
				return 0, err
			}
		}
		if errors.Is(err, io.EOF) {
			if err := b.end(); err != nil {
				return 0, err
			}
		} else if err != nil {
			return 0, err
		}
	}
	n := copy(p, b.out)
	b.out = b.out[n:]
	return n, nil
}

// end sends the response's end: its trailers when it has some (then the
// last body chunk did not end the stream), else an empty last chunk;
// then closes the stream.
func (b *gatewayBody) end() error {
	last := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{EndOfStream: true}}}
	if len(b.resp.Trailer) > 0 {
		last = &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{
			ResponseTrailers: &extprocv3.HttpTrailers{Trailers: &corev3.HeaderMap{Headers: headerList(b.resp.Trailer)}}}}
	}
	if err := roundTripMsg(b.stream, last, &b.out); err != nil {
		return err
	}
	b.done = true
	if err := b.stream.CloseSend(); err != nil {
		return err
	}
	if _, err := b.stream.Recv(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("picker stream did not end after the response: %v", err)
	}
	return nil
}

func (b *gatewayBody) Close() error {
	b.cancel()
	return b.up.Close()
}

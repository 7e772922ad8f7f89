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
// the picker: Envoy reads a connection into buffer slices of 16 KiB
// (Buffer::Slice's default size), and a streamed body reaches its
// filters in pieces of that size.
const gatewayChunk = 16 << 10

// gateway plays Gateway API gateways in front of the picker: Envoy's
// ext_proc filter in FULL_DUPLEX_STREAMED mode, with go-control-plane's
// client. It is an http.RoundTripper the workload driver sends through;
// for each request it opens a stream on one of its connections (one per
// gateway replica, taken in turn), sends the request headers and the
// body in chunks, end of stream on the last, reads the endpoint the
// picker chose (x-gateway-destination-endpoint, checked against the
// envoy.lb metadata), applies the header mutation and sends the body
// streamed back to that simulator, then passes the response headers and,
// in full duplex, every body chunk as the simulator sends it and the
// trailers (or an empty end of stream) through the stream, handing the
// driver what the picker sends back. The picker's accounting of the
// request ends with the response, as behind Envoy.
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
	if err := roundTripMsg(stream, responseHeaders(resp)); err != nil {
		_ = resp.Body.Close()
		return nil, err
	}
	resp.Body = newGatewayBody(resp, stream, cancel)
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

// roundTripMsg sends the response headers and waits for the picker's
// answer before the response goes on, as the headers' SEND mode does.
func roundTripMsg(stream extprocv3.ExternalProcessor_ProcessClient, m *extprocv3.ProcessingRequest) error {
	if err := stream.Send(m); err != nil {
		return err
	}
	_, err := stream.Recv()
	return err
}

// gatewayBody passes the simulator's response through the picker's
// stream in full duplex, as FULL_DUPLEX_STREAMED does: pump sends each
// chunk as the simulator sends it, without waiting for the answers, then
// the trailers (or an empty end of stream) and closes its side; Read
// hands the driver the body the picker streams back, to the stream's end.
type gatewayBody struct {
	up     io.ReadCloser
	resp   *http.Response // its Trailer fills in at the body's end
	stream extprocv3.ExternalProcessor_ProcessClient
	cancel context.CancelFunc
	out    []byte // what the picker sent back, not yet read
	pumped chan struct{}
	err    error // pump's, read after pumped closes
}

func newGatewayBody(resp *http.Response, stream extprocv3.ExternalProcessor_ProcessClient, cancel context.CancelFunc) *gatewayBody {
	b := &gatewayBody{up: resp.Body, resp: resp, stream: stream, cancel: cancel, pumped: make(chan struct{})}
	go b.pump()
	return b
}

func (b *gatewayBody) pump() {
	defer close(b.pumped)
	buf := make([]byte, 32<<10)
	for {
		n, err := b.up.Read(buf)
		if n > 0 {
			if b.err = b.stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
				ResponseBody: &extprocv3.HttpBody{Body: append([]byte(nil), buf[:n]...)}}}); b.err != nil {
				return
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// The response broke off: the gateway resets the stream.
			b.err = err
			b.cancel()
			return
		}
	}
	// With trailers the last body chunk did not end the stream; they do.
	last := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{EndOfStream: true}}}
	if len(b.resp.Trailer) > 0 {
		last = &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{
			ResponseTrailers: &extprocv3.HttpTrailers{Trailers: &corev3.HeaderMap{Headers: headerList(b.resp.Trailer)}}}}
	}
	if b.err = b.stream.Send(last); b.err == nil {
		b.err = b.stream.CloseSend()
	}
}

func (b *gatewayBody) Read(p []byte) (int, error) {
	for len(b.out) == 0 {
		answer, err := b.stream.Recv()
		if errors.Is(err, io.EOF) {
			// The picker ended the stream once the response's end went
			// through; the trailers are in resp.Trailer by then.
			<-b.pumped
			if b.err != nil {
				return 0, b.err
			}
			return 0, io.EOF
		}
		if err != nil {
			return 0, err
		}
		b.out = append(b.out, answer.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody()...)
	}
	n := copy(p, b.out)
	b.out = b.out[n:]
	return n, nil
}

func (b *gatewayBody) Close() error {
	b.cancel()
	return b.up.Close()
}

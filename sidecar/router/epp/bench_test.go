package epp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/warmroute/warmroute/sidecar/router/proxy"
)

// The picker's added time per request through the protocol, against the
// same decision called in process (BenchmarkDecide): one whole exchange
// on a fresh ext_proc stream over loopback, as a gateway makes it, without
// the backend. The difference is what the protocol costs.
// It runs over mutual TLS, as the router serves it, and in plaintext
// (--epp-insecure): the difference is what TLS costs per exchange on a
// warm connection.
func BenchmarkProtocolExchange(b *testing.B) {
	b.Run("mTLS", func(b *testing.B) { benchmarkExchange(b, setup{}) })
	b.Run("plaintext", func(b *testing.B) { benchmarkExchange(b, setup{plaintext: true}) })
}

func benchmarkExchange(b *testing.B, su setup) {
	f := newFixtureWith(b, 3, proxy.Options{}, su)
	body := chat("a benchmark prompt of moderate length, the same every time")
	ctx := context.Background()
	for b.Loop() {
		_, stream := f.partial(ctx, b, body, true)
		if _, err := stream.Recv(); err != nil { // the request headers' answer
			b.Fatal(err)
		}
		bodySentBack(b, stream)
		for _, m := range []*extprocv3.ProcessingRequest{
			{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{}}},
			{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte("{}"), EndOfStream: true}}},
		} {
			if err := stream.Send(m); err != nil {
				b.Fatal(err)
			}
			if _, err := stream.Recv(); err != nil {
				b.Fatal(err)
			}
		}
		_ = stream.CloseSend()
		if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecide(b *testing.B) {
	f := newFixture(b, 3, proxy.Options{})
	body := chat("a benchmark prompt of moderate length, the same every time")
	for b.Loop() {
		h := http.Header{}
		id, refused := f.router.Identify(h)
		if refused != nil {
			b.Fatal(refused.Status)
		}
		d, refused := f.router.Admit(context.Background(), proxy.Admission{Method: http.MethodPost, Path: "/v1/chat/completions", Header: h, Caller: id, Body: body})
		if refused != nil {
			b.Fatal(refused.Status)
		}
		d.Done()
	}
}

// BenchmarkResponseChunk is the cost of one response body chunk through
// the protocol, a streamed token's: sent by the gateway, answered by the
// picker with the same bytes, on one open stream.
func BenchmarkResponseChunk(b *testing.B) {
	f := newFixture(b, 1, proxy.Options{})
	_, stream := f.partial(context.Background(), b, chat("hello"), true)
	if _, err := stream.Recv(); err != nil {
		b.Fatal(err)
	}
	bodySentBack(b, stream)
	chunk := []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" token"}}]}` + "\n\n")
	m := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: chunk}}}
	for b.Loop() {
		if err := stream.Send(m); err != nil {
			b.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			b.Fatal(err)
		}
	}
}

package epp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/warmroute/warmroute/sidecar/router/epp/epptest"
	"github.com/warmroute/warmroute/sidecar/router/proxy"
	"github.com/warmroute/warmroute/sidecar/router/tenancy"
)

// The tests of issue #51's findings on the protocol's port: an attacker
// who reaches a router pod.

// waitCtx bounds a test's wait on the picker: a stream the picker never
// answers fails the test rather than hanging it.
func waitCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// requestHeaders is a request's headers message: POST to the chat path
// with extra headers kv, ending the request when end.
func requestHeaders(end bool, kv ...string) *extprocv3.ProcessingRequest {
	hs := []*corev3.HeaderValue{{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte("/v1/chat/completions")}}
	for i := 0; i+1 < len(kv); i += 2 {
		hs = append(hs, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: hs}, EndOfStream: end}}}
}

// TestUnauthenticatedCallerGetsNothing: a caller without a client
// certificate the gateway CA signed (plaintext, TLS without one, one from
// another CA) gets no answer at all, so neither a placement nor a
// tenant's salted body; the gateway that proves itself gets its
// placement, and vLLM's key is in no answer (the finding: a keyless caller
// naming a tenant got "authorization: Bearer <vLLM's key>" and the
// tenant's cache_salt).
func TestUnauthenticatedCallerGetsNothing(t *testing.T) {
	salts, err := tenancy.NewSalter([]byte("0123456789abcdef0123456789abcdef"))
	must(t, err)
	f := newFixture(t, 2, proxy.Options{Auth: tenancy.Auth{TrustedHeader: "x-gateway-tenant"}, Salts: salts, UpstreamAPIKey: "vllm-own-key"})
	attackers := map[string]credentials.TransportCredentials{
		"plaintext":                   insecure.NewCredentials(),
		"TLS without a certificate":   credentials.NewTLS(epptest.ClientTLS(t, f.pki.ServerCA, nil)),
		"a certificate of another CA": credentials.NewTLS(epptest.ClientTLS(t, f.pki.ServerCA, epptest.NewCA(t, "attacker CA"))),
	}
	for name, creds := range attackers {
		t.Run(name, func(t *testing.T) {
			client := extprocv3.NewExternalProcessorClient(f.dial(t, creds))
			stream, err := client.Process(waitCtx(t))
			if err == nil {
				err = stream.Send(requestHeaders(false, "x-gateway-tenant", "victim"))
			}
			if err == nil {
				err = stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
					RequestBody: &extprocv3.HttpBody{Body: chat("hello"), EndOfStream: true}}})
			}
			var resp *extprocv3.ProcessingResponse
			if err == nil {
				resp, err = stream.Recv()
			}
			if err == nil || status.Code(err) != codes.Unavailable {
				t.Fatalf("answered %v, error %v; want no answer (Unavailable)", resp, err)
			}
		})
	}
	res := f.gatewayRequest(context.Background(), t, chat("hello"), nil, "x-gateway-tenant", "victim")
	if res.status != http.StatusOK || res.forwarded.Get("Authorization") != "" {
		t.Fatalf("the gateway: status %d, Authorization left in the answer %q", res.status, res.forwarded.Get("Authorization"))
	}
	if !strings.Contains(string(res.sent), salts.Salt("victim")) {
		t.Fatalf("the gateway's body lacks the tenant's salt: %s", res.sent)
	}
}

// TestOneRequestPerStream: a second request's headers on a stream end the
// stream, and the one decision made on it ends with it (the finding: 50
// request-header messages on one stream, then a clean end, left 49
// requests counted in flight for good).
func TestOneRequestPerStream(t *testing.T) {
	f := newFixture(t, 2, proxy.Options{})
	stream, err := f.client.Process(waitCtx(t))
	must(t, err)
	get := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":method", RawValue: []byte("GET")}, {Key: ":path", RawValue: []byte("/v1/models")}}}, EndOfStream: true}}}
	for range 50 {
		if stream.Send(get) != nil {
			break // the picker ended the stream
		}
	}
	_ = stream.CloseSend()
	var err2 error
	for err2 == nil {
		_, err2 = stream.Recv()
	}
	if status.Code(err2) != codes.InvalidArgument {
		t.Fatalf("stream ended with %v, want InvalidArgument for the second request", err2)
	}
	waitFor(t, "nothing in flight", func() bool { return f.inFlight() == 0 })
}

// TestDecisionEndsAtItsDeadline: a decided request whose response never
// begins is cut at ResponseHeaderTimeout, and its in-flight count and
// prefill tokens end with it (the finding: 19 unfinished 100 kB POSTs
// held 75,000 prefill tokens for good).
func TestDecisionEndsAtItsDeadline(t *testing.T) {
	f := newFixture(t, 2, proxy.Options{ResponseHeaderTimeout: 200 * time.Millisecond})
	body := chat(strings.Repeat("a long prompt. ", 100<<10/15))
	var streams []extprocv3.ExternalProcessor_ProcessClient
	for range 19 {
		// No deadline of the client's: the streams stay open until the
		// picker ends them.
		_, stream := f.partial(context.Background(), t, body, true)
		_, err := stream.Recv()
		must(t, err)
		bodySentBack(t, stream)
		streams = append(streams, stream)
	}
	waitFor(t, "nothing in flight", func() bool { return f.inFlight() == 0 && f.prefill() == 0 })
	for _, stream := range streams {
		if _, err := stream.Recv(); status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("an unanswered decision's stream ended with %v, want DeadlineExceeded", err)
		}
	}
}

// TestSlowBodyTimesOut: --body-read-timeout holds on the protocol as on
// the proxy: a body not whole in time is answered 408 and its bytes go
// back to the budget, and a stream that sends nothing is ended too, so
// header-only streams and half-sent bodies cannot be held for ever.
func TestSlowBodyTimesOut(t *testing.T) {
	f := newFixture(t, 1, proxy.Options{BodyReadTimeout: 200 * time.Millisecond})
	for name, first := range map[string][]byte{"half a body": []byte(`{"model":"m","mess`), "headers only": nil} {
		t.Run(name, func(t *testing.T) {
			stream, err := f.client.Process(waitCtx(t))
			must(t, err)
			must(t, stream.Send(requestHeaders(false)))
			if first != nil {
				must(t, stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
					RequestBody: &extprocv3.HttpBody{Body: first}}}))
			}
			resp, err := stream.Recv()
			must(t, err)
			if got := resp.GetImmediateResponse().GetStatus().GetCode(); int(got) != http.StatusRequestTimeout {
				t.Fatalf("answered %v, want 408", resp)
			}
			if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
				t.Fatalf("the stream did not end: %v", err)
			}
			waitFor(t, "nothing buffered", func() bool { return f.router.Gauges().Buffered() == 0 })
		})
	}
}

// TestKeylessCallerIsRefusedBeforeItsBody: with API keys, a request
// without a valid key is answered 401 (with WWW-Authenticate, as the
// proxy answers) on its headers alone, so no keyless body is ever held
// and keyless streams cannot fill the body budget that paying tenants need.
func TestKeylessCallerIsRefusedBeforeItsBody(t *testing.T) {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "acme"), []byte(keyAcme), 0o600))
	ks := &tenancy.KeyStore{}
	_, err := ks.LoadDir(dir)
	must(t, err)
	f := newFixture(t, 1, proxy.Options{Auth: tenancy.Auth{Keys: ks}})
	for name, kv := range map[string][]string{"no key": nil, "a wrong key": {"authorization", "Bearer sk-wrong"}} {
		t.Run(name, func(t *testing.T) {
			stream, err := f.client.Process(waitCtx(t))
			must(t, err)
			must(t, stream.Send(requestHeaders(false, kv...)))
			resp, err := stream.Recv()
			must(t, err)
			im := resp.GetImmediateResponse()
			if int(im.GetStatus().GetCode()) != http.StatusUnauthorized || immediateHeader(im).Get("www-authenticate") == "" {
				t.Fatalf("answered %v, want 401 with WWW-Authenticate before the body", resp)
			}
		})
	}
}

// TestStreamBounds: a header block over MaxHeaderBytes is answered 431,
// a message over the transport's bound ends the stream, and past
// MaxStreams a stream is refused (the findings: 4,000 header-only streams
// grew the router by 236 MiB; one stream of 3 MiB header messages by 251).
func TestStreamBounds(t *testing.T) {
	f := newFixtureWith(t, 1, proxy.Options{}, setup{epp: Options{MaxStreams: 2}})
	t.Run("header block", func(t *testing.T) {
		stream, err := f.client.Process(waitCtx(t))
		must(t, err)
		must(t, stream.Send(requestHeaders(false, "x-padding", strings.Repeat("x", DefaultMaxHeaderBytes))))
		resp, err := stream.Recv()
		must(t, err)
		if int(resp.GetImmediateResponse().GetStatus().GetCode()) != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("answered %v, want 431", resp)
		}
	})
	t.Run("message", func(t *testing.T) {
		stream, err := f.client.Process(waitCtx(t))
		must(t, err)
		must(t, stream.Send(requestHeaders(false, "x-padding", strings.Repeat("x", 3<<20))))
		resp, err := stream.Recv()
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("answered %v, error %v; want ResourceExhausted", resp, err)
		}
	})
	t.Run("streams", func(t *testing.T) {
		// Each connection may open MaxStreams; the bound is the server's,
		// so a second connection finds it spent.
		first := extprocv3.NewExternalProcessorClient(f.dial(t, credentials.NewTLS(f.pki.GatewayTLS(t))))
		for range 2 {
			stream, err := first.Process(waitCtx(t))
			must(t, err)
			must(t, stream.Send(requestHeaders(false)))
			must(t, stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
				RequestBody: &extprocv3.HttpBody{Body: chat("held open"), EndOfStream: true}}}))
			_, err = stream.Recv() // placed: the stream holds its slot
			must(t, err)
		}
		other := extprocv3.NewExternalProcessorClient(f.dial(t, credentials.NewTLS(f.pki.GatewayTLS(t))))
		stream, err := other.Process(waitCtx(t))
		must(t, err)
		// The refusal may end the stream before this send (io.EOF); the
		// answer is read either way.
		_ = stream.Send(requestHeaders(true))
		resp, err := stream.Recv()
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("a third stream: answered %v, error %v; want ResourceExhausted", resp, err)
		}
	})
}

// TestClientCAReload: a new client CA bundle in the mounted file is used
// for the next connection, without a restart.
func TestClientCAReload(t *testing.T) {
	f := newFixture(t, 1, proxy.Options{})
	next := epptest.NewCA(t, "next gateway CA")
	tmp := filepath.Join(f.pki.Dir, "ca.crt.new")
	must(t, os.WriteFile(tmp, next.PEM, 0o600))
	must(t, os.Rename(tmp, f.pki.CAFile)) // a Secret volume's swap replaces the file
	for name, ca := range map[string]*epptest.CA{"the new CA": next, "the old CA": f.pki.GatewayCA} {
		client := extprocv3.NewExternalProcessorClient(f.dial(t, credentials.NewTLS(epptest.ClientTLS(t, f.pki.ServerCA, ca))))
		stream, err := client.Process(waitCtx(t))
		if err == nil {
			err = stream.Send(requestHeaders(true))
		}
		if err == nil {
			_, err = stream.Recv()
		}
		if accepted := err == nil; accepted != (ca == next) {
			t.Fatalf("%s: error %v", name, err)
		}
	}
}

// TestRefusalsMatchTheProxy: a request the router refuses gets the same
// answer through the protocol as from the proxy, status, headers and body,
// whether its headers are refused (a 401 carries WWW-Authenticate either
// way) or its body is: both doors run one admission.
func TestRefusalsMatchTheProxy(t *testing.T) {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "acme"), []byte(keyAcme), 0o600))
	ks := &tenancy.KeyStore{}
	_, err := ks.LoadDir(dir)
	must(t, err)
	trusted := newFixture(t, 1, proxy.Options{Auth: tenancy.Auth{TrustedHeader: "x-gateway-tenant"}})
	keyed := newFixture(t, 1, proxy.Options{Auth: tenancy.Auth{Keys: ks}})
	for _, tc := range []struct {
		name   string
		f      *fixture
		body   []byte
		kv     []string
		status int
	}{
		{"no tenant header", trusted, chat("hello"), nil, http.StatusUnauthorized},
		{"two tenant headers", trusted, chat("hello"), []string{"x-gateway-tenant", "a", "x-gateway-tenant", "b"}, http.StatusBadRequest},
		{"no key", keyed, chat("hello"), nil, http.StatusUnauthorized},
		{"a wrong key", keyed, chat("hello"), []string{"authorization", "Bearer sk-wrong"}, http.StatusUnauthorized},
		{"an unknown model", keyed, []byte(`{"model":"nope","messages":[{"role":"user","content":"hi"}]}`),
			[]string{"authorization", "Bearer " + keyAcme}, http.StatusNotFound},
		{"a body that is not JSON", keyed, []byte(`{"model":`), []string{"authorization", "Bearer " + keyAcme}, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.f.router.Handler())
			t.Cleanup(srv.Close)
			req, err := http.NewRequestWithContext(waitCtx(t), http.MethodPost, srv.URL+"/v1/chat/completions", bytes.NewReader(tc.body))
			must(t, err)
			for i := 0; i+1 < len(tc.kv); i += 2 {
				req.Header.Add(tc.kv[i], tc.kv[i+1])
			}
			resp, err := http.DefaultClient.Do(req)
			must(t, err)
			want, err := io.ReadAll(resp.Body)
			must(t, err)
			_ = resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("the proxy answered %d %s, want %d", resp.StatusCode, want, tc.status)
			}
			wantHeader := resp.Header.Clone()
			for _, k := range []string{"Connection", "Content-Length", "Date"} { // the transport's own
				wantHeader.Del(k)
			}

			stream, err := tc.f.client.Process(waitCtx(t))
			must(t, err)
			must(t, stream.Send(requestHeaders(false, tc.kv...)))
			// A refusal on the headers ends the stream: this send may
			// find it closed, and the answer is read either way.
			_ = stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
				RequestBody: &extprocv3.HttpBody{Body: tc.body, EndOfStream: true}}})
			got, err := stream.Recv()
			must(t, err)
			im := got.GetImmediateResponse()
			if im == nil {
				t.Fatalf("the protocol answered %v, want an immediate response", got)
			}
			if int(im.GetStatus().GetCode()) != resp.StatusCode || !bytes.Equal(im.GetBody(), want) {
				t.Errorf("the protocol answered %d %s, the proxy %d %s", im.GetStatus().GetCode(), im.GetBody(), resp.StatusCode, want)
			}
			if tc.status == http.StatusUnauthorized && wantHeader.Get("WWW-Authenticate") == "" {
				t.Errorf("the proxy's 401 names no scheme: %v", wantHeader)
			}
			if h := immediateHeader(im); !reflect.DeepEqual(h, wantHeader) {
				t.Errorf("the protocol's headers %v, the proxy's %v", h, wantHeader)
			}
		})
	}
}

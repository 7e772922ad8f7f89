package epp

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/structpb"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/router/epp/epptest"
	"github.com/warmroute/warmroute/sidecar/router/picker"
	"github.com/warmroute/warmroute/sidecar/router/proxy"
	"github.com/warmroute/warmroute/sidecar/router/tenancy"
	"github.com/warmroute/warmroute/test/vllmsim"
)

// fixture is a router serving the protocol on loopback with mutual TLS
// (a test CA's certificates), a real ext_proc client to it holding a
// gateway's client certificate, and simulated vLLM instances.
type fixture struct {
	router *proxy.Router
	client extprocv3.ExternalProcessorClient
	health healthpb.HealthClient
	sims   map[string]*vllmsim.Server // by address
	ids    map[string]string          // addresses by instance id
	addr   string                     // the protocol's address
	// upstreamKey is vLLM's key, which the gateway adds to what it sends
	// on (the picker never hands it out).
	upstreamKey string
	pki         *epptest.PKI // nil in plaintext
}

// setup is how a fixture serves the protocol.
type setup struct {
	epp       Options
	plaintext bool // no TLS (--epp-insecure)
}

func startSims(t testing.TB, n int, apiKey string) (map[string]*vllmsim.Server, map[string]string) {
	t.Helper()
	sims, ids := map[string]*vllmsim.Server{}, map[string]string{}
	for i := range n {
		sim, err := vllmsim.Start(vllmsim.Config{Listen: "127.0.0.1:0", Model: "m", TimeScale: 0.001, APIKey: apiKey})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sim.Close() })
		sims[sim.Addr()] = sim
		ids[fmt.Sprintf("vllm-%d", i)] = sim.Addr()
	}
	return sims, ids
}

func document(instances map[string]string) *routingv1alpha1.Document {
	d := &routingv1alpha1.Document{APIVersion: routingv1alpha1.APIVersion, Kind: routingv1alpha1.Kind, Model: "m",
		Strategy: routingv1alpha1.StrategyPrefixAware, HashSeed: 1}
	for id, addr := range instances {
		d.Instances = append(d.Instances, routingv1alpha1.Instance{ID: id, Address: addr})
	}
	slices.SortFunc(d.Instances, func(a, b routingv1alpha1.Instance) int { return strings.Compare(a.ID, b.ID) })
	d.Default()
	if err := d.Validate(); err != nil {
		panic(err)
	}
	return d
}

func newFixture(t testing.TB, n int, opts proxy.Options) *fixture {
	t.Helper()
	return newFixtureWith(t, n, opts, setup{})
}

func newFixtureWith(t testing.TB, n int, opts proxy.Options, su setup) *fixture {
	t.Helper()
	sims, ids := startSims(t, n, opts.UpstreamAPIKey)
	opts.AllowLoopbackBackends = true
	r := proxy.New(opts)
	if err := r.Apply(document(ids)); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{router: r, sims: sims, ids: ids, addr: lis.Addr().String(), upstreamKey: opts.UpstreamAPIKey}
	creds := insecure.NewCredentials()
	var serverTLS *tls.Config
	if !su.plaintext {
		f.pki = epptest.NewPKI(t)
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		serverTLS, err = ServerTLS(ctx, f.pki.CertFile, f.pki.KeyFile, f.pki.CAFile, logr.Discard())
		must(t, err)
		creds = credentials.NewTLS(f.pki.GatewayTLS(t))
	}
	g := NewGRPCServer(New(r, logr.Discard(), su.epp), serverTLS)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	cc := f.dial(t, creds)
	f.client, f.health = extprocv3.NewExternalProcessorClient(cc), healthpb.NewHealthClient(cc)
	return f
}

// dial is a connection to the protocol's address with creds.
func (f *fixture) dial(t testing.TB, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(creds))
	must(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// inFlight is the router's count of requests in flight over all instances.
func (f *fixture) inFlight() float64 {
	var n float64
	f.router.Gauges().InFlight(func(_ string, v float64) { n += v })
	return n
}

// result is what the gateway saw of one request.
type result struct {
	status   int         // the immediate response's status, or the backend's
	endpoint string      // x-gateway-destination-endpoint
	body     []byte      // the response body
	header   http.Header // an immediate response's headers
	decided  time.Duration
	// sent and forwarded are the body and headers the gateway sent on.
	sent      []byte
	forwarded http.Header
}

// gatewayRequest plays Envoy for one request in FULL_DUPLEX_STREAMED mode:
// request headers, then the body in chunks, end of stream on the last;
// then it forwards the body the picker sent back to the endpoint it chose
// and streams the response through the processor, headers and body chunks
// with end of stream on the last.
func (f *fixture) gatewayRequest(ctx context.Context, t *testing.T, body []byte, subset []string, kv ...string) result {
	t.Helper()
	stream, err := f.client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fwd := http.Header{"Content-Type": {"application/json"}}
	hdrs := &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte("/v1/chat/completions")},
		{Key: "content-type", RawValue: []byte("application/json")}, {Key: "content-length", RawValue: []byte(fmt.Sprint(len(body)))}}}}
	for i := 0; i+1 < len(kv); i += 2 {
		hdrs.Headers.Headers = append(hdrs.Headers.Headers, &corev3.HeaderValue{Key: strings.ToLower(kv[i]), RawValue: []byte(kv[i+1])})
		fwd.Add(kv[i], kv[i+1])
	}
	first := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: hdrs}}
	if subset != nil {
		vals := make([]any, len(subset))
		for i, s := range subset {
			vals[i] = s
		}
		st, _ := structpb.NewStruct(map[string]any{SubsetKey: vals})
		first.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{SubsetNamespace: st}}
	}
	start := time.Now()
	must(t, stream.Send(first))
	for i, c := range chunks(body, 3) {
		err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: c, EndOfStream: i == 2}}})
		if errors.Is(err, io.EOF) {
			break // refused on its headers: the answer ended the stream
		}
		must(t, err)
	}
	resp, err := stream.Recv()
	must(t, err)
	if im := resp.GetImmediateResponse(); im != nil {
		return result{status: int(im.GetStatus().GetCode()), body: im.GetBody(), header: immediateHeader(im)}
	}
	var res result
	mut := resp.GetRequestHeaders().GetResponse().GetHeaderMutation()
	for _, k := range mut.GetRemoveHeaders() {
		fwd.Del(k)
	}
	for _, h := range mut.GetSetHeaders() {
		fwd.Set(h.GetHeader().GetKey(), string(h.GetHeader().GetRawValue()))
		if h.GetHeader().GetKey() == DestinationHeader {
			res.endpoint = string(h.GetHeader().GetRawValue())
		}
	}
	res.forwarded = fwd
	md := resp.GetDynamicMetadata().GetFields()[MetadataNamespace].GetStructValue().GetFields()[DestinationHeader].GetStringValue()
	if res.endpoint == "" || md != res.endpoint {
		t.Fatalf("header %q, metadata %q", res.endpoint, md)
	}
	sent := bodySentBack(t, stream)
	res.decided = time.Since(start)
	res.sent = sent
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+res.endpoint+"/v1/chat/completions", bytes.NewReader(sent))
	must(t, err)
	hreq.Header = fwd.Clone()
	if f.upstreamKey != "" { // the gateway's own credential injection
		hreq.Header.Set("Authorization", "Bearer "+f.upstreamKey)
	}
	hr, err := http.DefaultClient.Do(hreq)
	must(t, err)
	defer hr.Body.Close()
	res.status = hr.StatusCode
	responseHeaders(t, stream, hr.StatusCode, false)
	out, err := io.ReadAll(hr.Body)
	must(t, err)
	for i, c := range chunks(out, 2) {
		must(t, stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: c, EndOfStream: i == 1}}}))
		resp, err := stream.Recv()
		must(t, err)
		res.body = append(res.body, resp.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody()...)
	}
	must(t, stream.CloseSend())
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream did not end: %v", err)
	}
	return res
}

// immediateHeader is the headers an immediate response sets.
func immediateHeader(im *extprocv3.ImmediateResponse) http.Header {
	h := http.Header{}
	for _, o := range im.GetHeaders().GetSetHeaders() {
		h.Add(o.GetHeader().GetKey(), headerValue(o.GetHeader()))
	}
	return h
}

// bodySentBack reads the request body the processor streams on, to its
// end of stream (in several pieces when it inserted a salt).
func bodySentBack(t testing.TB, stream extprocv3.ExternalProcessor_ProcessClient) []byte {
	t.Helper()
	var sent []byte
	for {
		resp, err := stream.Recv()
		must(t, err)
		sr := resp.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			t.Fatalf("expected a request body piece, got %v", resp)
		}
		sent = append(sent, sr.GetBody()...)
		if sr.GetEndOfStream() {
			return sent
		}
	}
}

func chunks(b []byte, n int) [][]byte {
	out := make([][]byte, n)
	step := len(b) / n
	for i := range n {
		end := (i + 1) * step
		if i == n-1 {
			end = len(b)
		}
		out[i] = b[i*step : end]
	}
	return out
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func chat(prompt string) []byte {
	return []byte(fmt.Sprintf(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":%q}]}`, prompt))
}

// workload is groups of requests sharing a long prefix, shuffled.
func workload() [][]byte {
	rng := rand.New(rand.NewPCG(7, 7))
	var out [][]byte
	for g := range 12 {
		prefix := strings.Repeat(fmt.Sprintf("system prompt of group %d. ", g), 60)
		for q := range 6 {
			out = append(out, chat(prefix+fmt.Sprintf("question %d", q)))
		}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func hitRate(sims map[string]*vllmsim.Server) float64 {
	var q, h int64
	for _, s := range sims {
		st := s.Stats()
		q += st.PrefixCacheQueries
		h += st.PrefixCacheHits
	}
	return float64(h) / float64(q)
}

// TestHitRateThroughTheProtocol sends a prefix-sharing workload through
// the protocol and the same workload through a standalone router on its
// own simulators: the two place alike, so their hit rates agree, and
// every request's accounting has ended.
func TestHitRateThroughTheProtocol(t *testing.T) {
	f := newFixture(t, 3, proxy.Options{})
	ctx := context.Background()
	var decided []time.Duration
	for _, body := range workload() {
		res := f.gatewayRequest(ctx, t, body, nil)
		if res.status != http.StatusOK || f.sims[res.endpoint] == nil {
			t.Fatalf("status %d endpoint %q: %s", res.status, res.endpoint, res.body)
		}
		if !bytes.Contains(res.body, []byte(`"choices"`)) {
			t.Fatalf("response body not passed through: %s", res.body)
		}
		decided = append(decided, res.decided)
	}
	if n := f.inFlight(); n != 0 {
		t.Fatalf("%v requests still counted in flight", n)
	}
	viaEPP := hitRate(f.sims)

	sims, ids := startSims(t, 3, "")
	r := proxy.New(proxy.Options{AllowLoopbackBackends: true})
	must(t, r.Apply(document(ids)))
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	for _, body := range workload() {
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		must(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("standalone status %d", resp.StatusCode)
		}
	}
	standalone := hitRate(sims)
	slices.Sort(decided)
	t.Logf("hit rate through the protocol %.3f, standalone %.3f; request headers to body sent back, median %v p90 %v",
		viaEPP, standalone, decided[len(decided)/2], decided[len(decided)*9/10])
	if standalone < 0.5 {
		t.Fatalf("standalone hit rate %.3f: the workload shows nothing", standalone)
	}
	if viaEPP < standalone-0.01 {
		t.Fatalf("hit rate through the protocol %.3f, standalone %.3f", viaEPP, standalone)
	}
}

func TestEdgeCases(t *testing.T) {
	f := newFixture(t, 2, proxy.Options{MaxBodyBytes: 4096})
	ctx := context.Background()
	body := chat("hello there")

	t.Run("subset hint matching nothing", func(t *testing.T) {
		res := f.gatewayRequest(ctx, t, body, []string{"10.0.0.1:8000"})
		if res.status != http.StatusServiceUnavailable {
			t.Fatalf("status %d", res.status)
		}
	})
	t.Run("subset hint honoured", func(t *testing.T) {
		var only string
		for a := range f.sims {
			only = a
		}
		for range 5 {
			res := f.gatewayRequest(ctx, t, chat(fmt.Sprint("q", rand.Int())), []string{only})
			if res.status != http.StatusOK || res.endpoint != only {
				t.Fatalf("status %d endpoint %q, want %q", res.status, res.endpoint, only)
			}
		}
	})
	t.Run("body over the limit", func(t *testing.T) {
		res := f.gatewayRequest(ctx, t, chat(strings.Repeat("x", 5000)), nil)
		if res.status != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d", res.status)
		}
	})
	t.Run("bad body", func(t *testing.T) {
		res := f.gatewayRequest(ctx, t, []byte(`{"model":"m","messages":`), nil)
		if res.status != http.StatusBadRequest || !bytes.Contains(res.body, []byte(`"error"`)) {
			t.Fatalf("status %d %s", res.status, res.body)
		}
	})
	t.Run("client cancels mid-body", func(t *testing.T) {
		cancel, _ := f.partial(ctx, t, body[:5], false)
		cancel()
		waitFor(t, "nothing in flight", func() bool { return f.inFlight() == 0 })
	})
	t.Run("client cancels mid-response", func(t *testing.T) {
		cancel, stream := f.partial(ctx, t, body, true)
		_, err := stream.Recv()
		must(t, err)
		if f.inFlight() != 1 {
			t.Fatalf("in flight %v after the decision, want 1", f.inFlight())
		}
		cancel()
		waitFor(t, "nothing in flight", func() bool { return f.inFlight() == 0 })
	})
	t.Run("served endpoint read back, response without a body", func(t *testing.T) {
		f.servedElsewhere(ctx, t, body, true)
		if n := f.inFlight(); n != 0 {
			t.Fatalf("in flight %v after a response without a body", n)
		}
	})
	t.Run("served endpoint moves the count", func(t *testing.T) {
		stream, chosen, other := f.servedElsewhere(ctx, t, body, false)
		per := map[string]float64{}
		f.router.Gauges().InFlight(func(id string, v float64) { per[f.ids[id]] = v })
		if per[other] != 1 || per[chosen] != 0 {
			t.Fatalf("in flight by address %v: want 1 on the served %s", per, other)
		}
		must(t, stream.CloseSend())
		_, _ = stream.Recv()
		waitFor(t, "nothing in flight", func() bool { return f.inFlight() == 0 })
	})
	t.Run("health", func(t *testing.T) {
		for _, svc := range []string{"", ServiceName, LivenessService} {
			h, err := f.health.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("%q: %v %v", svc, h, err)
			}
		}
	})
	t.Run("all ejected", func(t *testing.T) {
		for _, id := range []string{"vllm-0", "vllm-1"} {
			f.router.Picker().Eject(id, time.Now().Add(time.Minute))
		}
		res := f.gatewayRequest(ctx, t, body, nil)
		for _, id := range []string{"vllm-0", "vllm-1"} {
			f.router.Picker().Readmit(id)
		}
		if res.status != http.StatusServiceUnavailable {
			t.Fatalf("status %d", res.status)
		}
		if res := f.gatewayRequest(ctx, t, body, nil); res.status != http.StatusOK {
			t.Fatalf("readmitted: status %d", res.status)
		}
	})
	t.Run("one ejected", func(t *testing.T) {
		f.router.Picker().Eject("vllm-0", time.Now().Add(time.Minute))
		defer f.router.Picker().Readmit("vllm-0")
		for i := range 5 {
			res := f.gatewayRequest(ctx, t, chat(fmt.Sprint("other ", i)), nil)
			if res.status != http.StatusOK || res.endpoint == f.ids["vllm-0"] {
				t.Fatalf("status %d endpoint %s (vllm-0 is ejected)", res.status, res.endpoint)
			}
		}
	})
	t.Run("no endpoints", func(t *testing.T) {
		must(t, f.router.Apply(document(nil)))
		res := f.gatewayRequest(ctx, t, body, nil)
		if res.status != http.StatusServiceUnavailable {
			t.Fatalf("status %d", res.status)
		}
	})
	if n := f.inFlight(); n != 0 {
		t.Fatalf("%v requests still counted in flight", n)
	}
}

// partial opens a stream and sends the headers and one body chunk, the
// body's end or not, and leaves the rest to the test.
func (f *fixture) partial(ctx context.Context, t testing.TB, chunk []byte, end bool) (context.CancelFunc, extprocv3.ExternalProcessor_ProcessClient) {
	t.Helper()
	cctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	stream, err := f.client.Process(cctx)
	must(t, err)
	must(t, stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte("/v1/chat/completions")}}}}}}))
	must(t, stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: chunk, EndOfStream: end}}}))
	return cancel, stream
}

// TestReplicaAsksThePicker: a replica that is not the picker serves the
// protocol by asking the picker, as its proxy does; every decision is the
// picker's.
func TestReplicaAsksThePicker(t *testing.T) {
	keys, err := picker.DeriveKeys([]byte("the endpoint's key, 32 bytes long"))
	must(t, err)
	leader := proxy.New(proxy.Options{AllowLoopbackBackends: true, Replica: "router-0", Keys: keys})
	pick := httptest.NewServer(leader.Picker().Handler())
	defer pick.Close()
	f := newFixture(t, 3, proxy.Options{Replica: "router-1", Keys: keys, Picker: strings.TrimPrefix(pick.URL, "http://")})
	must(t, leader.Apply(document(f.ids)))
	ctx := context.Background()
	work := workload()
	for _, body := range work {
		if res := f.gatewayRequest(ctx, t, body, nil); res.status != http.StatusOK {
			t.Fatalf("status %d: %s", res.status, res.body)
		}
	}
	picks := f.router.Picker().Metrics().Picks
	if got := testutil.ToFloat64(picks.WithLabelValues("picker")); got != float64(len(work)) {
		t.Fatalf("%v of %d decisions by the picker (fallback %v)", got, len(work), testutil.ToFloat64(picks.WithLabelValues("fallback")))
	}
	if hr := hitRate(f.sims); hr < 0.5 {
		t.Fatalf("hit rate %.3f through a replica", hr)
	}
}

// TestTenancyThroughTheProtocol: with API keys the picker refuses a
// request without one (401 naming its scheme, as the proxy answers), and
// has the gateway send on the body with the tenant's cache_salt, without
// the client's key; vLLM's own key is never in the answer (the gateway
// adds it).
func TestTenancyThroughTheProtocol(t *testing.T) {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "acme"), []byte(keyAcme), 0o600))
	ks := &tenancy.KeyStore{}
	_, err := ks.LoadDir(dir)
	must(t, err)
	salts, err := tenancy.NewSalter([]byte("0123456789abcdef0123456789abcdef"))
	must(t, err)
	f := newFixture(t, 2, proxy.Options{Auth: tenancy.Auth{Keys: ks}, Salts: salts, UpstreamAPIKey: "vllm-own-key"})
	ctx := context.Background()
	body := chat("hello")
	if res := f.gatewayRequest(ctx, t, body, nil); res.status != http.StatusUnauthorized || res.header.Get("Www-Authenticate") == "" {
		t.Fatalf("without a key: status %d, headers %v", res.status, res.header)
	}
	res := f.gatewayRequest(ctx, t, body, nil, "Authorization", "Bearer "+keyAcme, "X-Prefix-Aware-Id", "bravo")
	if res.status != http.StatusOK {
		t.Fatalf("status %d: %s", res.status, res.body)
	}
	if want := fmt.Sprintf(`"cache_salt":%q`, salts.Salt("acme")); !bytes.Contains(res.sent, []byte(want)) {
		t.Fatalf("body sent on %s, want %s in it", res.sent, want)
	}
	if got := res.forwarded.Get("Authorization"); got != "" {
		t.Fatalf("Authorization sent on %q: neither the client's key nor vLLM's may be in the answer", got)
	}
	if got := res.forwarded.Get("X-Prefix-Aware-Id"); got != "" {
		t.Fatalf("tenant header sent on: %q", got)
	}
	if fmt.Sprint(len(res.sent)) != res.forwarded.Get("Content-Length") {
		t.Fatalf("content-length %s for %d bytes", res.forwarded.Get("Content-Length"), len(res.sent))
	}
}

const keyAcme = "sk-acme-0123456789abcdef"

// TestThresholdThroughTheProtocol holds requests of one hot prefix open
// through the protocol: the picker counts each in flight from its decision
// to the response's end, so no instance is given more than the threshold
// while others have room, and the first response chunk ends the request's
// prefill load.
func TestThresholdThroughTheProtocol(t *testing.T) {
	const threshold = 2
	f := newFixture(t, 3, proxy.Options{})
	doc := document(f.ids)
	doc.PrefixAware.ConcurrencyThreshold = threshold
	must(t, f.router.Apply(doc))
	ctx := context.Background()
	prompt := strings.Repeat("one hot system prompt shared by every request. ", 40)
	per := map[string]int{}
	var streams []extprocv3.ExternalProcessor_ProcessClient
	for i := range 3 * threshold {
		_, stream := f.partial(ctx, t, chat(prompt+fmt.Sprint(i)), true)
		resp, err := stream.Recv()
		must(t, err)
		addr := resp.GetDynamicMetadata().GetFields()[MetadataNamespace].GetStructValue().GetFields()[DestinationHeader].GetStringValue()
		per[addr]++
		if per[addr] > threshold {
			t.Fatalf("request %d: %s has %d in flight, threshold %d (%v)", i, addr, per[addr], threshold, per)
		}
		bodySentBack(t, stream)
		streams = append(streams, stream)
	}
	if f.inFlight() != 3*threshold || f.prefill() == 0 {
		t.Fatalf("in flight %v, prefill tokens %v", f.inFlight(), f.prefill())
	}
	for _, stream := range streams {
		for _, m := range []*extprocv3.ProcessingRequest{
			{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{}}},
			{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte("data: {}\n\n")}}},
		} {
			must(t, stream.Send(m))
			_, err := stream.Recv()
			must(t, err)
		}
	}
	if f.inFlight() != 3*threshold || f.prefill() != 0 {
		t.Fatalf("after the first chunks: in flight %v, prefill tokens %v", f.inFlight(), f.prefill())
	}
	for _, stream := range streams {
		must(t, stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: []byte("data: [DONE]\n\n"), EndOfStream: true}}}))
		_, err := stream.Recv()
		must(t, err)
	}
	if f.inFlight() != 0 {
		t.Fatalf("in flight %v after every response ended", f.inFlight())
	}
}

func (f *fixture) prefill() float64 {
	var n float64
	f.router.Gauges().PrefillTokens(func(_ string, v float64) { n += v })
	return n
}

// servedElsewhere has a request decided, then answers its response headers
// (the response's end or not) reporting another instance as served.
func (f *fixture) servedElsewhere(ctx context.Context, t testing.TB, body []byte, end bool) (stream extprocv3.ExternalProcessor_ProcessClient, chosen, other string) {
	t.Helper()
	_, stream = f.partial(ctx, t, body, true)
	resp, err := stream.Recv()
	must(t, err)
	chosen = resp.GetDynamicMetadata().GetFields()[MetadataNamespace].GetStructValue().GetFields()[DestinationHeader].GetStringValue()
	bodySentBack(t, stream)
	other = f.ids["vllm-0"]
	if other == chosen {
		other = f.ids["vllm-1"]
	}
	st, _ := structpb.NewStruct(map[string]any{ServedKey: other})
	must(t, stream.Send(&extprocv3.ProcessingRequest{
		Request:         &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{EndOfStream: end}},
		MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{MetadataNamespace: st}}}))
	_, err = stream.Recv()
	must(t, err)
	return stream, chosen, other
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

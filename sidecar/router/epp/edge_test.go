package epp

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/warmroute/warmroute/sidecar/router/proxy"
)

// TestShedsWhileTheBodyBudgetIsSpent: a body that does not fit in what
// other requests' bodies leave of --max-buffered-bytes is answered 429
// with Retry-After; a body held mid-way holds its bytes until its stream
// ends, and a placed request's bytes are free once its body went back to
// the gateway, while its response still runs.
func TestShedsWhileTheBodyBudgetIsSpent(t *testing.T) {
	body := chat(strings.Repeat("a shared prompt. ", 100))
	f := newFixture(t, 2, proxy.Options{MaxBufferedBytes: int64(2*len(body) - 100)})
	ctx := context.Background()
	buffered := func() float64 { return f.router.Gauges().Buffered() }

	cancel, _ := f.partial(ctx, t, body[:len(body)-10], false)
	waitFor(t, "the held chunk counted", func() bool { return buffered() > 0 })
	res := f.gatewayRequest(ctx, t, body, nil)
	if res.status != http.StatusTooManyRequests || !strings.Contains(string(res.body), `"error"`) {
		t.Fatalf("over the budget: status %d %s", res.status, res.body)
	}
	cancel()
	waitFor(t, "the held chunk released", func() bool { return buffered() == 0 })

	_, open := f.partial(ctx, t, body, true)
	resp, err := open.Recv()
	must(t, err)
	if resp.GetRequestHeaders() == nil {
		t.Fatalf("not placed: %v", resp)
	}
	bodySentBack(t, open)
	waitFor(t, "the placed body's bytes freed", func() bool { return buffered() == 0 })
	if res := f.gatewayRequest(ctx, t, body, nil); res.status != http.StatusOK {
		t.Fatalf("with one response running: status %d %s", res.status, res.body)
	}
	if f.inFlight() != 1 {
		t.Fatalf("in flight %v, want the open response's 1", f.inFlight())
	}
}

// TestLargeBodyComesBackInPieces: a body larger than gRPC's default
// message limit (4 MiB, which the Go client enforces) goes back to the
// gateway in pieces of at most 64 KiB.
func TestLargeBodyComesBackInPieces(t *testing.T) {
	f := newFixture(t, 1, proxy.Options{})
	body := chat(strings.Repeat("x", 5<<20))
	_, stream := f.partial(context.Background(), t, nil, false)
	for i := 0; i < len(body); i += 1 << 20 {
		end := min(i+1<<20, len(body))
		must(t, stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: body[i:end], EndOfStream: end == len(body)}}}))
	}
	resp, err := stream.Recv()
	must(t, err)
	if resp.GetRequestHeaders() == nil {
		t.Fatalf("not placed: %v", resp)
	}
	var got, pieces int
	for {
		resp, err := stream.Recv()
		must(t, err)
		sr := resp.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if n := len(sr.GetBody()); n > maxChunk {
			t.Fatalf("a piece of %d bytes", n)
		}
		got += len(sr.GetBody())
		pieces++
		if sr.GetEndOfStream() {
			break
		}
	}
	if got != len(body) {
		t.Fatalf("%d bytes came back in %d pieces, want %d", got, pieces, len(body))
	}
}

// TestResponseTrailersEndTheRequest: a response with trailers ends with
// them (its last body chunk does not end the stream), and so does the
// request's accounting.
func TestResponseTrailersEndTheRequest(t *testing.T) {
	f := newFixture(t, 2, proxy.Options{})
	_, stream := f.partial(context.Background(), t, chat("hello"), true)
	_, err := stream.Recv()
	must(t, err)
	bodySentBack(t, stream)
	for _, m := range []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: statusHeader(200)}}},
		{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte("data: [DONE]\n\n")}}},
	} {
		must(t, stream.Send(m))
		_, err := stream.Recv()
		must(t, err)
	}
	if f.inFlight() != 1 {
		t.Fatalf("in flight %v before the trailers", f.inFlight())
	}
	must(t, stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{
		ResponseTrailers: &extprocv3.HttpTrailers{Trailers: &corev3.HeaderMap{}}}}))
	resp, err := stream.Recv()
	must(t, err)
	if resp.GetResponseTrailers() == nil {
		t.Fatalf("trailers answered with %v", resp)
	}
	if f.inFlight() != 0 {
		t.Fatalf("in flight %v after the trailers", f.inFlight())
	}
	if got := f.outcomes()["2xx"]; got != 1 {
		t.Fatalf("2xx counted %v times", got)
	}
}

func statusHeader(code int) *corev3.HeaderMap {
	return &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", RawValue: []byte(fmt.Sprint(code))}}}
}

// responseHeaders plays the gateway sending the response's headers with
// status code (and, with end, no body), and reads the picker's answer.
func responseHeaders(t testing.TB, stream extprocv3.ExternalProcessor_ProcessClient, code int, end bool) {
	t.Helper()
	must(t, stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: statusHeader(code), EndOfStream: end}}}))
	_, err := stream.Recv()
	must(t, err)
}

// TestHealthWhileDraining: liveness stays SERVING while the router
// drains; readiness and the ext_proc service do not; an unknown service
// is NOT_FOUND, as gRPC health defines.
func TestHealthWhileDraining(t *testing.T) {
	f := newFixture(t, 1, proxy.Options{})
	ctx := context.Background()
	f.router.Drain()
	want := map[string]healthpb.HealthCheckResponse_ServingStatus{
		LivenessService: healthpb.HealthCheckResponse_SERVING,
		"":              healthpb.HealthCheckResponse_NOT_SERVING,
		ServiceName:     healthpb.HealthCheckResponse_NOT_SERVING,
	}
	for svc, st := range want {
		h, err := f.health.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.GetStatus() != st {
			t.Fatalf("%q: %v %v, want %v", svc, h, err, st)
		}
	}
	if _, err := f.health.Check(ctx, &healthpb.HealthCheckRequest{Service: "other"}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown service: %v", err)
	}
}

// outcomes sums warmroute_router_requests_total by outcome.
func (f *fixture) outcomes() map[string]float64 {
	families, err := f.router.Metrics().Registry.Gather()
	if err != nil {
		panic(err)
	}
	out := map[string]float64{}
	for _, mf := range families {
		if mf.GetName() != "warmroute_router_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// TestRequestMetrics: requests placed through the protocol are counted
// in the router's requests_total by outcome, as the proxy counts its own,
// on the instance they ended on; each decision is timed in
// decision_duration_seconds.
func TestRequestMetrics(t *testing.T) {
	f := newFixture(t, 2, proxy.Options{})
	ctx := context.Background()
	for i := range 3 {
		if res := f.gatewayRequest(ctx, t, chat(fmt.Sprint("question ", i)), nil); res.status != http.StatusOK {
			t.Fatalf("status %d", res.status)
		}
	}
	if res := f.gatewayRequest(ctx, t, []byte(`{"model":"m","messages":`), nil); res.status != http.StatusBadRequest {
		t.Fatalf("bad body: status %d", res.status)
	}
	if res := f.gatewayRequest(ctx, t, chat("hi"), []string{"10.0.0.1:8000"}); res.status != http.StatusServiceUnavailable {
		t.Fatalf("subset matching nothing: status %d", res.status)
	}
	cancel, _ := f.partial(ctx, t, chat("hi")[:5], false)
	waitFor(t, "the chunk read", func() bool { return f.router.Gauges().Buffered() > 0 })
	cancel()
	cancel, stream := f.partial(ctx, t, chat("cut before the response"), true)
	_, err := stream.Recv()
	must(t, err)
	cancel()
	cancel, stream = f.partial(ctx, t, chat("cut mid-response"), true)
	_, err = stream.Recv()
	must(t, err)
	bodySentBack(t, stream)
	responseHeaders(t, stream, http.StatusOK, false)
	cancel()
	_, stream = f.partial(ctx, t, chat("a backend error"), true)
	_, err = stream.Recv()
	must(t, err)
	bodySentBack(t, stream)
	responseHeaders(t, stream, http.StatusServiceUnavailable, true)

	want := map[string]float64{"2xx": 3, "rejected": 2, "canceled": 2, "client_disconnect": 1, "5xx": 1}
	waitFor(t, fmt.Sprintf("outcomes %v", want), func() bool {
		got := f.outcomes()
		for k, v := range want {
			if got[k] != v {
				return false
			}
		}
		return len(got) == len(want)
	})
	if got := f.outcomes(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	// Placed requests are counted on their instance, refusals on none.
	m := f.router.Metrics()
	if n := testutil.ToFloat64(m.Requests.WithLabelValues("", "PREFIX_AWARE", "rejected")); n != 2 {
		t.Fatalf("rejected on no instance: %v", n)
	}
	// Every request that reached a decision was timed: 3 + the subset's
	// + the two cut + the 5xx (the bad body never reached one).
	if n := testutil.CollectAndCount(m.DecisionDuration); n != 1 {
		t.Fatalf("%d decision_duration series", n)
	}
	if c := histogramCount(t, f); c != 7 {
		t.Fatalf("decision_duration_seconds counted %d decisions, want 7", c)
	}
	if f.inFlight() != 0 {
		t.Fatalf("in flight %v", f.inFlight())
	}
}

func histogramCount(t *testing.T, f *fixture) uint64 {
	t.Helper()
	families, err := f.router.Metrics().Registry.Gather()
	must(t, err)
	for _, mf := range families {
		if mf.GetName() == "warmroute_router_decision_duration_seconds" {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatal("no decision_duration_seconds")
	return 0
}

// TestRequestTrailers: a request whose trailers end it (its last body
// chunk does not) is placed at the trailers, and the body goes back
// without ending the stream, which the trailers end.
func TestRequestTrailers(t *testing.T) {
	f := newFixture(t, 2, proxy.Options{})
	_, stream := f.partial(context.Background(), t, chat("hello"), false)
	must(t, stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
		RequestTrailers: &extprocv3.HttpTrailers{Trailers: &corev3.HeaderMap{}}}}))
	resp, err := stream.Recv()
	must(t, err)
	if resp.GetRequestHeaders() == nil {
		t.Fatalf("not placed: %v", resp)
	}
	var sent []byte
	for {
		resp, err := stream.Recv()
		must(t, err)
		if resp.GetRequestTrailers() != nil {
			break
		}
		sr := resp.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil || sr.GetEndOfStream() {
			t.Fatalf("body piece %v: want one that does not end the stream", resp)
		}
		sent = append(sent, sr.GetBody()...)
	}
	if string(sent) != string(chat("hello")) {
		t.Fatalf("body sent back %s", sent)
	}
}

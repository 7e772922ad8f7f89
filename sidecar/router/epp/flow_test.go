package epp

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/router/proxy"
	"github.com/warmroute/warmroute/sidecar/router/tenancy"
)

// Flow control holds through the Endpoint Picker Protocol: a tenant over
// its requests per minute is answered 429 with OpenAI's x-ratelimit-*
// headers, as the proxy answers it.
func TestRateLimitThroughTheProtocol(t *testing.T) {
	f := newFixture(t, 1, proxy.Options{Auth: tenancy.Auth{TrustedHeader: "x-gateway-tenant"}})
	d := document(f.ids)
	d.FlowControl = &routingv1alpha1.FlowControl{
		Default:            routingv1alpha1.TenantLimits{Weight: 1, MaxQueued: 10},
		Tenants:            map[string]routingv1alpha1.TenantLimits{"acme": {Weight: 1, RequestsPerMinute: 1, MaxQueued: 10}},
		QueueTimeoutMillis: 30_000, MaxQueued: 100,
	}
	must(t, d.Validate())
	must(t, f.router.Apply(d))
	var answers []*extprocv3.ProcessingResponse
	for range 2 {
		stream, err := f.client.Process(waitCtx(t))
		must(t, err)
		must(t, stream.Send(requestHeaders(false, "x-gateway-tenant", "acme")))
		must(t, stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: chat("hello"), EndOfStream: true}}}))
		got, err := stream.Recv()
		must(t, err)
		answers = append(answers, got)
	}
	if im := answers[0].GetImmediateResponse(); im != nil {
		t.Fatalf("the first request was refused: %d %s", im.GetStatus().GetCode(), im.GetBody())
	}
	im := answers[1].GetImmediateResponse()
	if im == nil || im.GetStatus().GetCode() != http.StatusTooManyRequests {
		t.Fatalf("the second request: %v, want an immediate 429", answers[1])
	}
	if h := immediateHeader(im); h.Get("x-ratelimit-limit-requests") != "1" || h.Get("x-ratelimit-remaining-requests") != "0" || h.Get("Retry-After") == "" {
		t.Fatalf("429 headers %v, want the requests window and Retry-After", h)
	}
}

// The InferenceObjective the gateway names (x-gateway-inference-objective)
// sets a request's priority through the protocol: with the only instance
// full, a request of the "batch" objective (priority -50) queued first is
// served after a later request of the same tenant that names none.
func TestObjectivePriorityThroughTheProtocol(t *testing.T) {
	f := newFixture(t, 1, proxy.Options{Auth: tenancy.Auth{TrustedHeader: "x-gateway-tenant"}})
	d := document(f.ids)
	d.PrefixAware.ConcurrencyThreshold = 1
	d.FlowControl = &routingv1alpha1.FlowControl{
		Default:            routingv1alpha1.TenantLimits{Weight: 1, MaxQueued: 10},
		Tenants:            map[string]routingv1alpha1.TenantLimits{"acme": {Weight: 1, MaxQueued: 10}},
		QueueTimeoutMillis: 30_000, MaxQueued: 100,
		Objectives: map[string]int{"batch": -50},
	}
	must(t, d.Validate())
	must(t, f.router.Apply(d))
	ctx := waitCtx(t)
	decide := func(prompt string, kv ...string) extprocv3.ExternalProcessor_ProcessClient {
		stream, err := f.client.Process(ctx)
		must(t, err)
		must(t, stream.Send(requestHeaders(false, append([]string{"x-gateway-tenant", "acme"}, kv...)...)))
		must(t, stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: chat(prompt), EndOfStream: true}}}))
		return stream
	}
	decided := func(name string, stream extprocv3.ExternalProcessor_ProcessClient, out chan<- string) {
		resp, err := stream.Recv()
		if err != nil || resp.GetImmediateResponse() != nil {
			name += fmt.Sprintf(" refused (%v %v)", err, resp.GetImmediateResponse())
		}
		out <- name
	}
	queued := f.router.Picker().Metrics().Flow.Queued.WithLabelValues("acme")

	first := decide("fills the only slot")
	if resp, err := first.Recv(); err != nil || resp.GetImmediateResponse() != nil {
		t.Fatalf("the first request: %v %v", resp, err)
	}
	order := make(chan string, 2)
	go decided("batch", decide("a batch request", proxy.ObjectiveHeader, "batch"), order)
	waitFor(t, "the batch request to queue", func() bool { return testutil.ToFloat64(queued) == 1 })
	go decided("interactive", decide("an interactive request"), order)
	waitFor(t, "the interactive request to queue", func() bool { return testutil.ToFloat64(queued) == 2 })

	// The first response ends: one place frees, and the request placed
	// in it keeps it (nobody ends it), so the other stays queued.
	must(t, first.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{EndOfStream: true}}}))
	if got := <-order; got != "interactive" {
		t.Fatalf("%s placed first, want the request without an objective (priority 0) before the batch objective's (-50)", got)
	}
	if got := testutil.ToFloat64(queued); got != 1 {
		t.Fatalf("queued{acme} = %v with the batch request still waiting, want 1", got)
	}
}

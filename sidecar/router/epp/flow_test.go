package epp

import (
	"net/http"
	"testing"

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

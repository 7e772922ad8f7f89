package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/router/flow"
	"github.com/warmroute/warmroute/sidecar/router/tenancy"
)

// flowFixture is a router leading alone over one instance with a threshold
// of 1 under fc, tenants named by the X-Tenant header.
func flowFixture(t *testing.T, fc *routingv1alpha1.FlowControl) *fixture {
	t.Helper()
	f := newFixture(t, 1, Options{Auth: tenancy.Auth{TrustedHeader: "X-Tenant"}})
	d := document(routingv1alpha1.StrategyPrefixAware, map[string]string{"vllm-0": f.backends["vllm-0"].addr()})
	d.PrefixAware.ConcurrencyThreshold = 1
	// What the controller fills in (the routers never default).
	fc.QueueTimeoutMillis, fc.MaxQueued, fc.Default.Weight = 30_000, 100, 1
	for name, l := range fc.Tenants {
		l.Weight = 1
		fc.Tenants[name] = l
	}
	d.FlowControl = fc
	d.Default()
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := f.router.Apply(d); err != nil {
		t.Fatal(err)
	}
	return f
}

func errorTypeCode(t *testing.T, body string) (typ, code string) {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code == nil {
		t.Fatalf("not an OpenAI error body: %s", body)
	}
	return e.Error.Type, *e.Error.Code
}

// While the only instance is full, a tenant that may queue waits for it
// and is answered; one that may not (maxQueued 0) gets 503 with
// Retry-After at once; the instance never holds more than its threshold.
func TestFlowQueueThroughTheProxy(t *testing.T) {
	f := flowFixture(t, &routingv1alpha1.FlowControl{Tenants: map[string]routingv1alpha1.TenantLimits{
		"wait": {MaxQueued: 5}, "solo": {MaxQueued: 0},
	}})
	b := f.backends["vllm-0"]
	b.delay = 300 * time.Millisecond
	first := make(chan int, 1)
	go func() {
		resp, _ := f.post(t, "/v1/chat/completions", chatBody("m", "first", ""), "X-Tenant", "wait")
		first <- resp.StatusCode
	}()
	eventuallyTrue(t, "the first request to reach vLLM", func() bool { return b.inFlight.Load() == 1 })

	resp, body := f.post(t, "/v1/chat/completions", chatBody("m", "not queued", ""), "X-Tenant", "solo")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("solo: %d (Retry-After %q) %s, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if code := errorCode(t, body); code != "not_queued" {
		t.Fatalf("solo: code %q, want not_queued", code)
	}

	resp, body = f.post(t, "/v1/chat/completions", chatBody("m", "second", ""), "X-Tenant", "wait")
	if resp.StatusCode != 200 {
		t.Fatalf("queued request: %d %s", resp.StatusCode, body)
	}
	if code := <-first; code != 200 {
		t.Fatalf("first request: %d", code)
	}
	if got := b.peak.Load(); got != 1 {
		t.Fatalf("vLLM held %d requests at once, want at most the threshold, 1", got)
	}
}

// A tenant over its requests per minute gets 429 with OpenAI's error and
// x-ratelimit-* headers; a bad priority header is a 400 naming it.
func TestFlowRateLimitThroughTheProxy(t *testing.T) {
	f := flowFixture(t, &routingv1alpha1.FlowControl{Tenants: map[string]routingv1alpha1.TenantLimits{
		"metered": {RequestsPerMinute: 2},
	}})
	for i := range 2 {
		if resp, body := f.post(t, "/v1/chat/completions", chatBody("m", fmt.Sprint("q", i), ""), "X-Tenant", "metered"); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	resp, body := f.post(t, "/v1/chat/completions", chatBody("m", "one too many", ""), "X-Tenant", "metered")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third request: %d %s, want 429", resp.StatusCode, body)
	}
	if typ, code := errorTypeCode(t, body); typ != "requests" || code != "rate_limit_exceeded" {
		t.Fatalf("type %q code %q, want requests/rate_limit_exceeded", typ, code)
	}
	h := resp.Header
	if h.Get("x-ratelimit-limit-requests") != "2" || h.Get("x-ratelimit-remaining-requests") != "0" || h.Get("x-ratelimit-reset-requests") == "" {
		t.Fatalf("x-ratelimit headers: %v", h)
	}
	if h.Get("x-ratelimit-limit-tokens") != "" {
		t.Fatalf("a tokens limit the tenant does not have: %v", h)
	}
	if s, err := strconv.Atoi(h.Get("Retry-After")); err != nil || s < 1 || s > 60 {
		t.Fatalf("Retry-After %q", h.Get("Retry-After"))
	}
	// Other tenants are not limited.
	if resp, body := f.post(t, "/v1/chat/completions", chatBody("m", "another tenant", ""), "X-Tenant", "free"); resp.StatusCode != 200 {
		t.Fatalf("unlimited tenant: %d %s", resp.StatusCode, body)
	}
	resp, body = f.post(t, "/v1/chat/completions", chatBody("m", "bad priority", ""), "X-Tenant", "free", PriorityHeader, "high")
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad priority: %d %s", resp.StatusCode, body)
	}
}

// The response's usage settles the tenant's tokens: vLLM here reports 6
// tokens per request, more than the router's estimate for "q", so a limit
// of 20 tokens a minute admits 3 or 4 requests, not 20.
func TestFlowUsageSettlesTokens(t *testing.T) {
	f := flowFixture(t, &routingv1alpha1.FlowControl{Tenants: map[string]routingv1alpha1.TenantLimits{
		"metered": {TokensPerMinute: 20},
	}})
	admitted := 0
	for i := range 20 {
		resp, body := f.post(t, "/v1/chat/completions", chatBody("m", fmt.Sprint("q", i), ""), "X-Tenant", "metered")
		if resp.StatusCode == http.StatusTooManyRequests {
			if resp.Header.Get("x-ratelimit-limit-tokens") != "20" {
				t.Fatalf("429 without the tokens limit: %v", resp.Header)
			}
			break
		}
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
		admitted++
	}
	if admitted < 3 || admitted > 4 {
		t.Fatalf("%d requests admitted under 20 tokens a minute at 6 tokens each, want 3 or 4", admitted)
	}
}

// A request asks for the lower of its priority header's and its
// InferenceObjective's priority; an objective the document does not list
// asks for nothing.
func TestSenderPriority(t *testing.T) {
	fc := &routingv1alpha1.FlowControl{Objectives: map[string]int{"batch": -50, "chat": 10}}
	for _, tc := range []struct {
		name       string
		fc         *routingv1alpha1.FlowControl
		kv         []string
		prio       int
		lowers     bool
		wantRefuse bool
	}{
		{"neither: the tenant's priority", fc, nil, 0, false, false},
		{"the header alone", fc, []string{PriorityHeader, "-7"}, -7, true, false},
		{"the objective alone", fc, []string{ObjectiveHeader, "batch"}, -50, true, false},
		{"the objective lower than the header", fc, []string{ObjectiveHeader, "batch", PriorityHeader, "-7"}, -50, true, false},
		{"the header lower than the objective", fc, []string{ObjectiveHeader, "chat", PriorityHeader, "-7"}, -7, true, false},
		{"an objective the document does not list", fc, []string{ObjectiveHeader, "other-pool"}, 0, false, false},
		{"an objective without flow control", nil, []string{ObjectiveHeader, "batch"}, 0, false, false},
		{"a bad header beside an objective", fc, []string{ObjectiveHeader, "batch", PriorityHeader, "low"}, 0, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for i := 0; i+1 < len(tc.kv); i += 2 {
				h.Set(tc.kv[i], tc.kv[i+1])
			}
			s, refused := sender(h, "acme", tc.fc)
			if (refused != nil) != tc.wantRefuse {
				t.Fatalf("refused %v, want a refusal: %v", refused, tc.wantRefuse)
			}
			if tc.wantRefuse {
				return
			}
			if s.Tenant != "acme" || s.Priority != tc.prio || s.Lowers != tc.lowers {
				t.Fatalf("sender %+v, want priority %d lowers %v", s, tc.prio, tc.lowers)
			}
		})
	}
}

func TestUsageTail(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks []string
		want   int64
	}{
		{"json", []string{`{"choices":[],"usage":{"prompt_tokens":3,"total_tokens":1234,"completion_tokens":3}}`}, 1234},
		{"split number", []string{`{"usage":{"total_tokens":12`, `34}}`}, 1234},
		{"stream", []string{"data: {\"usage\":{\"total_tokens\": 77}}\n\n", "data: [DONE]\n\n"}, 77},
		{"last wins", []string{`"total_tokens":5,`, string(make([]byte, 600)), `"total_tokens":9}`}, 9},
		{"none", []string{`{"choices":[]}`}, flow.Unknown},
		{"cut off", []string{`{"usage":{"total_tokens":12`}, flow.Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var u usageTail
			for _, c := range tc.chunks {
				u.write([]byte(c))
			}
			if got := u.tokens(); got != tc.want {
				t.Fatalf("tokens = %d, want %d", got, tc.want)
			}
			if len(u.buf) > usageTailBytes {
				t.Fatalf("kept %d bytes, more than %d", len(u.buf), usageTailBytes)
			}
		})
	}
}

func eventuallyTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

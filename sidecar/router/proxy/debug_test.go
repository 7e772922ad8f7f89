package proxy

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// The debug route reads a body as the traffic port does and answers the
// peeked instance, without sending the request anywhere.
func TestDebugRoute(t *testing.T) {
	f := newFixture(t, 3, Options{MaxBodyBytes: 1 << 16})
	var seen []policy.Request
	peek := func(req policy.Request) (policy.Peeked, error) {
		if req.Model == "gpt-9" {
			return policy.Peeked{}, policy.ErrUnknownModel
		}
		seen = append(seen, policy.Request{Model: req.Model, Tenant: req.Tenant, Text: append([]byte(nil), req.Text...), WindowBytes: req.WindowBytes})
		return policy.Peeked{Instance: "vllm-1", Placed: "vllm-0", Spill: policy.SpillConcurrency}, nil
	}
	srv := httptest.NewServer(f.router.DebugRoute(peek))
	defer srv.Close()
	post := func(query, body string, header ...string) (int, string) {
		resp, out := postURL(t, srv.URL+"/debug/route"+query, body, header...)
		return resp.StatusCode, out
	}

	status, body := post("", chatBody("m", "the shared system prompt", ""), "X-Prefix-Aware-Id", "tenant-a")
	var got policy.Peeked
	if status != 200 || json.Unmarshal([]byte(body), &got) != nil || got != (policy.Peeked{Instance: "vllm-1", Placed: "vllm-0", Spill: policy.SpillConcurrency}) {
		t.Fatalf("chat: %d %s", status, body)
	}
	if len(seen) != 1 || seen[0].Model != "m" || seen[0].Tenant != "tenant-a" || !strings.Contains(string(seen[0].Text), "the shared system prompt") {
		t.Fatalf("peeked %+v", seen)
	}
	if status, body := post("?endpoint=/v1/completions", `{"model":"m","prompt":"complete me"}`); status != 200 ||
		!strings.Contains(string(seen[1].Text), "complete me") {
		t.Fatalf("completions: %d %s", status, body)
	}
	if status, body := post("?endpoint=/invocations", `{"raw":"bytes"}`); status != 200 || string(seen[2].Text) != `{"raw":"bytes"}` {
		t.Fatalf("invocations: %d %s", status, body)
	}
	for _, tc := range []struct {
		query, body string
		status      int
	}{
		{"?endpoint=/v1/embeddings", chatBody("m", "x", ""), 400},
		{"", `{"model":"m","messages":[`, 400},
		{"", chatBody("gpt-9", "x", ""), 404},
		{"", chatBody("m", strings.Repeat("x", 1<<16), ""), 413},
	} {
		if status, body := post(tc.query, tc.body); status != tc.status || !strings.Contains(body, `"error"`) {
			t.Errorf("%s %.40s: %d %s, want %d with an error body", tc.query, tc.body, status, body, tc.status)
		}
	}
	for id, b := range f.backends {
		if n := b.count(); n != 0 {
			t.Errorf("backend %s received %d requests from the debug route", id, n)
		}
	}
}

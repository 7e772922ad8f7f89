package proxy

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

// silentBackend accepts connections on loopback, reads what it is sent and
// never answers.
func silentBackend(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	return ln.Addr().String()
}

// TestResponseHeaderTimeout: a backend that takes the request and never
// answers is given up on, a stream after the stream idle timeout and any
// other request after the response header timeout, each limit counted
// from the request written; the client gets 504 with an OpenAI error, and
// the backend is counted and ejected.
func TestResponseHeaderTimeout(t *testing.T) {
	const short, long = 100 * time.Millisecond, time.Hour
	for _, tc := range []struct {
		name, path, body string
		opts             Options
	}{
		{"stream", "/v1/chat/completions", chatBody("m", "hi", `,"stream":true`), Options{StreamIdleTimeout: short, ResponseHeaderTimeout: long}},
		{"stream on /invocations", "/invocations", `{"prompt":"hi","stream":true}`, Options{StreamIdleTimeout: short, ResponseHeaderTimeout: long}},
		{"not streamed", "/v1/completions", `{"model":"m","prompt":"hi"}`, Options{StreamIdleTimeout: long, ResponseHeaderTimeout: short}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			opts.AllowLoopbackBackends, opts.EjectBase = true, time.Minute
			r := New(opts)
			if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, map[string]string{"b": silentBackend(t)})); err != nil {
				t.Fatal(err)
			}
			srv := newServer(t, r)
			// Far past the short limit, never reached by the long one: a
			// client still waiting then waits for ever.
			client := &http.Client{Timeout: 20 * time.Second}
			resp, err := client.Post(srv+tc.path, "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var e errorBody
			if resp.StatusCode != http.StatusGatewayTimeout || json.Unmarshal(body, &e) != nil || e.Error.Code == nil || *e.Error.Code != "upstream_timeout" {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			waitOutcome(t, r, "upstream_timeout")
			if got := counterValue(r.Metrics().UpstreamErrors.WithLabelValues("b", "header_timeout")); got != 1 {
				t.Fatalf("%v header_timeout upstream errors", got)
			}
			if r.own.Healthy("b") {
				t.Fatal("the silent backend was not ejected")
			}
		})
	}
}

package vllmsim

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// stream is a streaming completions request read event by event.
type stream struct {
	resp   *http.Response
	events *bufio.Scanner
}

func startStream(t *testing.T, ctx context.Context, s *Server, maxTokens int) *stream {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/v1/completions",
		strings.NewReader(`{"prompt":"x","stream":true,"max_tokens":`+strconv.Itoa(maxTokens)+`}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("stream headers: %v", err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return &stream{resp: resp, events: bufio.NewScanner(resp.Body)}
}

// next returns the next event's data, or false at the end of the body.
func (s *stream) next() (string, bool) {
	for s.events.Scan() {
		if data, ok := strings.CutPrefix(s.events.Text(), "data: "); ok {
			return data, true
		}
	}
	return "", false
}

// rest reads to the end: the number of token events and whether [DONE]
// came last.
func (s *stream) rest() (tokens int, done bool) {
	for {
		data, ok := s.next()
		if !ok {
			return tokens, done
		}
		done = data == "[DONE]"
		if strings.Contains(data, `"text"`) {
			tokens++
		}
	}
}

// vLLM starts a streaming response before prefill; a request that waits
// in the queue already has its headers.
func TestStreamingHeadersBeforePrefill(t *testing.T) {
	g := settle(t)
	s := startServer(t, Config{TimeScale: 1, MaxRunning: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Holds the only running slot for about an hour of wall time.
	_ = startStream(t, ctx, s, 100000)
	g.Eventually(func() bool { return s.Stats().Running == 1 }).Should(BeTrue(), "a running request")

	queued := startStream(t, ctx, s, 4) // returns once headers arrive
	if got := s.Stats().Waiting; got != 1 {
		t.Errorf("waiting = %d: the second request should still queue", got)
	}
	h := queued.resp.Header
	if queued.resp.StatusCode != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") {
		t.Errorf("queued stream: status %d, Content-Type %q", queued.resp.StatusCode, h.Get("Content-Type"))
	}
	if h.Get(HeaderPromptTokens) == "" || h.Get(HeaderCachedTokens) != "" || h.Get(HeaderTTFT) != "" {
		t.Errorf("headers before prefill carry %v; want prompt tokens only (the rest are trailers)", h)
	}
}

// A stream's cached tokens and TTFT, unknown when its headers left, come
// as trailers.
func TestStreamingTrailers(t *testing.T) {
	s := startServer(t, Config{})
	st := startStream(t, context.Background(), s, 3)
	if tokens, done := st.rest(); tokens != 3 || !done {
		t.Fatalf("stream: %d tokens, [DONE] %v", tokens, done)
	}
	for _, k := range []string{HeaderCachedTokens, HeaderTTFT} {
		if st.resp.Trailer.Get(k) == "" {
			t.Errorf("no %s trailer (trailers %v)", k, st.resp.Trailer)
		}
	}
}

// Without --shutdown-timeout, vLLM aborts every request in flight on
// SIGTERM.
func TestTerminateWithoutTimeoutAbortsRequests(t *testing.T) {
	s := startServer(t, Config{TimeScale: 0.01})
	st := startStream(t, context.Background(), s, 100000)
	if _, ok := st.next(); !ok {
		t.Fatal("no first token")
	}
	got := s.Terminate()
	if want := (Termination{InFlight: 1, Aborted: 1}); got != want {
		t.Errorf("Terminate() = %+v, want %+v", got, want)
	}
	if tokens, done := st.rest(); done {
		t.Errorf("the stream ended with [DONE] after %d more tokens; want it cut short", tokens)
	}
	if resp, err := http.Get(s.URL() + "/health"); err == nil {
		resp.Body.Close()
		t.Error("the server still answers after Terminate")
	}
}

// With --shutdown-timeout, running requests finish and new ones get 503.
func TestTerminateWithTimeoutDrains(t *testing.T) {
	g := settle(t)
	s := startServer(t, Config{TimeScale: 0.01, ShutdownTimeout: time.Minute})
	const tokens = 200 // 6 simulated seconds, 60 ms of wall time
	st := startStream(t, context.Background(), s, tokens)
	if _, ok := st.next(); !ok {
		t.Fatal("no first token")
	}
	result := make(chan Termination, 1)
	go func() { result <- s.Terminate() }()
	g.Eventually(func() bool { _, ok := s.Terminated(); return ok }).Should(BeTrue(), "termination to begin")

	r := post(t, s.URL()+"/v1/completions", map[string]any{"prompt": "late", "max_tokens": 1})
	if r.status != http.StatusServiceUnavailable {
		t.Errorf("new request while draining: status %d, want 503", r.status)
	}
	if h := get(t, s.URL()+"/health"); h.status != http.StatusServiceUnavailable {
		t.Errorf("/health while draining: %d, want 503", h.status)
	}
	// The first token was read above.
	if n, done := st.rest(); n != tokens-1 || !done {
		t.Errorf("drained stream: %d more tokens, [DONE] %v; want %d and [DONE]", n, done, tokens-1)
	}
	if got, want := <-result, (Termination{ShutdownTimeout: time.Minute, InFlight: 1, Refused: 1}); got != want {
		t.Errorf("Terminate() = %+v, want %+v", got, want)
	}
}

// What is still running when the shutdown timeout ends is aborted.
func TestTerminateAbortsWhatOutlastsTheTimeout(t *testing.T) {
	s := startServer(t, Config{TimeScale: 0.01, ShutdownTimeout: 50 * time.Millisecond})
	st := startStream(t, context.Background(), s, 100000)
	if _, ok := st.next(); !ok {
		t.Fatal("no first token")
	}
	got := s.Terminate()
	if got.Aborted != 1 {
		t.Errorf("Terminate() = %+v, want the long request aborted", got)
	}
	if _, done := st.rest(); done {
		t.Error("the stream ended with [DONE]")
	}
	_, _ = io.Copy(io.Discard, st.resp.Body)
}

package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

// oneBackend routes everything to a handler on loopback.
func oneBackend(t *testing.T, opts Options, h http.HandlerFunc) (*Router, string) {
	t.Helper()
	be := httptest.NewServer(h)
	t.Cleanup(be.Close)
	opts.AllowLoopbackBackends = true
	if opts.EjectBase == 0 {
		opts.EjectBase = time.Minute
	}
	r := New(opts)
	if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, map[string]string{"b": strings.TrimPrefix(be.URL, "http://")})); err != nil {
		t.Fatal(err)
	}
	return r, newServer(t, r)
}

func outcomes(r *Router) map[string]float64 {
	out := map[string]float64{}
	fams, _ := r.Metrics().Registry.Gather()
	for _, f := range fams {
		if f.GetName() != "warmroute_router_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// waitOutcome waits for the router to count a request with outcome, which
// it does after the client has its answer.
func waitOutcome(t *testing.T, r *Router, outcome string) {
	t.Helper()
	NewWithT(t).Eventually(func() map[string]float64 { return outcomes(r) }, 10*time.Second, 5*time.Millisecond).
		Should(HaveKeyWithValue(outcome, BeNumerically(">", 0)), "a request with outcome %s", outcome)
}

const sseChunk = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok\"}}]}\n\n"

// TestStalledStreamCutAndEjected: a backend that stops mid-stream while its
// /health keeps answering is cut off, counted, and stays ejected.
func TestStalledStreamCutAndEjected(t *testing.T) {
	r, srv := oneBackend(t, Options{StreamIdleTimeout: 100 * time.Millisecond, HealthInterval: 10 * time.Millisecond},
		func(w http.ResponseWriter, req *http.Request) {
			if req.URL.Path == "/health" {
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, sseChunk)
			w.(http.Flusher).Flush()
			<-req.Context().Done() // then nothing, until the router gives up
		})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.RunHealthChecks(ctx)
	resp, err := http.Post(srv+"/v1/chat/completions", "application/json", strings.NewReader(chatBody("m", "hi", `,"stream":true`)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Fatal("a stalled stream ended as if complete")
	}
	waitOutcome(t, r, "upstream_timeout")
	if got := counterValue(r.Metrics().UpstreamErrors.WithLabelValues("b", "stream_idle")); got != 1 {
		t.Fatalf("%v stream_idle upstream errors", got)
	}
	// Ten rounds of passing health checks do not readmit it.
	NewWithT(t).Consistently(func() bool { return r.own.Healthy("b") }, 100*time.Millisecond, 5*time.Millisecond).
		Should(BeFalse(), "readmitted by /health while its streams stall")
}

// TestTimeToFirstTokenAtFirstContentEvent: headers at once, a role-only
// event, then the first content event after a pause, as vLLM does.
func TestTimeToFirstTokenAtFirstContentEvent(t *testing.T) {
	const prefill = 300 * time.Millisecond
	r, srv := oneBackend(t, Options{}, func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n")
		w.(http.Flusher).Flush()
		time.Sleep(prefill)
		// Split mid-event: the scan must join lines across reads.
		_, _ = io.WriteString(w, sseChunk[:20])
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, sseChunk[20:]+"data: [DONE]\n\n")
	})
	resp, err := http.Post(srv+"/v1/chat/completions", "application/json", strings.NewReader(chatBody("m", "hi", `,"stream":true`)))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	waitOutcome(t, r, "2xx")
	headers := histogram(t, r.Metrics().TimeToFirstByte.WithLabelValues("true").(prometheus.Histogram))
	token := histogram(t, r.Metrics().TimeToFirstToken)
	if headers.GetSampleCount() != 1 || token.GetSampleCount() != 1 {
		t.Fatalf("samples: headers %d, first token %d", headers.GetSampleCount(), token.GetSampleCount())
	}
	// Relative, not wall-clock: the first token comes a prefill after the
	// headers, however slow the machine. Recorded at the headers or at the
	// empty role chunk, the gap would be about 0; half the prefill leaves
	// room for the router to take the headers' time a little after the
	// backend flushed them (2.5 ms late once in CI, on a loaded machine).
	if gap := time.Duration((token.GetSampleSum() - headers.GetSampleSum()) * 1e9); gap < prefill/2 {
		t.Fatalf("first token recorded %v after the headers; the backend waited %v", gap, prefill)
	}
	if n := histogram(t, r.Metrics().TimeToFullResponse).GetSampleCount(); n != 0 {
		t.Fatalf("a stream counted as a full response %d times", n)
	}
	// A non-streaming response gets its own metric.
	r2, srv2 := oneBackend(t, Options{}, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, `{"ok":true}`) })
	resp, _ = http.Post(srv2+"/v1/chat/completions", "application/json", strings.NewReader(chatBody("m", "hi", "")))
	resp.Body.Close()
	waitOutcome(t, r2, "2xx")
	if histogram(t, r2.Metrics().TimeToFullResponse).GetSampleCount() != 1 || histogram(t, r2.Metrics().TimeToFirstToken).GetSampleCount() != 0 {
		t.Fatal("non-streaming response not recorded as a full response")
	}
}

func TestCarriesOutput(t *testing.T) {
	for data, want := range map[string]bool{
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null}]}`: false,
		`{"choices":[{"index":0,"delta":{"content":"Hi"}}]}`:                                  true,
		`{"choices":[{"index":0,"text":"Hi"}]}`:                                               true,
		`{"choices":[{"index":0,"text":""}]}`:                                                 false,
		`{"choices":[],"usage":{"prompt_tokens":3}}`:                                          false,
		`{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}`:                                true,
		`{"choices":[{"delta":{"reasoning_content":"Let"}}]}`:                                 true,
		`{"choices":[{"delta":{"content":"\"quoted\""}}]}`:                                    true,
		`[DONE]`:       false,
		`{"custom":1}`: true,
	} {
		if got := carriesOutput([]byte(data)); got != want {
			t.Errorf("%s: %v", data, got)
		}
	}
}

func histogram(t *testing.T, h prometheus.Histogram) *dto.Histogram {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram()
}

// TestCutStreamsCountedAsWhatTheyAre: a client leaving mid-stream and a
// backend resetting mid-stream are neither counted 2xx nor alike; the
// reverse proxy's own complaint goes to the structured log.
func TestCutStreamsCountedAsWhatTheyAre(t *testing.T) {
	var mu sync.Mutex
	var logLines []string
	log := funcr.NewJSON(func(obj string) { mu.Lock(); logLines = append(logLines, obj); mu.Unlock() }, funcr.Options{})
	var reset atomic.Bool
	r, srv := oneBackend(t, Options{Log: log}, func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, sseChunk)
		w.(http.Flusher).Flush()
		if reset.Load() {
			conn, _, _ := w.(http.Hijacker).Hijack()
			_ = conn.(*net.TCPConn).SetLinger(0) // RST
			conn.Close()
			return
		}
		for req.Context().Err() == nil {
			_, _ = io.WriteString(w, sseChunk)
			w.(http.Flusher).Flush()
			time.Sleep(10 * time.Millisecond)
		}
	})
	// The client reads one event and goes.
	resp, err := http.Post(srv+"/v1/chat/completions", "application/json", strings.NewReader(chatBody("m", "hi", `,"stream":true`)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	waitOutcome(t, r, "client_disconnect")

	reset.Store(true)
	resp, err = http.Post(srv+"/v1/chat/completions", "application/json", strings.NewReader(chatBody("m", "hi", `,"stream":true`)))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	waitOutcome(t, r, "upstream_reset")
	if got := outcomes(r); got["2xx"] != 0 || got["client_disconnect"] != 1 || got["upstream_reset"] != 1 {
		t.Fatalf("outcomes %v", got)
	}
	mu.Lock()
	defer mu.Unlock()
	var proxyLines int
	for _, l := range logLines {
		if !strings.HasPrefix(l, "{") {
			t.Fatalf("plain-text log line %q", l)
		}
		if strings.Contains(l, "ReverseProxy") {
			proxyLines++
		}
	}
	if proxyLines == 0 {
		t.Fatalf("the reverse proxy's error did not reach the structured log: %q", logLines)
	}
}

// TestReloadsLeaveOnlyCurrentSeries: instance names change with every
// rollout; 200 reloads must not leave 200 instances' series behind.
func TestReloadsLeaveOnlyCurrentSeries(t *testing.T) {
	b := newBackend(t, "x")
	dead := deadAddr(t)
	r := New(Options{AllowLoopbackBackends: true, EjectBase: time.Minute})
	srv := newServer(t, r)
	for i := range 200 {
		live, gone := fmt.Sprintf("live-%d", i), fmt.Sprintf("dead-%d", i)
		if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, map[string]string{live: b.addr(), gone: dead})); err != nil {
			t.Fatal(err)
		}
		// Touch every per-backend series: requests, a connect failure,
		// an ejection, a health gauge.
		for k := range 3 {
			postTo(t, srv, "/v1/chat/completions", chatBody("m", fmt.Sprintf("%d-%d", i, k), ""))
		}
	}
	fams, err := r.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "backend" && l.GetValue() != "" && l.GetValue() != "live-199" && l.GetValue() != "dead-199" {
					t.Fatalf("%s keeps a series for removed backend %s", f.GetName(), l.GetValue())
				}
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.failures) > 1 {
		t.Fatalf("failure state of %d instances kept", len(r.failures))
	}
}

func TestHealthChecksFollowNoRedirect(t *testing.T) {
	healthy := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer healthy.Close()
	r, _ := oneBackend(t, Options{HealthInterval: 10 * time.Millisecond}, func(w http.ResponseWriter, req *http.Request) {
		http.Redirect(w, req, healthy.URL+"/health", http.StatusFound)
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.RunHealthChecks(ctx)
	NewWithT(t).Eventually(func() bool { return r.own.Healthy("b") }, 5*time.Second, 5*time.Millisecond).
		Should(BeFalse(), "a redirect to a healthy server counted as health")
}

package workload

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warmroute/warmroute/test/vllmsim"
)

// small returns each generated workload at a size a unit test can afford.
func small(seed uint64) []Workload {
	return []Workload{
		LongContext(LongContextConfig{Seed: seed, Requests: 40, Contexts: 4, ContextTokens: 800}),
		SupportBot(SupportBotConfig{Seed: seed, Users: 6, Turns: 3, SystemTokens: 300}),
		RAG(RAGConfig{Seed: seed, Requests: 40, Documents: 20, DocTokens: 300, SystemTokens: 100}),
		ShareGPT(ShareGPTConfig{Seed: seed, Sessions: 8}),
		MixedLength(MixedLengthConfig{Seed: seed, Chats: 8, DocRequests: 10, Documents: 5, DocTokens: 800}),
		HotPrefix(HotPrefixConfig{Seed: seed, Bursts: 2, BurstSize: 5, PrefixTokens: 100}),
		TenantTraffic(TenantTrafficConfig{Seed: seed, Tenant: "a", Rate: 10, Duration: 4 * time.Second, SystemTokens: 100}),
	}
}

func bodies(t *testing.T, w Workload) []string {
	t.Helper()
	var out []string
	for _, r := range w.Requests {
		b, err := Body(r, Options{})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	return out
}

func TestGeneratorsAreDeterministic(t *testing.T) {
	a, b, c := small(1), small(1), small(2)
	for i := range a {
		t.Run(a[i].Name, func(t *testing.T) {
			ba, bb, bc := bodies(t, a[i]), bodies(t, b[i]), bodies(t, c[i])
			if strings.Join(ba, "\n") != strings.Join(bb, "\n") {
				t.Error("same seed, different requests")
			}
			if strings.Join(ba, "\n") == strings.Join(bc, "\n") {
				t.Error("different seeds, same requests")
			}
			for j := 1; j < len(a[i].Requests); j++ {
				if a[i].Requests[j].Arrival < a[i].Requests[j-1].Arrival {
					t.Fatalf("request %d arrives before request %d", j, j-1)
				}
			}
		})
	}
}

func TestLongContextShape(t *testing.T) {
	w := LongContext(LongContextConfig{Seed: 1, Requests: 200, Contexts: 5, ContextTokens: 1000})
	contexts := map[string]int{}
	for _, r := range w.Requests {
		if got := len(r.Messages[0].Content); got != 1000*CharsPerToken {
			t.Fatalf("context of %d chars, want %d", got, 1000*CharsPerToken)
		}
		contexts[r.Messages[0].Content]++
	}
	if len(contexts) != 5 {
		t.Fatalf("%d distinct contexts, want 5", len(contexts))
	}
	for _, n := range contexts {
		if n < 20 {
			t.Errorf("a context is used %d times of 200; want roughly uniform", n)
		}
	}
}

func TestConversationsGrowTurnByTurn(t *testing.T) {
	w := SupportBot(SupportBotConfig{Seed: 3, Users: 4, Turns: 4, SystemTokens: 100})
	bySession := map[string][]Request{}
	for _, r := range w.Requests {
		bySession[r.Session] = append(bySession[r.Session], r)
	}
	if len(bySession) != 4 {
		t.Fatalf("%d sessions, want 4", len(bySession))
	}
	system := w.Requests[0].Messages[0].Content
	for s, turns := range bySession {
		for k, r := range turns {
			if r.Turn != k {
				t.Fatalf("%s: turn %d at position %d", s, r.Turn, k)
			}
			if r.Messages[0].Content != system {
				t.Fatalf("%s turn %d does not start with the shared system prompt", s, k)
			}
			if want := 2 + 2*k; len(r.Messages) != want {
				t.Fatalf("%s turn %d has %d messages, want %d", s, k, len(r.Messages), want)
			}
			if k > 0 {
				prev := turns[k-1].Messages
				for j := range prev {
					if r.Messages[j].Role != prev[j].Role || r.Messages[j].Content != prev[j].Content {
						t.Fatalf("%s turn %d does not extend turn %d", s, k, k-1)
					}
				}
			}
		}
	}
}

func TestRAGPopularityIsSkewed(t *testing.T) {
	w := RAG(RAGConfig{Seed: 1, Requests: 2000, Documents: 100, DocTokens: 50, SystemTokens: 10})
	counts := map[string]int{}
	for _, r := range w.Requests {
		counts[r.Messages[1].Parts[0]]++
	}
	most := 0
	for _, n := range counts {
		most = max(most, n)
	}
	// Zipf(1) over 100 documents: the top one gets 1/H(100) ≈ 19 %.
	if most < 250 || most > 550 {
		t.Errorf("most popular document has %d of 2000 requests, want about 385", most)
	}
}

const miniTrace = `{"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 3]}
{"timestamp": 10, "input_length": 700, "output_length": 0, "hash_ids": [1, 4]}

{"timestamp": 25, "input_length": 300, "output_length": 9, "hash_ids": [7]}
`

func TestReadMooncake(t *testing.T) {
	w, err := ReadMooncake(strings.NewReader(miniTrace), MooncakeConfig{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Requests) != 3 {
		t.Fatalf("%d requests, want 3", len(w.Requests))
	}
	a, b := w.Requests[0], w.Requests[1]
	if got := a.PromptChars(); got != 1100*CharsPerToken {
		t.Errorf("first prompt %d chars, want %d", got, 1100*CharsPerToken)
	}
	if a.Messages[0].Parts[0] != b.Messages[0].Parts[0] {
		t.Error("the same block id gave different text")
	}
	if a.Messages[0].Parts[1][:100] == b.Messages[0].Parts[1][:100] {
		t.Error("different block ids gave the same text")
	}
	if b.MaxTokens != 1 || w.Requests[2].MaxTokens != 9 {
		t.Errorf("max tokens %d and %d, want 1 and 9", b.MaxTokens, w.Requests[2].MaxTokens)
	}
	if w.Requests[1].Arrival != 10*time.Millisecond {
		t.Errorf("arrival %v, want 10ms", w.Requests[1].Arrival)
	}
}

func TestMooncakeSharedTrace(t *testing.T) {
	path := filepath.Join("..", "..", "..", "shared", "traces", "mooncake_synthetic_trace.jsonl")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("shared trace not present: %v", err)
	}
	w, err := Mooncake(MooncakeConfig{Path: path, Requests: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Requests) != 100 {
		t.Fatalf("%d requests, want 100", len(w.Requests))
	}
}

// startSims starts n simulators on loopback, fast enough for a unit test.
func startSims(t *testing.T, n int) []*vllmsim.Server {
	t.Helper()
	var out []*vllmsim.Server
	for i := range n {
		s, err := vllmsim.Start(vllmsim.Config{
			Listen: "127.0.0.1:0", InstanceID: "sim-" + string(rune('a'+i)),
			CacheTokens: 1 << 16, TimeScale: 0.01,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		out = append(out, s)
	}
	return out
}

func TestRunKeepsTurnsInOrderAndMeasures(t *testing.T) {
	sims := startSims(t, 1)
	w := SupportBot(SupportBotConfig{Seed: 1, Users: 5, Turns: 3, SystemTokens: 400, Rate: 50, ThinkTime: time.Millisecond})
	before := FleetStatsOf(sims...)
	for _, opts := range []Options{
		{TimeScale: 0.01, Streaming: true},
		{Concurrency: 4},
	} {
		results, err := Run(context.Background(), sims[0].URL(), w.Requests, opts)
		if err != nil {
			t.Fatal(err)
		}
		end := map[string]time.Duration{}
		for i, r := range results {
			if !r.OK() {
				t.Fatalf("request %d failed: %s", i, r.Err)
			}
			if r.Instance != "sim-a" {
				t.Fatalf("request %d: instance %q, want sim-a", i, r.Instance)
			}
			if r.TTFT <= 0 || r.TTFT > r.Latency || r.EngineTTFT < 0 {
				t.Fatalf("request %d: ttft %v, latency %v, engine ttft %v", i, r.TTFT, r.Latency, r.EngineTTFT)
			}
			if e, ok := end[r.Session]; ok && r.Sent < e {
				t.Fatalf("%s turn %d sent before the previous turn finished", r.Session, r.Turn)
			}
			end[r.Session] = r.Sent + r.Latency
		}
		s := Summarize(results, []string{"sim-a"}, opts.TimeScale)
		if s.Failures != 0 || s.Share["sim-a"] != len(w.Requests) || s.ShareMaxAvg != 1 {
			t.Fatalf("summary %+v", s)
		}
		if s.TTFT.P50 <= 0 || s.TTFT.P50 > s.TTFT.P99 || s.Throughput <= 0 {
			t.Fatalf("summary percentiles %+v, throughput %v", s.TTFT, s.Throughput)
		}
	}
	delta := FleetStatsOf(sims...).Since(before)
	// Every request but the first starts with the shared system prompt.
	if hr := delta.HitRate(); hr < 0.5 {
		t.Errorf("hit rate %.2f, want most prompt tokens cached", hr)
	}
	scraped, err := ScrapeFleet(context.Background(), nil, []string{sims[0].URL()})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := scraped.Total().PrefixCacheHits, FleetStatsOf(sims...).Total().PrefixCacheHits; got != want {
		t.Errorf("scraped %d hit tokens, library says %d", got, want)
	}
}

// TestTenantTraffic: a tenant's requests arrive at its rate within the
// span and share its system prompt, which no other tenant's share; each
// question is its own.
func TestTenantTraffic(t *testing.T) {
	cfg := TenantTrafficConfig{Seed: 1, Tenant: "a", Rate: 20, Duration: 50 * time.Second, SystemTokens: 300, QuestionTokens: 50, MaxTokens: 32}
	a := TenantTraffic(cfg)
	cfg.Tenant = "b"
	b := TenantTraffic(cfg)
	// 1,000 expected: a Poisson count's standard deviation is about 32.
	if n := len(a.Requests); n < 900 || n > 1100 {
		t.Errorf("%d requests at 20/s over 50 s, want about 1,000", n)
	}
	if last := a.Duration(); last >= cfg.Duration || last < cfg.Duration-time.Second {
		t.Errorf("last arrival at %v, want just under %v", last, cfg.Duration)
	}
	questions := map[string]bool{}
	lengths := map[int]bool{}
	total := 0
	for i, r := range a.Requests {
		if r.Messages[0].Content != a.Requests[0].Messages[0].Content {
			t.Fatalf("request %d has another system prompt", i)
		}
		if r.MaxTokens < 16 || r.MaxTokens > 48 || r.Tenant != "" {
			t.Fatalf("request %d: max tokens %d (want 16..48), tenant %q", i, r.MaxTokens, r.Tenant)
		}
		questions[r.Messages[1].Content] = true
		lengths[r.MaxTokens] = true
		total += r.MaxTokens
	}
	if mean := float64(total) / float64(len(a.Requests)); len(lengths) < 30 || mean < 31 || mean > 33 {
		t.Errorf("%d distinct completion lengths, mean %.1f: want them spread over 16..48 around 32", len(lengths), mean)
	}
	if len(questions) != len(a.Requests) {
		t.Errorf("%d distinct questions in %d requests", len(questions), len(a.Requests))
	}
	if a.Requests[0].Messages[0].Content == b.Requests[0].Messages[0].Content || a.Requests[0].Arrival == b.Requests[0].Arrival {
		t.Error("tenants a and b share a system prompt or arrivals")
	}
	if len(TenantTraffic(TenantTrafficConfig{Tenant: "c", Duration: time.Minute}).Requests) != 0 {
		t.Error("a rate of 0 generated requests")
	}
}

// TestRunSendsHeadersAndReadsErrorCodes: Options.Header goes on every
// request (vLLM's API key here, a tenant's key through the router), and a
// refusal's OpenAI error code is read into Result.Code.
func TestRunSendsHeadersAndReadsErrorCodes(t *testing.T) {
	s, err := vllmsim.Start(vllmsim.Config{Listen: "127.0.0.1:0", InstanceID: "sim-a", APIKey: "sk-bench-0123456789", TimeScale: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	w := TenantTraffic(TenantTrafficConfig{Seed: 1, Tenant: "a", Rate: 100, Duration: 100 * time.Millisecond, SystemTokens: 50, QuestionTokens: 10, MaxTokens: 4})
	key := http.Header{"Authorization": {"Bearer sk-bench-0123456789"}}
	results, err := Run(context.Background(), s.URL(), w.Requests, Options{TimeScale: 0.01, Header: key})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range results {
		if !r.OK() || r.Code != "" {
			t.Fatalf("request %d with the key: %s (code %q)", i, r.Err, r.Code)
		}
	}
	results, err = Run(context.Background(), s.URL(), w.Requests[:1], Options{TimeScale: 0.01, Model: "no-such-model", Header: key})
	if err != nil {
		t.Fatal(err)
	}
	if r := results[0]; r.Status != http.StatusNotFound || r.Code != "404" {
		t.Errorf("unknown model: status %d, code %q (%s), want 404 and vLLM's code 404", r.Status, r.Code, r.Err)
	}
}

func TestErrorCode(t *testing.T) {
	for body, want := range map[string]string{
		`{"error":{"message":"slow down","type":"rate_limit_exceeded","code":"rate_limit_exceeded"}}`: "rate_limit_exceeded",
		`{"error":{"message":"x","code":404}}`:                                                        "404",
		`{"error":{"message":"x","code":null}}`:                                                       "",
		`{"error":"Unauthorized"}`:                                                                    "",
		`not json`:                                                                                    "",
	} {
		if got := errorCode([]byte(body)); got != want {
			t.Errorf("errorCode(%s) = %q, want %q", body, got, want)
		}
	}
}

func TestRunStopsWithContext(t *testing.T) {
	sims := startSims(t, 1)
	w := LongContext(LongContextConfig{Seed: 1, Requests: 20, Contexts: 2, ContextTokens: 100, Rate: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	results, err := Run(ctx, sims[0].URL(), w.Requests, Options{TimeScale: 1})
	if err == nil {
		t.Fatal("want the context's error")
	}
	if len(results) != 20 || results[19].OK() {
		t.Fatalf("the last request should not have been sent: %+v", results[19])
	}
}

func TestPercentiles(t *testing.T) {
	xs := make([]float64, 100)
	for i := range xs {
		xs[i] = float64(100 - i)
	}
	if p := percentiles(xs); p != (Percentiles{P50: 50, P90: 90, P99: 99}) {
		t.Errorf("percentiles %+v", p)
	}
	if m := MaxOverAverage(map[string]int{"a": 3, "b": 1, "c": 2}); m != 1.5 {
		t.Errorf("max/avg %v, want 1.5", m)
	}
}

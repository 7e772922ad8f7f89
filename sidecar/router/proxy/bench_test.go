package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/router/extract"
	"github.com/warmroute/warmroute/sidecar/router/picker"
	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// percentiles reports p50 and p99 of the samples as benchmark metrics.
func percentiles(b *testing.B, prefix string, samples []time.Duration) (p50, p99 time.Duration) {
	slices.Sort(samples)
	p50 = samples[len(samples)/2]
	p99 = samples[len(samples)*99/100]
	b.ReportMetric(float64(p50.Nanoseconds())/1e3, prefix+"p50-µs")
	b.ReportMetric(float64(p99.Nanoseconds())/1e3, prefix+"p99-µs")
	return p50, p99
}

// chatBodies returns n distinct OpenAI chat bodies of about size bytes: a
// shared system prompt, a per-body document and a question.
func chatBodies(n, size int) [][]byte {
	r := rand.New(rand.NewPCG(1, 1))
	words := strings.Fields("the quick brown fox jumps over lazy dog cache prefix router vLLM token block hash instance tenant")
	text := func(n int) string {
		var sb strings.Builder
		for sb.Len() < n {
			sb.WriteString(words[r.IntN(len(words))])
			sb.WriteByte(' ')
		}
		return sb.String()[:n]
	}
	system := text(3000)
	out := make([][]byte, n)
	for i := range out {
		body, _ := json.Marshal(map[string]any{
			"model": "m",
			"messages": []map[string]string{
				{"role": "system", "content": system},
				{"role": "user", "content": text(size - 3300)},
				{"role": "assistant", "content": "Sure."},
				{"role": "user", "content": fmt.Sprintf("question %d?", i)},
			},
			"stream": true, "max_tokens": 64,
		})
		out[i] = body
	}
	return out
}

// BenchmarkDecision measures the whole routing decision for a 64 KiB chat
// body — extraction of the routing text, block hashing, PREFIX_AWARE
// placement and the overload guard — with per-decision timings for p50/p99.
func BenchmarkDecision(b *testing.B) {
	for _, strategy := range decisionStrategies {
		for _, ep := range []string{"chat", "invocations"} {
			b.Run(fmt.Sprintf("%s/%s/64KiB", strategy, ep), func(b *testing.B) { benchmarkDecision(b, strategy, ep, 8) })
		}
	}
}

// decisionStrategies are those BenchmarkDecision times: PREFIX_AWARE, and
// the benchmark baseline in builds with the benchstrategies tag.
var decisionStrategies = []policy.Strategy{policy.PrefixAware}

// BenchmarkDecisionFleet is BenchmarkDecision's PREFIX_AWARE chat decision
// over fleets of 8 to 1,024 instances: one picker decides for a whole
// endpoint, so its cost per decision as the fleet grows is the fleet's
// ceiling.
func BenchmarkDecisionFleet(b *testing.B) {
	for _, n := range []int{8, 64, 256, 1024} {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) { benchmarkDecision(b, policy.PrefixAware, "chat", n) })
	}
}

func benchmarkDecision(b *testing.B, strategy policy.Strategy, ep string, instances int) {
	bodies := chatBodies(256, 64<<10)
	p := policy.New(policy.Tuning{BenchmarkStrategies: true})
	ins := make([]policy.Instance, instances)
	for i := range ins {
		ins[i] = policy.Instance{ID: fmt.Sprintf("vllm-%d", i), Address: "127.0.0.1:1"}
	}
	if err := p.Update(policy.Config{Strategy: strategy, Model: "m", HashSeed: 1, PrefixLength: 4096, ConcurrencyThreshold: 10, Instances: ins}); err != nil {
		b.Fatal(err)
	}
	lim := extract.Limits{Window: 4096, Lookahead: p.LookaheadBytes()}
	samples := make([]time.Duration, 0, b.N)
	b.SetBytes(int64(len(bodies[0])))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		body := bodies[i%len(bodies)]
		start := time.Now()
		var x extract.Request
		var err error
		if ep == "chat" {
			x, err = extract.OpenAI(extract.Chat, body, "", lim)
		} else {
			x, err = extract.Invocations(body, "", lim)
		}
		if err != nil {
			b.Fatal(err)
		}
		c, err := p.Pick(p.Key(policy.Request{Model: x.Model, Tenant: x.Tenant, Text: x.Text, WindowBytes: x.WindowBytes}))
		if err != nil {
			b.Fatal(err)
		}
		x.Release()
		c.Done()
		samples = append(samples, time.Since(start))
	}
	b.StopTimer()
	percentiles(b, "", samples)
}

// BenchmarkProxyAddedLatency sends 4 KiB non-streaming chat requests on
// loopback, alternately straight to the backend and through the router, in
// the same process, and reports both medians and their difference: through
// the leader (it decides in process) and through a non-leader (it asks the
// leader over the signed pick API on loopback).
func BenchmarkProxyAddedLatency(b *testing.B) {
	for _, role := range []string{"leader", "non-leader"} {
		b.Run(role, func(b *testing.B) { benchmarkAddedLatency(b, role == "non-leader") })
	}
}

func benchmarkAddedLatency(b *testing.B, follower bool) {
	be := newBackend(b, "vllm-0")
	doc := document(routingv1alpha1.StrategyPrefixAware, map[string]string{"vllm-0": be.addr()})
	keys, err := picker.DeriveKeys([]byte("the endpoint's key, 32 bytes long"))
	if err != nil {
		b.Fatal(err)
	}
	r := New(Options{AllowLoopbackBackends: true, Keys: keys, Replica: "router-0"})
	if err := r.Apply(doc); err != nil {
		b.Fatal(err)
	}
	if follower {
		pick := httptest.NewServer(r.Picker().Handler())
		defer pick.Close()
		r = New(Options{AllowLoopbackBackends: true, Keys: keys, Replica: "router-1", Picker: strings.TrimPrefix(pick.URL, "http://")})
		if err := r.Apply(doc); err != nil {
			b.Fatal(err)
		}
	}
	router := httptest.NewServer(r.Handler())
	defer router.Close()
	body := chatBodies(1, 4<<10)[0] // about 4 KiB on the wire
	body = bytes.Replace(body, []byte(`"stream":true`), []byte(`"stream":false`), 1)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	call := func(url string) time.Duration {
		start := time.Now()
		resp, err := client.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
		return time.Since(start)
	}
	for range 200 { // warm connections on both paths
		call(be.srv.URL)
		call(router.URL)
	}
	direct := make([]time.Duration, 0, b.N)
	routed := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		direct = append(direct, call(be.srv.URL))
		routed = append(routed, call(router.URL))
	}
	b.StopTimer()
	d50, _ := percentiles(b, "direct-", direct)
	r50, _ := percentiles(b, "routed-", routed)
	b.ReportMetric(float64((r50-d50).Nanoseconds())/1e3, "added-p50-µs")
	b.ReportMetric(float64(len(body)), "request-bytes")
	if follower && counterValue(r.Picker().Metrics().Picks.WithLabelValues("picker")) < float64(b.N) {
		b.Fatal("the non-leader did not ask the picker for every request")
	}
}

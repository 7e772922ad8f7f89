package vllmsim

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

const testModel = "sim-model"

// startServer runs a simulator on a free loopback port, fast by default.
func startServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	cfg.Model = cmp.Or(cfg.Model, testModel)
	cfg.TimeScale = cmp.Or(cfg.TimeScale, 0.001)
	s, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

type httpResult struct {
	status int
	header http.Header
	body   []byte
}

func post(t *testing.T, url string, body any) httpResult {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return roundTrip(t, http.MethodPost, url, bytes.NewReader(b))
}

func get(t *testing.T, url string) httpResult {
	t.Helper()
	return roundTrip(t, http.MethodGet, url, nil)
}

func roundTrip(t *testing.T, method, url string, body io.Reader) httpResult {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	// A stream's cached tokens and TTFT arrive as trailers.
	for k, v := range resp.Trailer {
		resp.Header[k] = v
	}
	return httpResult{status: resp.StatusCode, header: resp.Header, body: out}
}

// completion sends a non-streaming completions request and returns the
// decoded response.
func completion(t *testing.T, s *Server, body map[string]any) completionResponse {
	t.Helper()
	r := post(t, s.URL()+"/v1/completions", body)
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var resp completionResponse
	if err := json.Unmarshal(r.body, &resp); err != nil {
		t.Fatal(err)
	}
	if got := r.header.Get(HeaderCachedTokens); got != strconv.Itoa(resp.Usage.PromptTokensDetails.CachedTokens) {
		t.Errorf("%s = %q, usage says %d", HeaderCachedTokens, got, resp.Usage.PromptTokensDetails.CachedTokens)
	}
	return resp
}

// text of n tokens (plus begin-of-text) at the default 4 characters a token.
func text(seed string, n int) string {
	return strings.Repeat(fmt.Sprintf("%-4.4s", seed), n)
}

func TestPrefixCache(t *testing.T) {
	type req struct {
		prompt, model, salt string
		wantCached          int
	}
	shared := text("abcd", 63) // with begin-of-text: 64 tokens, 4 full blocks
	tests := []struct {
		name        string
		cacheTokens int
		requests    []req
	}{
		{name: "a repeated prompt hits all but its last block", requests: []req{
			{prompt: shared, wantCached: 0},
			{prompt: shared, wantCached: 48},
		}},
		{name: "a shared prefix hits its full blocks", requests: []req{
			{prompt: shared + text("q1", 40), wantCached: 0},
			{prompt: shared + text("q2", 40), wantCached: 64},
		}},
		{name: "a prompt extending a cached one hits all its blocks", requests: []req{
			{prompt: text("turn", 31), wantCached: 0},
			{prompt: text("turn", 31) + text("next", 40), wantCached: 32},
		}},
		{name: "cache_salt isolates", requests: []req{
			{prompt: shared, salt: "tenant-a", wantCached: 0},
			{prompt: shared, salt: "tenant-b", wantCached: 0},
			{prompt: shared, wantCached: 0},
			{prompt: shared, salt: "tenant-a", wantCached: 48},
		}},
		{name: "adapters isolate", requests: []req{
			{prompt: shared, model: "lora-a", wantCached: 0},
			{prompt: shared, model: "lora-b", wantCached: 0},
			{prompt: shared, model: testModel, wantCached: 0},
			{prompt: shared, model: "lora-a", wantCached: 48},
		}},
		{name: "the least recently used prefix is evicted", cacheTokens: 160, requests: []req{
			{prompt: text("aaaa", 63), wantCached: 0}, // 4 blocks + 1 partial for the output
			{prompt: text("bbbb", 63), wantCached: 0},
			{prompt: text("cccc", 63), wantCached: 0}, // evicts a's chain
			{prompt: text("bbbb", 63), wantCached: 48},
			{prompt: text("aaaa", 63), wantCached: 0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startServer(t, Config{
				CacheTokens: tt.cacheTokens,
				LoRAModules: map[string]string{"lora-a": "/adapters/a", "lora-b": "/adapters/b"},
			})
			for i, r := range tt.requests {
				body := map[string]any{"prompt": r.prompt, "max_tokens": 16}
				if r.model != "" {
					body["model"] = r.model
				}
				if r.salt != "" {
					body["cache_salt"] = r.salt
				}
				resp := completion(t, s, body)
				if got := resp.Usage.PromptTokensDetails.CachedTokens; got != r.wantCached {
					t.Errorf("request %d: cached tokens = %d, want %d", i, got, r.wantCached)
				}
			}
		})
	}
}

func TestMultiTurnChatHitsPreviousTurn(t *testing.T) {
	s := startServer(t, Config{})
	client := openai.NewClient(option.WithBaseURL(s.URL()+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx := context.Background()
	msgs := []openai.ChatCompletionMessageParamUnion{
		openai.SystemMessage(text("sys.", 200)),
		openai.UserMessage("What is the capital of France? Answer at length."),
	}
	first, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: testModel, Messages: msgs, MaxTokens: openai.Int(40)})
	if err != nil {
		t.Fatal(err)
	}
	msgs = append(msgs, openai.AssistantMessage(first.Choices[0].Message.Content), openai.UserMessage("And of Spain?"))
	second, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: testModel, Messages: msgs, MaxTokens: openai.Int(40)})
	if err != nil {
		t.Fatal(err)
	}
	// Everything the first turn computed, prompt and answer but the last
	// token, in full blocks.
	want := (first.Usage.PromptTokens + first.Usage.CompletionTokens - 1) / 16 * 16
	if got := second.Usage.PromptTokensDetails.CachedTokens; got != int64(want) {
		t.Errorf("second turn cached %d tokens, want %d", got, want)
	}
}

func TestStreamingWithOpenAIClient(t *testing.T) {
	s := startServer(t, Config{LoRAModules: map[string]string{"lora-a": "/a"}})
	client := openai.NewClient(option.WithBaseURL(s.URL()+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx := context.Background()

	for _, model := range []string{testModel, "lora-a"} {
		t.Run("chat "+model, func(t *testing.T) {
			var resp *http.Response
			stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
				Model:         model,
				Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text("hi..", 40))},
				MaxTokens:     openai.Int(7),
				StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
			}, option.WithResponseInto(&resp))
			acc := openai.ChatCompletionAccumulator{}
			var contentChunks int
			for stream.Next() {
				c := stream.Current()
				acc.AddChunk(c)
				if len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
					contentChunks++
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if contentChunks != 7 {
				t.Errorf("content chunks = %d, want 7", contentChunks)
			}
			if got := acc.Choices[0].Message.Content; len(got) != 28 {
				t.Errorf("content %q: %d bytes, want 28", got, len(got))
			}
			if acc.Choices[0].FinishReason != "length" {
				t.Errorf("finish reason %q, want length", acc.Choices[0].FinishReason)
			}
			if acc.Usage.CompletionTokens != 7 || acc.Usage.PromptTokens != 44 {
				t.Errorf("usage %+v, want 44 prompt and 7 completion tokens", acc.Usage)
			}
			if acc.Model != model {
				t.Errorf("model %q, want %q", acc.Model, model)
			}
			if got := resp.Header.Get(HeaderInstance); got != s.InstanceID() {
				t.Errorf("%s = %q, want %q", HeaderInstance, got, s.InstanceID())
			}
			if got := resp.Header.Get("Content-Type"); got != "text/event-stream" {
				t.Errorf("content type %q", got)
			}
		})
	}

	t.Run("completions batch", func(t *testing.T) {
		stream := client.Completions.NewStreaming(ctx, openai.CompletionNewParams{
			Model:     testModel,
			Prompt:    openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{"first prompt", "second prompt"}},
			MaxTokens: openai.Int(3),
		})
		perChoice := map[int64]string{}
		for stream.Next() {
			for _, c := range stream.Current().Choices {
				perChoice[c.Index] += c.Text
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if len(perChoice) != 2 || len(perChoice[0]) != 12 || len(perChoice[1]) != 12 {
			t.Errorf("choices %v, want two of 3 tokens", perChoice)
		}
	})

	t.Run("non-streaming chat", func(t *testing.T) {
		c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    testModel,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
		}, option.WithJSONSet("cache_salt", "s"))
		if err != nil {
			t.Fatal(err)
		}
		if c.Usage.CompletionTokens != DefaultMaxTokens || c.Choices[0].Message.Role != "assistant" {
			t.Errorf("got %d tokens from %q, want %d from assistant", c.Usage.CompletionTokens, c.Choices[0].Message.Role, DefaultMaxTokens)
		}
	})
}

func TestHTTPSurface(t *testing.T) {
	s := startServer(t, Config{InstanceID: "pod-7", LoRAModules: map[string]string{"lora-a": "/a"}})
	tests := []struct {
		name       string
		method     string
		path       string
		body       any
		wantStatus int
		wantInBody string
	}{
		{"health", "GET", "/health", nil, 200, ""},
		{"sagemaker ping", "GET", "/ping", nil, 200, ""},
		{"models lists base and adapters", "GET", "/v1/models", nil, 200, `"id":"lora-a"`},
		{"metrics", "GET", "/metrics", nil, 200, MetricPrefixCacheQueries},
		{"invocations as chat", "POST", "/invocations", map[string]any{"messages": []map[string]string{{"role": "user", "content": "hi"}}}, 200, `"object":"chat.completion"`},
		{"invocations as completion", "POST", "/invocations", map[string]any{"prompt": "hi"}, 200, `"object":"text_completion"`},
		{"invocations without either", "POST", "/invocations", map[string]any{"input": "hi"}, 400, `"type":"BadRequestError"`},
		{"unknown model", "POST", "/v1/chat/completions", map[string]any{"model": "nope", "messages": []map[string]string{{"role": "user", "content": "hi"}}}, 404, "The model `nope` does not exist."},
		{"content parts", "POST", "/v1/chat/completions", map[string]any{"messages": []map[string]any{{"role": "user", "content": []map[string]string{{"type": "text", "text": "hi"}}}}}, 200, `"prompt_tokens":5`},
		{"empty messages", "POST", "/v1/chat/completions", map[string]any{"messages": []any{}}, 400, "at least one message"},
		{"zero max_tokens", "POST", "/v1/completions", map[string]any{"prompt": "hi", "max_tokens": 0}, 400, "max_tokens must be at least 1"},
		{"max_completion_tokens wins", "POST", "/v1/chat/completions", map[string]any{"max_tokens": 9, "max_completion_tokens": 2, "messages": []map[string]string{{"role": "user", "content": "hi"}}}, 200, `"completion_tokens":2`},
		{"token-id prompt", "POST", "/v1/completions", map[string]any{"prompt": []int{1, 2, 3}, "max_tokens": 1}, 200, `"prompt_tokens":3`},
		{"too long", "POST", "/v1/completions", map[string]any{"prompt": "hi", "max_tokens": 200000}, 400, "maximum context length is 131072 tokens"},
		{"bad json", "POST", "/v1/completions", "{", 400, `"error":{`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r httpResult
			if tt.method == "GET" {
				r = get(t, s.URL()+tt.path)
			} else {
				r = post(t, s.URL()+tt.path, tt.body)
			}
			if r.status != tt.wantStatus {
				t.Errorf("status %d, want %d: %s", r.status, tt.wantStatus, r.body)
			}
			if !strings.Contains(string(r.body), tt.wantInBody) {
				t.Errorf("body %s does not contain %s", r.body, tt.wantInBody)
			}
			if got := r.header.Get(HeaderInstance); got != "pod-7" {
				t.Errorf("%s = %q, want pod-7", HeaderInstance, got)
			}
		})
	}

	s.SetHealthy(false)
	if r := get(t, s.URL()+"/health"); r.status != http.StatusServiceUnavailable {
		t.Errorf("unhealthy /health status %d, want 503", r.status)
	}
}

func TestLoRAAdapters(t *testing.T) {
	s := startServer(t, Config{MaxLoRAs: 2, LoRAFail: []string{"broken"}})
	// The adapters exist as directories, as vLLM needs them; "absent" not.
	dir := t.TempDir()
	for _, name := range []string{"a", "b", "c", "broken"} {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	load := func(name string) httpResult {
		return post(t, s.URL()+"/v1/load_lora_adapter", map[string]string{"lora_name": name, "lora_path": filepath.Join(dir, name)})
	}
	unload := func(name string) httpResult {
		return post(t, s.URL()+"/v1/unload_lora_adapter", map[string]string{"lora_name": name})
	}
	chat := func(model string) httpResult {
		return post(t, s.URL()+"/v1/chat/completions", map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": "hi"}}, "max_tokens": 1})
	}
	steps := []struct {
		name       string
		do         func() httpResult
		wantStatus int
		wantInBody string
	}{
		{"request before load", func() httpResult { return chat("a") }, 404, "does not exist"},
		{"load", func() httpResult { return load("a") }, 200, "Success: LoRA adapter 'a' added successfully."},
		{"request after load", func() httpResult { return chat("a") }, 200, `"model":"a"`},
		{"load twice", func() httpResult { return load("a") }, 400, "has already been loaded"},
		{"missing path", func() httpResult {
			return post(t, s.URL()+"/v1/load_lora_adapter", map[string]string{"lora_name": "x"})
		}, 400, "Both 'lora_name' and 'lora_path' must be provided."},
		{"path that does not exist", func() httpResult { return load("absent") }, 404, "Loading lora absent failed: No adapter found for " + filepath.Join(dir, "absent")},
		{"Hugging Face id, taken on trust", func() httpResult {
			return post(t, s.URL()+"/v1/load_lora_adapter", map[string]string{"lora_name": "hub", "lora_path": "org/hub-lora"})
		}, 200, "Success"},
		{"unload it", func() httpResult { return unload("hub") }, 200, "Success"},
		{"configured failure", func() httpResult { return load("broken") }, 400, "Loading lora broken failed"},
		{"second adapter", func() httpResult { return load("b") }, 200, "Success"},
		{"over max-loras", func() httpResult { return load("c") }, 400, "maximum number of LoRA adapters (2)"},
		{"unload", func() httpResult { return unload("a") }, 200, "Success: LoRA adapter 'a' removed successfully."},
		{"unload unknown", func() httpResult { return unload("a") }, 404, "cannot be found"},
		{"request after unload", func() httpResult { return chat("a") }, 404, "does not exist"},
		{"room again", func() httpResult { return load("c") }, 200, "Success"},
		{"models", func() httpResult { return get(t, s.URL()+"/v1/models") }, 200, `"id":"b","object":"model"`},
	}
	for _, st := range steps {
		r := st.do()
		if r.status != st.wantStatus || !strings.Contains(string(r.body), st.wantInBody) {
			t.Errorf("%s: %d %s, want %d containing %q", st.name, r.status, r.body, st.wantStatus, st.wantInBody)
		}
	}
	var models modelList
	if err := json.Unmarshal(get(t, s.URL()+"/v1/models").body, &models); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range models.Data {
		ids = append(ids, m.ID)
	}
	if got := strings.Join(ids, ","); got != testModel+",b,c" {
		t.Errorf("models %s, want %s,b,c", got, testModel)
	}
}

func TestMetricsFollowRequests(t *testing.T) {
	s := startServer(t, Config{})
	prompt := text("metr", 99) // 100 tokens
	var wantQueries, wantHits, wantGenerated int
	for range 3 {
		resp := completion(t, s, map[string]any{"prompt": prompt, "max_tokens": 5})
		wantQueries += resp.Usage.PromptTokens
		wantHits += resp.Usage.PromptTokensDetails.CachedTokens
		wantGenerated += resp.Usage.CompletionTokens
	}
	r := get(t, s.URL()+"/metrics")
	st, err := ParseStats(bytes.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{Requests: 3, PromptTokens: 300, GenerationTokens: 15, PrefixCacheQueries: 300, PrefixCacheHits: 192}
	if st != want {
		t.Errorf("scraped %+v\nwant    %+v", st, want)
	}
	if int(st.PrefixCacheQueries) != wantQueries || int(st.PrefixCacheHits) != wantHits || int(st.GenerationTokens) != wantGenerated {
		t.Errorf("metrics disagree with the responses' usage: queries %d/%d hits %d/%d", st.PrefixCacheQueries, wantQueries, st.PrefixCacheHits, wantHits)
	}
	in := s.Stats()
	if in.MaxInFlight != 1 {
		t.Errorf("MaxInFlight %d after requests one at a time, want 1", in.MaxInFlight)
	}
	in.MaxInFlight = 0 // not a vLLM metric, so not scraped
	if in != st {
		t.Errorf("Stats() = %+v, scrape = %+v", in, st)
	}
	for _, line := range []string{
		`vllm:time_to_first_token_seconds_count{engine="0",model_name="sim-model"} 3`,
		`vllm:e2e_request_latency_seconds_count{engine="0",model_name="sim-model"} 3`,
		`vllm:request_success_total{engine="0",finished_reason="length",model_name="sim-model"} 3`,
		`vllm:cache_config_info{block_size="16",enable_prefix_caching="True",engine="0",num_gpu_blocks="65536"} 1`,
	} {
		if !strings.Contains(string(r.body), line) {
			t.Errorf("metrics lack %s", line)
		}
	}
}

// ttft is the simulated time to first token the server reported.
func ttft(t *testing.T, r httpResult) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(r.header.Get(HeaderTTFT), 64)
	if err != nil {
		t.Fatalf("%s: %v", HeaderTTFT, err)
	}
	return v
}

func TestTimingModel(t *testing.T) {
	const tolerance = 1e-9
	t.Run("an idle engine prefills at the configured rate", func(t *testing.T) {
		s := startServer(t, Config{PrefillTokensPerSec: 1000, StepOverhead: 5 * time.Millisecond})
		r := post(t, s.URL()+"/v1/completions", map[string]any{"prompt": text("abcd", 499), "max_tokens": 1})
		if got, want := ttft(t, r), 500.0/1000+0.005; math.Abs(got-want) > tolerance {
			t.Errorf("ttft %v, want %v", got, want)
		}
		r = post(t, s.URL()+"/v1/completions", map[string]any{"prompt": text("abcd", 499), "max_tokens": 1})
		// 31 of the 500 tokens' blocks hit; 4 tokens remain.
		if got, want := ttft(t, r), 4.0/1000+0.005; math.Abs(got-want) > tolerance {
			t.Errorf("cached ttft %v, want %v (only the 4 uncached tokens)", got, want)
		}
	})

	t.Run("simulated time does not depend on the time scale", func(t *testing.T) {
		var ttfts []float64
		for _, scale := range []float64{1, 0.01} {
			s := startServer(t, Config{TimeScale: scale})
			start := time.Now()
			r := post(t, s.URL()+"/v1/completions", map[string]any{"prompt": text("abcd", 2499), "max_tokens": 4})
			wall := time.Since(start)
			ttfts = append(ttfts, ttft(t, r))
			// 2500/25000 s + 5 ms, then 3 decode steps of 30 ms: 195 ms.
			if simulated := 0.195 * scale; wall.Seconds() < simulated || wall.Seconds() > simulated+0.15 {
				t.Errorf("scale %v: took %v, want about %.3fs", scale, wall, simulated)
			}
		}
		if math.Abs(ttfts[0]-ttfts[1]) > tolerance || math.Abs(ttfts[0]-0.105) > tolerance {
			t.Errorf("ttft %v at scale 1 and %v at 0.01, want 0.105 for both", ttfts[0], ttfts[1])
		}
	})

}

func TestQueueing(t *testing.T) {
	g := settle(t)
	s := startServer(t, Config{MaxRunning: 2, TimeScale: 0.01})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			body := strings.NewReader(fmt.Sprintf(`{"prompt": %q, "max_tokens": 1000}`, text(fmt.Sprint(i), 10)))
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/v1/completions", body)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_ = resp.Body.Close()
			}
		})
	}
	g.Eventually(func() bool {
		st, err := ScrapeStats(ctx, http.DefaultClient, s.URL())
		return err == nil && st.Running == 2 && st.Waiting == 4 && st.KVCacheUsage > 0
	}).Should(BeTrue(), "2 running and 4 waiting")
	cancel() // clients leave: their requests are aborted
	wg.Wait()
	g.Eventually(func() bool {
		st := s.Stats()
		return st.Running == 0 && st.Waiting == 0 && st.KVCacheUsage == 0
	}).Should(BeTrue(), "an empty engine")
	// The high-water mark keeps the peak of running + waiting after the
	// gauges fell back to zero.
	if got := s.Stats().MaxInFlight; got != 6 {
		t.Errorf("MaxInFlight %d after 6 requests at once, want 6", got)
	}
}

func TestCloseFailsRequestsInFlight(t *testing.T) {
	g := settle(t)
	s := startServer(t, Config{TimeScale: 0.01})
	errc := make(chan error, 1)
	go func() {
		resp, err := http.Post(s.URL()+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x","max_tokens":100000,"stream":true}`))
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil {
				err = fmt.Errorf("status %d, complete body", resp.StatusCode)
			}
		}
		errc <- err
	}()
	g.Eventually(func() bool { return s.Stats().Running == 1 }).Should(BeTrue(), "a running request")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		t.Logf("client saw: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the request outlived Close")
	}
	if resp, err := http.Get(s.URL() + "/health"); err == nil {
		resp.Body.Close()
		t.Error("the server still answers after Close")
	}
}

func TestShutdownLetsRequestsFinish(t *testing.T) {
	g := settle(t)
	s := startServer(t, Config{TimeScale: 0.01})
	done := make(chan httpResult, 1)
	// Long enough (about 0.6 s at this time scale) to be seen running by a
	// poll every 5 ms on a loaded machine, short enough for Shutdown's 5 s.
	go func() { done <- post(t, s.URL()+"/v1/completions", map[string]any{"prompt": "x", "max_tokens": 2000}) }()
	g.Eventually(func() bool { return s.Stats().Running == 1 }).Should(BeTrue(), "a running request")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.status != http.StatusOK {
		t.Errorf("in-flight request: status %d", r.status)
	}
}

func TestManyServersInOneProcess(t *testing.T) {
	var servers []*Server
	for i := range 3 {
		servers = append(servers, startServer(t, Config{InstanceID: fmt.Sprint("sim-", i)}))
	}
	for i, s := range servers {
		for range i + 1 {
			completion(t, s, map[string]any{"prompt": "hello", "max_tokens": 2})
		}
	}
	for i, s := range servers {
		st, err := ScrapeStats(context.Background(), http.DefaultClient, s.URL())
		if err != nil {
			t.Fatal(err)
		}
		if st.Requests != int64(i+1) {
			t.Errorf("server %d: %d requests, want %d", i, st.Requests, i+1)
		}
	}
}

func TestConfigRejectsNonsense(t *testing.T) {
	for _, cfg := range []Config{{TimeScale: -1}, {CacheTokens: 8}, {MaxLoRAs: -1}, {PrefillTokensPerSec: -5}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// settle is gomega for t with a generous Eventually deadline: a bound on
// a loaded machine, not a performance assertion.
func settle(t *testing.T) *WithT {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(5 * time.Second)
	g.SetDefaultEventuallyPollingInterval(5 * time.Millisecond)
	return g
}

// TestAPIKey: with an API key the simulator guards what vLLM guards, every
// path under /v1, with vLLM's exact header comparison, and leaves the
// rest open (the router's health checks use /health).
func TestAPIKey(t *testing.T) {
	const key = "sk-vllm-0123456789"
	s := startServer(t, Config{APIKey: key})
	send := func(method, path, authorization string) int {
		t.Helper()
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader(`{"model":"` + testModel + `","prompt":"hi","max_tokens":1}`)
		}
		req, err := http.NewRequest(method, s.URL()+path, body)
		if err != nil {
			t.Fatal(err)
		}
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized && string(bytes.TrimSpace(out)) != `{"error":"Unauthorized"}` {
			t.Fatalf("401 body %s is not vLLM's", out)
		}
		return resp.StatusCode
	}
	for _, tc := range []struct {
		method, path, authorization string
		want                        int
	}{
		{http.MethodPost, "/v1/completions", "", http.StatusUnauthorized},
		{http.MethodPost, "/v1/completions", "Bearer wrong", http.StatusUnauthorized},
		{http.MethodPost, "/v1/completions", "bearer " + key, http.StatusUnauthorized},
		{http.MethodPost, "/v1/completions", "Bearer " + key, http.StatusOK},
		{http.MethodGet, "/v1/models", "", http.StatusUnauthorized},
		{http.MethodGet, "/v1/models", "Bearer " + key, http.StatusOK},
		{http.MethodGet, "/health", "", http.StatusOK},
		{http.MethodGet, "/metrics", "", http.StatusOK},
	} {
		if got := send(tc.method, tc.path, tc.authorization); got != tc.want {
			t.Errorf("%s %s with %q: %d, want %d", tc.method, tc.path, tc.authorization, got, tc.want)
		}
	}
}

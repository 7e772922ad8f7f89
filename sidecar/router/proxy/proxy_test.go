package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

func chatBody(model, text string, extra string) string {
	b, _ := json.Marshal(text)
	return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%s}]%s}`, model, b, extra)
}

type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func TestResponses(t *testing.T) {
	f := newFixture(t, 3, Options{MaxBodyBytes: 1 << 16},
		routingv1alpha1.Adapter{Name: "lora-a", Ready: []string{"vllm-2"}},
		routingv1alpha1.Adapter{Name: "lora-cold"})
	for _, tc := range []struct {
		name, path, body string
		header           []string
		status           int
		code, param      string
		retryAfter       bool
	}{
		{name: "chat", path: "/v1/chat/completions", body: chatBody("m", "hi", ""), status: 200},
		{name: "completions", path: "/v1/completions", body: `{"model":"m","prompt":"hi"}`, status: 200},
		{name: "invocations", path: "/invocations", body: `{"inputs":"anything at all"}`, status: 200},
		{name: "invocations, no JSON", path: "/invocations", body: `anything at all`, status: 400},
		{name: "unknown model", path: "/v1/chat/completions", body: chatBody("gpt-9", "hi", ""), status: 404, code: "model_not_found", param: "model"},
		{name: "adapter without ready instances", path: "/v1/chat/completions", body: chatBody("lora-cold", "hi", ""), status: 503, code: "no_instance", retryAfter: true},
		{name: "malformed JSON", path: "/v1/chat/completions", body: `{"model":"m","messages":[`, status: 400},
		{name: "wrong field type", path: "/v1/chat/completions", body: `{"model":"m","messages":"hi"}`, status: 400, param: "messages"},
		{name: "body too large", path: "/v1/chat/completions", body: chatBody("m", strings.Repeat("x", 1<<16), ""), status: 413, code: "request_too_large"},
		{name: "tenant header too long", path: "/v1/chat/completions", body: chatBody("m", "hi", ""), header: []string{"X-Prefix-Aware-Id", strings.Repeat("t", 65)}, status: 400, param: "X-Amzn-SageMaker-Prefix-Aware-Id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := f.post(t, tc.path, tc.body, tc.header...)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if tc.status == 200 {
				return
			}
			var e errorBody
			if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("not an OpenAI error body: %s", body)
			}
			if tc.code != "" && (e.Error.Code == nil || *e.Error.Code != tc.code) {
				t.Fatalf("code %v, want %s: %s", e.Error.Code, tc.code, body)
			}
			if tc.param != "" && (e.Error.Param == nil || *e.Error.Param != tc.param) {
				t.Fatalf("param %v, want %s: %s", e.Error.Param, tc.param, body)
			}
			if (resp.Header.Get("Retry-After") != "") != tc.retryAfter {
				t.Fatalf("Retry-After %q", resp.Header.Get("Retry-After"))
			}
		})
	}
}

func TestAdapterRoutesOnlyToReadyInstances(t *testing.T) {
	f := newFixture(t, 4, Options{}, routingv1alpha1.Adapter{Name: "lora-a", Ready: []string{"vllm-1", "vllm-3"}})
	for i := range 60 {
		resp, _ := f.post(t, "/v1/chat/completions", chatBody("lora-a", fmt.Sprintf("prompt %d", i), ""))
		if b := resp.Header.Get("X-Backend"); b != "vllm-1" && b != "vllm-3" {
			t.Fatalf("adapter request served by %s", b)
		}
	}
}

// TestStreamingFlushesEachChunk checks that the first SSE chunk reaches the
// client while the backend is still holding the rest back.
func TestStreamingFlushesEachChunk(t *testing.T) {
	f := newFixture(t, 1, Options{})
	b := f.backends["vllm-0"]
	b.release = make(chan struct{})
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/chat/completions", strings.NewReader(chatBody("m", "hi", `,"stream":true`)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if sc.Text() != "" {
				lines <- sc.Text()
			}
		}
		close(lines)
	}()
	for i := range 3 {
		select {
		case l := <-lines:
			if !strings.HasPrefix(l, "data: ") {
				t.Fatalf("chunk %d: %q", i, l)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("chunk %d not flushed while the backend waits", i)
		}
		if i < 2 {
			b.release <- struct{}{}
		}
	}
	if l := <-lines; l != "data: [DONE]" {
		t.Fatalf("last line %q", l)
	}
	if n := familyCount(f.router.Metrics().Registry, "warmroute_router_time_to_first_byte_seconds"); n == 0 {
		t.Fatal("no time to first byte recorded")
	}
}

func TestRetriesOnConnectionFailureAndEjects(t *testing.T) {
	b := newBackend(t, "live")
	r := New(Options{AllowLoopbackBackends: true, EjectBase: time.Minute})
	dead := deadAddr(t)
	if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, map[string]string{"dead": dead, "live": b.addr()})); err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, r)
	for i := range 40 {
		resp := postTo(t, srv, "/v1/chat/completions", chatBody("m", fmt.Sprintf("key %d", i), ""))
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	m := r.Metrics()
	if got := counterValue(m.Retries); got != 1 {
		t.Fatalf("%v retries, want exactly 1 (then the dead instance is ejected)", got)
	}
	if got := counterValue(m.Ejections.WithLabelValues("dead", "passive")); got != 1 {
		t.Fatalf("%v ejections", got)
	}
	if b.count() != 40 {
		t.Fatalf("live backend served %d/40", b.count())
	}
	// Everything dead: 503 with Retry-After, not a hang.
	if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, map[string]string{"dead": dead})); err != nil {
		t.Fatal(err)
	}
	resp := postTo(t, srv, "/v1/chat/completions", chatBody("m", "x", ""))
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("all dead: %d", resp.StatusCode)
	}
}

func TestActiveHealthChecks(t *testing.T) {
	b := newBackend(t, "live")
	r := New(Options{AllowLoopbackBackends: true, HealthInterval: 20 * time.Millisecond, EjectBase: time.Minute})
	dead := deadAddr(t)
	if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, map[string]string{"dead": dead, "live": b.addr()})); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.RunHealthChecks(ctx)
	g := NewWithT(t)
	healthy := func(id string) func() bool { return func() bool { return r.own.Healthy(id) } }
	g.Eventually(healthy("dead"), 2*time.Second, 10*time.Millisecond).Should(BeFalse(), "active checks eject the dead instance")
	// Ten more rounds of checks leave the live one in.
	g.Consistently(healthy("live"), 200*time.Millisecond, 10*time.Millisecond).Should(BeTrue(), "the live instance stays in")
}

func newServer(t testing.TB, r *Router) string {
	t.Helper()
	srv := newHTTPTestServer(r.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

func postTo(t testing.TB, base, path, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// TestReloadDropsNoRequest hammers the router while its document changes
// between fleets (all live); every request must succeed.
func TestReloadDropsNoRequest(t *testing.T) {
	f := newFixture(t, 4, Options{})
	addrs := map[string]string{}
	for id, b := range f.backends {
		addrs[id] = b.addr()
	}
	docs := []*routingv1alpha1.Document{}
	for _, drop := range []string{"", "vllm-0", "vllm-3"} {
		sub := map[string]string{}
		for id, a := range addrs {
			if id != drop {
				sub[id] = a
			}
		}
		docs = append(docs, document(routingv1alpha1.StrategyPrefixAware, sub))
	}
	stop := make(chan struct{})
	var reloads atomic.Int64
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			d := *docs[i%len(docs)]
			d.Generation = int64(i)
			if err := f.router.Apply(&d); err != nil {
				panic(err)
			}
			reloads.Add(1)
			time.Sleep(time.Millisecond)
		}
	}()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range 8 {
		wg.Go(func() {
			for i := range 100 {
				resp, err := http.Post(f.srv.URL+"/v1/chat/completions", "application/json",
					strings.NewReader(chatBody("m", fmt.Sprintf("worker %d request %d", w, i), "")))
				if err != nil || resp.StatusCode != 200 {
					failed.Add(1)
				}
				if resp != nil {
					resp.Body.Close()
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	if failed.Load() != 0 {
		t.Fatalf("%d of 800 requests failed during %d reloads", failed.Load(), reloads.Load())
	}
	t.Logf("800 requests, 0 failed, during %d reloads", reloads.Load())
	for _, in := range f.router.own.Instances() {
		if n := f.router.own.InFlight(in.ID); n != 0 {
			t.Fatalf("%s left with %d in flight", in.ID, n)
		}
	}
}

func TestModelsAndHealthPaths(t *testing.T) {
	f := newFixture(t, 2, Options{})
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/v1/models", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct{ ID string } `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list.Data) != 1 || list.Data[0].ID != "m" {
		t.Fatalf("models: %v %+v", err, list)
	}
	for _, p := range []string{"/ping", "/healthz", "/readyz"} {
		resp, err := http.Get(f.srv.URL + p)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", p, err, resp)
		}
		resp.Body.Close()
	}
}

// TestOpenAIClient uses the official OpenAI Go client as the caller.
func TestOpenAIClient(t *testing.T) {
	f := newFixture(t, 3, Options{})
	client := openai.NewClient(option.WithBaseURL(f.srv.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0),
		option.WithHeader("X-Prefix-Aware-Id", "tenant-1"))
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model: "m",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("You are terse."),
			openai.UserMessage("Say hello."),
		},
	}
	got, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got.Choices[0].Message.Content, "hello from vllm-") {
		t.Fatalf("content %q", got.Choices[0].Message.Content)
	}
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var text strings.Builder
	for stream.Next() {
		if len(stream.Current().Choices) > 0 {
			text.WriteString(stream.Current().Choices[0].Delta.Content)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(text.String(), "hello from vllm-") {
		t.Fatalf("streamed %q", text.String())
	}
	// Same prompt, same tenant: same instance, streamed or not.
	if !strings.HasSuffix(text.String(), got.Choices[0].Message.Content[len("hello from "):]) {
		t.Fatalf("stream served by another instance: %q vs %q", text.String(), got.Choices[0].Message.Content)
	}
	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "nope", Messages: params.Messages})
	var apiErr *openai.Error
	if !errorsAs(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("unknown model: %v", err)
	}
	models, err := client.Models.List(ctx)
	if err != nil || len(models.Data) != 1 {
		t.Fatalf("models: %v", err)
	}
}

package workload

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/warmroute/warmroute/test/vllmsim"
)

// Headers the driver reads from responses.
const (
	HeaderInstance = vllmsim.HeaderInstance
	HeaderTTFT     = vllmsim.HeaderTTFT
	HeaderCached   = vllmsim.HeaderCachedTokens
	HeaderPrompt   = vllmsim.HeaderPromptTokens
	// TenantHeader is the router's neutral tenant header.
	TenantHeader = "X-Prefix-Aware-Id"
)

// Options tune a run.
type Options struct {
	// Concurrency > 0 runs closed-loop: at most this many requests in
	// flight, the next one sent as soon as one finishes, arrival times
	// ignored. 0 runs open-loop: each request at its Arrival × TimeScale.
	Concurrency int
	// TimeScale converts the workload's simulated arrival times to wall
	// time, and wall-clock measurements back (Result.TTFT is wall time;
	// Summary reports simulated time). Use the simulators' TimeScale.
	// Default 1.
	TimeScale float64
	// Streaming asks for server-sent events; TTFT is then the arrival of
	// the first content chunk, else it equals the latency.
	Streaming bool
	// Model is sent as "model"; empty omits it.
	Model string
	// Path is the API path [/v1/chat/completions].
	Path string
	// TenantInHeader sends Request.Tenant as the X-Prefix-Aware-Id header
	// instead of the prompt_cache_key body field.
	TenantInHeader bool
	// Header is added to every request: a tenant's API key
	// (Authorization), a priority (X-Warmroute-Priority), as one client
	// of one tenant sends them.
	Header http.Header
	// Client sends the requests; default a client with enough idle
	// connections for the concurrency of a benchmark.
	Client *http.Client
	// Progress, if set, is called after each request finishes.
	Progress func(done, total int)
}

// Result is what the client saw of one request.
type Result struct {
	Index   int // position in the request slice
	Session string
	Turn    int
	// Instance is the X-Vllmsim-Instance header of the response.
	Instance string
	Status   int
	// Err is why the request failed ("" on success: status 200 and a
	// complete body).
	Err string
	// Code is the error body's code on a refusal ({"error": {"code"}},
	// OpenAI's format: tenant_queue_full, rate_limit_exceeded, …), "" if
	// the body has none.
	Code string
	// Sent is when the request was sent, from the start of the run (wall).
	Sent time.Duration
	// TTFT is the wall time to the first content chunk (streaming) or to
	// the whole response; Latency to the end of the response.
	TTFT, Latency time.Duration
	// EngineTTFT is the time to first token the simulator reports
	// (simulated seconds; -1 when the header is absent).
	EngineTTFT float64
	// PromptTokens and CachedTokens are the simulator's counts from the
	// response headers (0 when absent).
	PromptTokens, CachedTokens int
	PromptChars                int
}

// OK reports whether the request succeeded.
func (r Result) OK() bool { return r.Err == "" }

// Run sends requests to baseURL (the router or one simulator) and returns
// one result per request, in the order of requests. Turns of a session are
// sent in order, each after the previous one finished (failed or not). It
// returns early with ctx's error if ctx ends; results of requests not sent
// then have Err set.
func Run(ctx context.Context, baseURL string, requests []Request, opts Options) ([]Result, error) {
	if opts.TimeScale <= 0 {
		opts.TimeScale = 1
	}
	if opts.Path == "" {
		opts.Path = "/v1/chat/completions"
	}
	if opts.Client == nil {
		opts.Client = NewClient()
	}
	url := strings.TrimSuffix(baseURL, "/") + opts.Path

	// prev[i] is the previous turn of request i's session, or -1.
	prev := make([]int, len(requests))
	last := make(map[string]int)
	for i, r := range requests {
		prev[i] = -1
		if r.Session == "" {
			continue
		}
		if p, ok := last[r.Session]; ok {
			prev[i] = p
		}
		last[r.Session] = i
	}
	done := make([]chan struct{}, len(requests))
	for i := range done {
		done[i] = make(chan struct{})
	}
	results := make([]Result, len(requests))
	start := time.Now()
	var finished int
	var mu sync.Mutex
	send := func(i int) {
		defer close(done[i])
		results[i] = do(ctx, opts, url, start, i, requests[i])
		if opts.Progress != nil {
			mu.Lock()
			finished++
			n := finished
			mu.Unlock()
			opts.Progress(n, len(requests))
		}
	}
	wait := func(i int) bool {
		if p := prev[i]; p >= 0 {
			select {
			case <-done[p]:
			case <-ctx.Done():
				return false
			}
		}
		return true
	}
	abandon := func(i int) {
		results[i] = Result{Index: i, Session: requests[i].Session, Turn: requests[i].Turn, Err: "not sent: " + context.Cause(ctx).Error()}
		close(done[i])
	}

	var wg sync.WaitGroup
	if opts.Concurrency > 0 {
		// Closed loop: workers take requests in order; a turn whose
		// predecessor is still running holds its worker, which keeps the
		// order of the stream without reordering it.
		next := make(chan int)
		for range opts.Concurrency {
			wg.Go(func() {
				for i := range next {
					if !wait(i) || ctx.Err() != nil {
						abandon(i)
						continue
					}
					send(i)
				}
			})
		}
		for i := range requests {
			next <- i
		}
		close(next)
	} else {
		for i, r := range requests {
			due := start.Add(time.Duration(float64(r.Arrival) * opts.TimeScale))
			if d := time.Until(due); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
				}
			}
			if ctx.Err() != nil {
				for j := i; j < len(requests); j++ {
					abandon(j)
				}
				break
			}
			wg.Go(func() {
				if !wait(i) {
					abandon(i)
					return
				}
				send(i)
			})
		}
	}
	wg.Wait()
	return results, ctx.Err()
}

// NewClient returns an HTTP client suited to driving many concurrent
// requests at one host.
func NewClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 0
	t.MaxIdleConnsPerHost = 1024
	t.DisableCompression = true
	return &http.Client{Transport: t}
}

// chatBody is the JSON body of a chat-completions request.
type chatBody struct {
	Model          string        `json:"model,omitempty"`
	Messages       []messageBody `json:"messages"`
	MaxTokens      int           `json:"max_tokens,omitempty"`
	Stream         bool          `json:"stream,omitempty"`
	PromptCacheKey string        `json:"prompt_cache_key,omitempty"`
}

type messageBody struct {
	Role    string `json:"role"`
	Content any    `json:"content"`
}

type textPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// Body is the JSON body the driver sends for r.
func Body(r Request, opts Options) ([]byte, error) {
	b := chatBody{Model: opts.Model, MaxTokens: r.MaxTokens, Stream: opts.Streaming}
	if !opts.TenantInHeader {
		b.PromptCacheKey = r.Tenant
	}
	for _, m := range r.Messages {
		mb := messageBody{Role: m.Role, Content: m.Content}
		if m.Parts != nil {
			parts := make([]textPart, 0, len(m.Parts)+1)
			if m.Content != "" {
				parts = append(parts, textPart{Type: "text", Text: m.Content})
			}
			for _, p := range m.Parts {
				parts = append(parts, textPart{Type: "text", Text: p})
			}
			mb.Content = parts
		}
		b.Messages = append(b.Messages, mb)
	}
	out, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	return out, nil
}

// do sends one request and measures it.
func do(ctx context.Context, opts Options, url string, start time.Time, i int, r Request) Result {
	res := Result{Index: i, Session: r.Session, Turn: r.Turn, EngineTTFT: -1, PromptChars: r.PromptChars()}
	body, err := Body(r, opts)
	if err != nil {
		res.Err = err.Error()
		return res
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		res.Err = err.Error()
		return res
	}
	for k, vs := range opts.Header {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	if opts.TenantInHeader && r.Tenant != "" {
		req.Header.Set(TenantHeader, r.Tenant)
	}
	sent := time.Now()
	res.Sent = sent.Sub(start)
	resp, err := opts.Client.Do(req)
	if err != nil {
		res.Err = err.Error()
		res.Latency = time.Since(sent)
		return res
	}
	defer func() { _ = resp.Body.Close() }()
	res.Status = resp.StatusCode
	res.Instance = resp.Header.Get(HeaderInstance)
	res.PromptTokens, _ = strconv.Atoi(resp.Header.Get(HeaderPrompt))
	res.CachedTokens, _ = strconv.Atoi(resp.Header.Get(HeaderCached))
	if v, err := strconv.ParseFloat(resp.Header.Get(HeaderTTFT), 64); err == nil {
		res.EngineTTFT = v
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		res.Err = fmt.Sprintf("status %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
		res.Code = errorCode(msg)
		res.Latency = time.Since(sent)
		return res
	}
	if opts.Streaming && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		ttft, err := readStream(resp.Body, sent)
		res.TTFT, res.Latency = ttft, time.Since(sent)
		_, _ = io.Copy(io.Discard, resp.Body) // to EOF, for the trailers
		if err != nil {
			res.Err = err.Error()
		}
		// A stream's headers leave before prefill, as vLLM's do: the
		// simulator's cached tokens and TTFT follow as trailers, which
		// the body has been read for.
		if v, err := strconv.Atoi(resp.Trailer.Get(HeaderCached)); err == nil {
			res.CachedTokens = v
		}
		if v, err := strconv.ParseFloat(resp.Trailer.Get(HeaderTTFT), 64); err == nil {
			res.EngineTTFT = v
		}
		return res
	}
	_, err = io.Copy(io.Discard, resp.Body)
	res.Latency = time.Since(sent)
	res.TTFT = res.Latency
	if err != nil {
		res.Err = fmt.Sprintf("read body: %v", err)
	}
	return res
}

// errorCode is the code of an OpenAI error body, "" if it has none (vLLM's
// numeric codes are rendered as numbers).
func errorCode(body []byte) string {
	var e struct {
		Error struct {
			Code json.RawMessage `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || len(e.Error.Code) == 0 {
		return ""
	}
	var code string
	if json.Unmarshal(e.Error.Code, &code) == nil {
		return code
	}
	if string(e.Error.Code) == "null" {
		return ""
	}
	return string(e.Error.Code)
}

// readStream reads server-sent events to [DONE] and returns the time from
// sent to the first chunk that carries content.
func readStream(body io.Reader, sent time.Time) (time.Duration, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 16<<10), 4<<20)
	var ttft time.Duration
	for sc.Scan() {
		data, ok := bytes.CutPrefix(bytes.TrimRight(sc.Bytes(), "\r"), []byte("data: "))
		if !ok {
			continue
		}
		if bytes.Equal(data, []byte("[DONE]")) {
			if ttft == 0 {
				return 0, errors.New("stream ended without content")
			}
			return ttft, nil
		}
		if ttft == 0 && hasContent(data) {
			ttft = time.Since(sent)
		}
	}
	err := sc.Err()
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return ttft, fmt.Errorf("read stream: %w", err)
}

// hasContent reports whether a chunk carries generated text.
func hasContent(data []byte) bool {
	var chunk struct {
		Choices []struct {
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
			Text string `json:"text"`
		} `json:"choices"`
	}
	if json.Unmarshal(data, &chunk) != nil {
		return false
	}
	for _, c := range chunk.Choices {
		if c.Delta.Content != "" || c.Text != "" {
			return true
		}
	}
	return false
}

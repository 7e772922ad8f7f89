package vllmsim

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Response headers the simulator adds for tests and benchmarks. Times are
// simulated seconds.
const (
	HeaderInstance     = "X-Vllmsim-Instance"      // every response
	HeaderPromptTokens = "X-Vllmsim-Prompt-Tokens" // completions: prompt tokens, summed over prompts
	HeaderCachedTokens = "X-Vllmsim-Cached-Tokens" // completions: prefix-cache hit tokens, summed
	HeaderTTFT         = "X-Vllmsim-Ttft-Seconds"  // completions: time to first token of the first prompt
)

const maxBodyBytes = 64 << 20

// Server is one simulated vLLM instance: an http.Handler with its own
// engine, adapters and metrics registry, so any number can run in one
// process.
type Server struct {
	cfg     Config
	engine  *engine
	metrics *metrics
	loras   *loras
	handler http.Handler
	created int64
	healthy atomic.Bool
	// instanceID is the configured id, else the bound address.
	instanceID atomic.Value

	mu       sync.Mutex
	http     *http.Server
	listener net.Listener
	closed   bool
	// Generation requests in flight, and what SIGTERM did (Terminate).
	active     int
	idle       chan struct{} // closed when active drops to 0 while terminating
	terminated *Termination
}

// Termination is what Terminate (SIGTERM) did.
type Termination struct {
	// ShutdownTimeout is the drain the server was configured with.
	ShutdownTimeout time.Duration
	// InFlight are the generation requests running when it began; Aborted
	// those it cut short (all of them without a shutdown timeout, those
	// still running at its end with one). Refused counts the requests that
	// arrived while it drained.
	InFlight, Aborted, Refused int
}

// New builds a server from cfg (zero fields take their defaults) and starts
// its engine. Serve it with Serve, ListenAndServe or as an http.Handler;
// Close or Shutdown stops the engine.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("vllmsim config: %w", err)
	}
	m := newMetrics(cfg)
	s := &Server{
		cfg:     cfg,
		metrics: m,
		engine:  newEngine(cfg, m),
		loras:   newLoRAs(cfg),
		created: time.Now().Unix(),
	}
	s.healthy.Store(true)
	s.instanceID.Store(cmp.Or(cfg.InstanceID, cfg.Listen))
	s.http = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}

	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.serveGenerate(w, r, true) })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.serveGenerate(w, r, false) })
	mux.HandleFunc("POST /invocations", s.serveInvocations)
	mux.HandleFunc("GET /v1/models", s.serveModels)
	mux.HandleFunc("GET /health", s.serveHealth)
	mux.HandleFunc("/ping", s.serveHealth)
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"version": "vllmsim"})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("POST /v1/load_lora_adapter", s.loras.serveLoad)
	mux.HandleFunc("POST /v1/unload_lora_adapter", s.loras.serveUnload)
	mux.HandleFunc("POST /reset_prefix_cache", s.serveResetPrefixCache)
	s.handler = mux
	return s, nil
}

// Start builds a server, binds cfg.Listen and serves in the background.
// When it returns the address accepts connections.
func Start(cfg Config) (*Server, error) {
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		s.engine.shutdown()
		return nil, fmt.Errorf("vllmsim listen: %w", err)
	}
	s.setListener(l)
	go func() { _ = s.Serve(l) }()
	return s, nil
}

// InstanceID is the id reported in the X-Vllmsim-Instance header: the
// configured one, else the address the server listens on.
func (s *Server) InstanceID() string { return s.instanceID.Load().(string) }

// Config returns the effective configuration, defaults applied.
func (s *Server) Config() Config { return s.cfg }

// Registry is the server's own Prometheus registry.
func (s *Server) Registry() *prometheus.Registry { return s.metrics.registry }

// SetHealthy makes /health and /ping answer 200 (true) or 503 (false).
func (s *Server) SetHealthy(ok bool) { s.healthy.Store(ok) }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(HeaderInstance, s.InstanceID())
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	if !s.authorized(r) {
		// vLLM's own answer, not an OpenAI error object.
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized"})
		return
	}
	s.handler.ServeHTTP(w, r)
}

// authorized checks vLLM's API key the way vLLM's middleware does: only
// paths under /v1 are guarded, OPTIONS never, and the header must be
// exactly "Bearer <key>" (no other scheme spelling).
func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.APIKey == "" || r.Method == http.MethodOptions || !strings.HasPrefix(r.URL.Path, "/v1") {
		return true
	}
	return subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+s.cfg.APIKey)) == 1
}

// Serve accepts connections on l until Shutdown or Close, then returns
// http.ErrServerClosed.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = l.Close()
		return http.ErrServerClosed
	}
	s.mu.Unlock()
	s.setListener(l)
	return s.http.Serve(l)
}

// setListener records the bound address, which is also the instance id
// unless one was configured.
func (s *Server) setListener(l net.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listener = l
	if s.cfg.InstanceID == "" {
		s.instanceID.Store(l.Addr().String())
	}
}

// ListenAndServe binds cfg.Listen and serves; see Serve.
func (s *Server) ListenAndServe() error {
	l, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("vllmsim listen: %w", err)
	}
	return s.Serve(l)
}

// Addr is the bound address once serving, else the configured one.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener != nil {
		return s.listener.Addr().String()
	}
	return s.cfg.Listen
}

// URL is the base URL of the server, such as http://127.0.0.1:8000.
func (s *Server) URL() string { return "http://" + s.Addr() }

// Shutdown stops accepting requests, lets in-flight ones finish until ctx
// ends, then stops the engine; requests still running then fail.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	err := s.http.Shutdown(ctx)
	if err != nil {
		_ = s.http.Close()
	}
	s.engine.shutdown()
	return err
}

// Close stops at once, like a killed process: listeners and connections
// close and running requests are dropped.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	err := s.http.Close()
	s.engine.shutdown()
	return err
}

// Terminate is SIGTERM to vLLM (v0.18 and later). Without a shutdown
// timeout every request in flight is aborted at once and the server stops.
// With one, new generation requests are refused with 503 (and /health
// answers 503), running ones get up to ShutdownTimeout to finish, and what
// is still running then is aborted. It returns when the server has stopped.
func (s *Server) Terminate() Termination {
	s.mu.Lock()
	if s.terminated != nil {
		t := *s.terminated
		s.mu.Unlock()
		return t
	}
	s.terminated = &Termination{ShutdownTimeout: s.cfg.ShutdownTimeout, InFlight: s.active}
	s.idle = make(chan struct{})
	if s.active == 0 {
		close(s.idle)
	}
	idle := s.idle
	s.mu.Unlock()

	if s.cfg.ShutdownTimeout > 0 {
		t := time.NewTimer(s.cfg.ShutdownTimeout)
		select {
		case <-idle:
		case <-t.C:
		}
		t.Stop()
	}
	s.mu.Lock()
	s.terminated.Aborted = s.active
	s.mu.Unlock()
	// Aborted requests end now: a stream stops without [DONE], a request
	// not yet answered gets an error. Then the process is gone.
	s.engine.shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = s.Shutdown(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	return *s.terminated
}

// Terminated reports what Terminate did, if it was called.
func (s *Server) Terminated() (Termination, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.terminated == nil {
		return Termination{}, false
	}
	return *s.terminated, true
}

// admit counts a generation request in, or refuses it while terminating.
func (s *Server) admit() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.terminated != nil {
		s.terminated.Refused++
		return false
	}
	s.active++
	return true
}

func (s *Server) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active--
	if s.active == 0 && s.idle != nil {
		select {
		case <-s.idle:
		default:
			close(s.idle)
		}
	}
}

func (s *Server) terminating() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.terminated != nil
}

func (s *Server) serveHealth(w http.ResponseWriter, _ *http.Request) {
	if !s.healthy.Load() || s.terminating() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) serveModels(w http.ResponseWriter, _ *http.Request) {
	cards := []modelCard{{
		ID: s.cfg.Model, Object: "model", Created: s.created, OwnedBy: "vllm",
		Root: s.cfg.Model, MaxModelLen: s.cfg.MaxModelLen, Permission: []any{},
	}}
	names, paths := s.loras.list()
	for i, name := range names {
		cards = append(cards, modelCard{
			ID: name, Object: "model", Created: s.created, OwnedBy: "vllm",
			Root: paths[i], Parent: &s.cfg.Model, Permission: []any{},
		})
	}
	writeJSON(w, http.StatusOK, modelList{Object: "list", Data: cards})
}

// serveInvocations is vLLM's SageMaker route: the body decides whether it
// is a chat or a completions request.
func (s *Server) serveInvocations(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "read body: %v", err)
		return
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(body, &probe); err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "invalid JSON body: %v", err)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	switch {
	case probe["messages"] != nil:
		s.serveGenerate(w, r, true)
	case probe["prompt"] != nil:
		s.serveGenerate(w, r, false)
	default:
		writeError(w, http.StatusBadRequest, "BadRequestError",
			"Cannot find suitable handler for request: expected a chat completions body (messages) or a completions body (prompt)")
	}
}

// serveGenerate serves /v1/chat/completions (chat) and /v1/completions.
func (s *Server) serveGenerate(w http.ResponseWriter, r *http.Request, chat bool) {
	if !s.admit() {
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", "The server is shutting down and accepts no new requests.")
		return
	}
	defer s.release()
	var req generateRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "invalid request body: %v", err)
		return
	}
	adapter := ""
	switch {
	case req.Model == "" || req.Model == s.cfg.Model:
	case s.loras.loaded(req.Model):
		adapter = req.Model
	default:
		writeError(w, http.StatusNotFound, "NotFoundError", "The model `%s` does not exist.", req.Model)
		return
	}
	maxTokens, err := req.maxTokens(s.cfg.DefaultMaxTokens)
	if err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "%v", err)
		return
	}
	tok := s.engine.tok
	var prompts [][]uint64
	if chat {
		msgs, err := req.messages()
		if err != nil {
			writeError(w, http.StatusBadRequest, "BadRequestError", "%v", err)
			return
		}
		prompts = [][]uint64{tok.chat(msgs)}
	} else if prompts, err = req.prompts(tok); err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "%v", err)
		return
	}
	for _, p := range prompts {
		if len(p)+maxTokens > s.cfg.MaxModelLen {
			writeError(w, http.StatusBadRequest, "BadRequestError",
				"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
				s.cfg.MaxModelLen, len(p)+maxTokens, len(p), maxTokens)
			return
		}
	}

	wake := make(chan struct{}, 1)
	seqs := make([]*seq, len(prompts))
	for i, p := range prompts {
		seqs[i] = s.engine.newSeq(adapter, req.CacheSalt, p, maxTokens, wake, req.Stream)
	}
	if err := s.engine.submit(seqs...); err != nil {
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", "%v", err)
		return
	}
	defer s.engine.abort(seqs...) // no-op for finished sequences

	g := generation{
		s: s, w: w, req: req, chat: chat, seqs: seqs,
		id: newID(chat), model: req.Model, sent: make([]int, len(seqs)),
	}
	if g.model == "" {
		g.model = s.cfg.Model
	}
	if req.Stream {
		// vLLM starts a streaming response before prefill: its headers
		// carry nothing that needs the first token, so a client (or a
		// router) that times the headers measures no prefill at all. What
		// the simulator learns later goes in trailers.
		h := w.Header()
		h.Set(HeaderPromptTokens, strconv.Itoa(promptTokens(seqs)))
		h.Set("Trailer", HeaderCachedTokens+", "+HeaderTTFT)
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		if err := http.NewResponseController(w).Flush(); err != nil {
			return
		}
		g.started = true
	}
	for {
		select {
		case <-wake:
		case <-r.Context().Done():
			return
		}
		ps := s.engine.progress(seqs)
		if done, err := g.advance(ps); err != nil || done {
			return
		}
	}
}

// generation writes one request's response as its sequences progress.
type generation struct {
	s        *Server
	w        http.ResponseWriter
	req      generateRequest
	chat     bool
	seqs     []*seq
	id       string
	model    string
	sent     []int // tokens written, per sequence
	started  bool  // headers written
	roleSent bool  // a stream's first chunk written
}

// advance writes whatever became available and reports whether the
// response is complete.
func (g *generation) advance(ps []progress) (bool, error) {
	for _, p := range ps {
		if p.err != nil {
			if !g.started {
				writeError(g.w, http.StatusServiceUnavailable, "ServiceUnavailableError", "%v", p.err)
			} else {
				// An aborted stream ends without [DONE].
				var e apiError
				e.Error.Message, e.Error.Type, e.Error.Code = p.err.Error(), "ServiceUnavailableError", http.StatusServiceUnavailable
				g.writeEvent(e)
				_ = http.NewResponseController(g.w).Flush()
			}
			return true, p.err
		}
	}
	allDone := true
	for _, p := range ps {
		allDone = allDone && p.state == seqFinished
	}
	if !g.req.Stream {
		if allDone {
			g.writeHeaders(ps)
			g.writeFull(ps)
		}
		return allDone, nil
	}
	if ps[0].generated == 0 {
		return false, nil
	}
	if !g.roleSent {
		// vLLM's first chunk, with the first output.
		g.roleSent = true
		if g.chat {
			g.writeEvent(g.chunk(choice{Delta: &chatMessageOut{Role: "assistant"}}))
		}
	}
	for i, p := range ps {
		for ; g.sent[i] < p.generated; g.sent[i]++ {
			_, text := g.s.engine.tok.outputToken(g.seqs[i].outputSeed, g.sent[i])
			c := choice{Index: i}
			if g.chat {
				c.Delta = &chatMessageOut{Content: text}
			} else {
				c.Text = &text
			}
			if g.sent[i]+1 == g.seqs[i].maxTokens {
				c.FinishReason = ptr("length")
			}
			g.writeEvent(g.chunk(c))
		}
	}
	if allDone {
		g.writeTrailers(ps)
		if g.req.includeUsage() {
			resp := g.chunk()
			resp.Usage = g.usage(ps)
			g.writeEvent(resp)
		}
		_, _ = io.WriteString(g.w, "data: [DONE]\n\n")
	}
	return allDone, http.NewResponseController(g.w).Flush()
}

func promptTokens(seqs []*seq) int {
	n := 0
	for _, s := range seqs {
		n += s.prompt
	}
	return n
}

// writeHeaders sets a full response's headers.
func (g *generation) writeHeaders(ps []progress) {
	g.w.Header().Set(HeaderPromptTokens, strconv.Itoa(promptTokens(g.seqs)))
	g.writeTrailers(ps)
	g.started = true
}

// writeTrailers sets the cached-token and TTFT headers: trailers of a
// stream, whose headers went out before they were known.
func (g *generation) writeTrailers(ps []progress) {
	cached := 0
	for _, p := range ps {
		cached += p.cachedTokens
	}
	h := g.w.Header()
	h.Set(HeaderCachedTokens, strconv.Itoa(cached))
	h.Set(HeaderTTFT, strconv.FormatFloat(ps[0].firstToken-ps[0].arrival, 'f', 6, 64))
}

func (g *generation) writeFull(ps []progress) {
	resp := g.chunk()
	resp.Object = "text_completion"
	if g.chat {
		resp.Object = "chat.completion"
	}
	for i := range ps {
		text := g.text(i)
		c := choice{Index: i, FinishReason: ptr("length")}
		if g.chat {
			c.Message = &chatMessageOut{Role: "assistant", Content: text}
		} else {
			c.Text = &text
		}
		resp.Choices = append(resp.Choices, c)
	}
	resp.Usage = g.usage(ps)
	writeJSON(g.w, http.StatusOK, resp)
}

// chunk is a streaming object with the given choices.
func (g *generation) chunk(choices ...choice) completionResponse {
	obj := "text_completion"
	if g.chat {
		obj = "chat.completion.chunk"
	}
	if choices == nil {
		choices = []choice{}
	}
	return completionResponse{ID: g.id, Object: obj, Created: time.Now().Unix(), Model: g.model, Choices: choices}
}

func (g *generation) text(i int) string {
	b := make([]byte, 0, g.seqs[i].maxTokens*g.s.cfg.CharsPerToken)
	for j := range g.seqs[i].maxTokens {
		_, t := g.s.engine.tok.outputToken(g.seqs[i].outputSeed, j)
		b = append(b, t...)
	}
	return string(b)
}

func (g *generation) usage(ps []progress) *usage {
	u := &usage{}
	for i, p := range ps {
		u.PromptTokens += g.seqs[i].prompt
		u.CompletionTokens += p.generated
		u.PromptTokensDetails.CachedTokens += p.cachedTokens
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

func (g *generation) writeEvent(v any) {
	b, _ := json.Marshal(v)
	_, _ = fmt.Fprintf(g.w, "data: %s\n\n", b)
}

func newID(chat bool) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	if chat {
		return "chatcmpl-" + hex.EncodeToString(b[:])
	}
	return "cmpl-" + hex.EncodeToString(b[:])
}

func ptr[T any](v T) *T { return &v }

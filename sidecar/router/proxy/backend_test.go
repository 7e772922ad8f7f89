package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

// backend is a tiny vLLM stand-in on loopback: it answers the OpenAI
// endpoints (streaming or not), /invocations, /v1/models and /health, and
// records what it received.
type backend struct {
	id  string
	srv *httptest.Server

	mu     sync.Mutex
	bodies [][]byte
	// headers are the last request's.
	headers http.Header
	// release, if set, gates each streamed chunk after the first.
	release chan struct{}
	// delay, if set, holds each completion that long; inFlight and peak
	// count completions in progress (set delay before traffic).
	delay          time.Duration
	inFlight, peak atomic.Int64
}

func newBackend(t testing.TB, id string) *backend { t.Helper(); return newBackendOn(t, id, "") }

// newBackendOn listens on addr ("": any loopback port).
func newBackendOn(t testing.TB, id, addr string) *backend {
	t.Helper()
	b := &backend{id: id}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object":"list","data":[{"id":"m","object":"model","owned_by":%q}]}`, id)
	})
	mux.HandleFunc("POST /invocations", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		b.record(body, r.Header)
		w.Header().Set("X-Backend", id)
		_, _ = w.Write(body) // echo
	})
	completion := func(w http.ResponseWriter, r *http.Request) {
		n := b.inFlight.Add(1)
		defer b.inFlight.Add(-1)
		for p := b.peak.Load(); n > p && !b.peak.CompareAndSwap(p, n); p = b.peak.Load() {
		}
		body, _ := io.ReadAll(r.Body)
		b.record(body, r.Header)
		time.Sleep(b.delay)
		var req struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
		}
		_ = json.Unmarshal(body, &req)
		w.Header().Set("X-Backend", id)
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"cmpl-1","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"hello from %s"}}],"usage":{"prompt_tokens":3,"completion_tokens":3,"total_tokens":6}}`, req.Model, id)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		flusher := w.(http.Flusher)
		for i, word := range []string{"hello", " from", " " + id} {
			if i > 0 && b.release != nil {
				<-b.release
			}
			fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":null}]}\n\n", req.Model, word)
			flusher.Flush()
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}
	mux.HandleFunc("POST /v1/chat/completions", completion)
	mux.HandleFunc("POST /v1/completions", completion)
	b.srv = httptest.NewUnstartedServer(mux)
	if addr != "" {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = b.srv.Listener.Close()
		b.srv.Listener = l
	}
	b.srv.Start()
	t.Cleanup(b.srv.Close)
	return b
}

func (b *backend) record(body []byte, h http.Header) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bodies = append(b.bodies, body)
	b.headers = h.Clone()
}

func (b *backend) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.bodies)
}

func (b *backend) last() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.bodies) == 0 {
		return nil
	}
	return b.bodies[len(b.bodies)-1]
}

func (b *backend) addr() string { return strings.TrimPrefix(b.srv.URL, "http://") }

// deadAddr is a loopback address where nothing listens.
func deadAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

type fixture struct {
	router   *Router
	srv      *httptest.Server
	backends map[string]*backend
}

func document(strategy routingv1alpha1.Strategy, instances map[string]string, adapters ...routingv1alpha1.Adapter) *routingv1alpha1.Document {
	d := &routingv1alpha1.Document{APIVersion: routingv1alpha1.APIVersion, Kind: routingv1alpha1.Kind, Model: "m", Strategy: strategy, HashSeed: 1, Adapters: adapters}
	for _, id := range slices.Sorted(maps.Keys(instances)) {
		d.Instances = append(d.Instances, routingv1alpha1.Instance{ID: id, Address: instances[id]})
	}
	d.Default()
	if err := d.Validate(); err != nil {
		panic(err)
	}
	return d
}

// newBackends starts backends vllm-0 … vllm-(n-1) and returns them and
// their addresses by id.
func newBackends(t testing.TB, n int) (map[string]*backend, map[string]string) {
	t.Helper()
	bs, addrs := map[string]*backend{}, map[string]string{}
	for i := range n {
		id := fmt.Sprintf("vllm-%d", i)
		bs[id] = newBackend(t, id)
		addrs[id] = bs[id].addr()
	}
	return bs, addrs
}

func newFixture(t testing.TB, n int, opts Options, adapters ...routingv1alpha1.Adapter) *fixture {
	t.Helper()
	f := &fixture{}
	var addrs map[string]string
	f.backends, addrs = newBackends(t, n)
	if opts.EjectBase == 0 {
		opts.EjectBase = time.Minute
	}
	opts.AllowLoopbackBackends = true
	f.router = New(opts)
	if err := f.router.Apply(document(routingv1alpha1.StrategyPrefixAware, addrs, adapters...)); err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(f.router.Handler())
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fixture) post(t testing.TB, path, body string, header ...string) (*http.Response, string) {
	t.Helper()
	return postURL(t, f.srv.URL+path, body, header...)
}

// postURL posts a JSON body with header name/value pairs.
func postURL(t testing.TB, url, body string, header ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	return do(t, req, header...)
}

// do sends req with header name/value pairs and reads the response.
func do(t testing.TB, req *http.Request, header ...string) (*http.Response, string) {
	t.Helper()
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1]) // a name given twice is sent twice
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, string(out)
}

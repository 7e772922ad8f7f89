package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

// rawPost writes a request head declaring contentLength, then only the
// given part of the body, and leaves the connection open; the caller reads
// the answer with readAnswer.
func rawPost(t *testing.T, base, path string, contentLength int, part string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_, _ = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: router\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, contentLength, part)
	return conn
}

// readAnswer reads the response on conn, failing if none comes within a
// generous bound (the router must answer without the rest of the body).
func readAnswer(t *testing.T, conn net.Conn) (*http.Response, errorBody) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	var e errorBody
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" {
		t.Fatalf("status %d, not an OpenAI error body: %q", resp.StatusCode, b)
	}
	return resp, e
}

func TestDeclaredLengthOverLimitRefusedUnread(t *testing.T) {
	f := newFixture(t, 1, Options{MaxBodyBytes: 1 << 20})
	// 1 GiB declared, nothing sent: only a router that does not wait for
	// the body can answer.
	conn := rawPost(t, f.srv.URL, "/v1/chat/completions", 1<<30, "")
	resp, e := readAnswer(t, conn)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || *e.Error.Code != "request_too_large" {
		t.Fatalf("status %d code %v", resp.StatusCode, *e.Error.Code)
	}
	if f.backends["vllm-0"].count() != 0 {
		t.Fatal("forwarded")
	}
}

func TestSlowBodyTimesOut(t *testing.T) {
	f := newFixture(t, 1, Options{BodyReadTimeout: 200 * time.Millisecond})
	conn := rawPost(t, f.srv.URL, "/v1/chat/completions", 100, `{"model":"m",`)
	resp, e := readAnswer(t, conn)
	if resp.StatusCode != http.StatusRequestTimeout || *e.Error.Code != "request_timeout" {
		t.Fatalf("status %d code %v", resp.StatusCode, *e.Error.Code)
	}
	// The deadline is lifted after the body: a whole body followed by a
	// stream longer than the deadline is not cut.
	b := f.backends["vllm-0"]
	b.release = make(chan struct{})
	go func() {
		for range 2 {
			time.Sleep(300 * time.Millisecond)
			b.release <- struct{}{}
		}
	}()
	resp2, body := f.post(t, "/v1/chat/completions", chatBody("m", "hi", `,"stream":true`))
	if resp2.StatusCode != 200 || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("stream after a read deadline: %d %q", resp2.StatusCode, body)
	}
}

func TestBufferBudget(t *testing.T) {
	f := newFixture(t, 1, Options{MaxBodyBytes: 1 << 20, MaxBufferedBytes: 1 << 20})
	// A first upload holds 768 KiB of the budget while it arrives.
	held := rawPost(t, f.srv.URL, "/v1/chat/completions", 768<<10, `{"model":"m","messages":[{"role":"user","content":"`)
	g := NewWithT(t)
	used := f.router.budget.used.Load
	g.Eventually(used, 5*time.Second, time.Millisecond).ShouldNot(BeZero(), "the upload holds budget")
	g.Expect(used()).To(Equal(int64(768<<10)), "held bytes: the declared length")
	// A second one that does not fit is refused at once, length known or not.
	resp, e := readAnswer(t, rawPost(t, f.srv.URL, "/v1/chat/completions", 512<<10, ""))
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || *e.Error.Code != "router_overloaded" {
		t.Fatalf("over budget: status %d, Retry-After %q, code %v", resp.StatusCode, resp.Header.Get("Retry-After"), *e.Error.Code)
	}
	chunked, err := http.Post(f.srv.URL+"/v1/chat/completions", "application/json",
		io.MultiReader(strings.NewReader(chatBody("m", strings.Repeat("x", 400<<10), ""))))
	if err != nil {
		t.Fatal(err)
	}
	chunked.Body.Close()
	if chunked.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("chunked body over budget: %d", chunked.StatusCode)
	}
	// Small requests still pass meanwhile.
	if resp, body := f.post(t, "/v1/chat/completions", chatBody("m", "small", "")); resp.StatusCode != 200 {
		t.Fatalf("small request during the big upload: %d %s", resp.StatusCode, body)
	}
	// The budget comes back when the holder ends.
	held.Close()
	g.Eventually(used, 5*time.Second, time.Millisecond).Should(BeZero(), "bytes still held")
	if resp, _ := f.post(t, "/v1/chat/completions", chatBody("m", strings.Repeat("y", 600<<10), "")); resp.StatusCode != 200 {
		t.Fatalf("large request after the budget freed: %d", resp.StatusCode)
	}
}

func TestErrorBodiesDoNotEchoUnboundedInput(t *testing.T) {
	f := newFixture(t, 1, Options{MaxBodyBytes: 4 << 20})
	resp, body := f.post(t, "/v1/chat/completions", chatBody(strings.Repeat("é", 1<<20), "hi", ""))
	if resp.StatusCode != 404 || len(body) > 2048 {
		t.Fatalf("unknown 2 MB model: status %d, %d-byte body", resp.StatusCode, len(body))
	}
	var e errorBody
	if err := json.Unmarshal([]byte(body), &e); err != nil || !strings.Contains(e.Error.Message, "é…") {
		t.Fatalf("truncated message not valid: %v %q", err, body)
	}
	resp, body = f.post(t, "/"+strings.Repeat("p", 32<<10), "")
	if resp.StatusCode != 404 || len(body) > 2048 {
		t.Fatalf("long path: status %d, %d-byte body", resp.StatusCode, len(body))
	}
}

func TestModelsFromTheDocument(t *testing.T) {
	f := newFixture(t, 3, Options{},
		routingv1alpha1.Adapter{Name: "lora-a", URI: "hf://org/lora-a", Ready: []string{"vllm-2"}},
		routingv1alpha1.Adapter{Name: "lora-b", Ready: []string{"vllm-0", "vllm-1"}},
		routingv1alpha1.Adapter{Name: "lora-cold", Desired: []string{"vllm-1"}})
	// A GET with a declared body that never arrives: /v1/models reads none.
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = fmt.Fprintf(conn, "GET /v1/models HTTP/1.1\r\nHost: router\r\nContent-Length: %d\r\n\r\n", 1<<30)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer while the body is pending: %v", err)
	}
	defer resp.Body.Close()
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID, Object, Root string
			Parent           *string
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range list.Data {
		got = append(got, m.ID)
		if m.Object != "model" || (m.ID != "m") != (m.Parent != nil && *m.Parent == "m") {
			t.Fatalf("entry %+v", m)
		}
	}
	if list.Object != "list" || strings.Join(got, ",") != "m,lora-a,lora-b" {
		t.Fatalf("models %v", got)
	}
	for _, b := range f.backends {
		if b.count() != 0 {
			t.Fatal("a backend was asked")
		}
	}
}

func TestLoopbackAddressesNeedTheFlag(t *testing.T) {
	b := newBackend(t, "a")
	r := New(Options{})
	good := document(routingv1alpha1.StrategyPrefixAware, map[string]string{"a": "10.0.0.1:8000"})
	if err := r.Apply(good); err != nil {
		t.Fatal(err)
	}
	err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, map[string]string{"a": b.addr()}))
	if err == nil || !strings.Contains(err.Error(), "--allow-loopback-backends") {
		t.Fatalf("loopback instance applied: %v", err)
	}
	if got := r.own.Instances()[0].Address; got != "10.0.0.1:8000" {
		t.Fatalf("last good document replaced: %s", got)
	}
	r = New(Options{AllowLoopbackBackends: true})
	if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, map[string]string{"a": b.addr()})); err != nil {
		t.Fatal(err)
	}
}

func TestNoDocumentAndEmptyDocument(t *testing.T) {
	r := New(Options{AllowLoopbackBackends: true})
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	check := func(method, path string, want int) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(chatBody("m", "hi", "")))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want || (want == 503 && resp.Header.Get("Retry-After") == "") {
			t.Fatalf("%s %s: %d (Retry-After %q), want %d", method, path, resp.StatusCode, resp.Header.Get("Retry-After"), want)
		}
	}
	for _, p := range []string{"/v1/models", "/ping", "/readyz", "/nothing"} {
		check(http.MethodGet, p, 503)
	}
	check(http.MethodPost, "/v1/chat/completions", 503)
	check(http.MethodGet, "/healthz", 200)
	if r.Ready() {
		t.Fatal("ready without a document")
	}
	if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, map[string]string{})); err != nil {
		t.Fatal(err)
	}
	if !r.Ready() {
		t.Fatal("not ready with an empty document")
	}
	check(http.MethodGet, "/readyz", 200)
	check(http.MethodGet, "/v1/models", 200)
	check(http.MethodPost, "/v1/chat/completions", 503)
	check(http.MethodPost, "/invocations", 503)
}

// TestDrain: a draining router is not ready on either mux that serves its
// health routes, and closes each client connection after its response.
func TestDrain(t *testing.T) {
	r := New(Options{AllowLoopbackBackends: true})
	if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, map[string]string{})); err != nil {
		t.Fatal(err)
	}
	admin := http.NewServeMux()
	r.HealthRoutes(admin)
	traffic, metrics := httptest.NewServer(r.Handler()), httptest.NewServer(admin)
	defer traffic.Close()
	defer metrics.Close()
	get := func(base, path string) *http.Response {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for _, base := range []string{traffic.URL, metrics.URL} {
		if resp := get(base, "/readyz"); resp.StatusCode != 200 || resp.Close {
			t.Fatalf("%s/readyz before draining: %d (close %v)", base, resp.StatusCode, resp.Close)
		}
	}
	r.Drain()
	if r.Ready() {
		t.Fatal("ready while draining")
	}
	for _, base := range []string{traffic.URL, metrics.URL} {
		if resp := get(base, "/readyz"); resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("%s/readyz while draining: %d", base, resp.StatusCode)
		}
		if resp := get(base, "/healthz"); resp.StatusCode != 200 {
			t.Fatalf("%s/healthz while draining: %d", base, resp.StatusCode)
		}
	}
	if resp := get(traffic.URL, "/v1/models"); resp.StatusCode != 200 || !resp.Close {
		t.Fatalf("traffic while draining: %d, connection close %v", resp.StatusCode, resp.Close)
	}
}

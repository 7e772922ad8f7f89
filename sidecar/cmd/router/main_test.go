package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
)

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--config-dir", "/etc/warmroute"}, true},
		{[]string{"--config-file", "/x/routing.json", "--strategy-override", "SAGEMAKER_BASELINE"}, true},
		{[]string{"--configmap", "ns/name"}, true},
		{[]string{}, false},
		{[]string{"--config-dir", "a", "--config-file", "b"}, false},
		{[]string{"--config-dir", "a", "--strategy-override", "FASTEST"}, false},
		{[]string{"--config-dir", "a", "--peers", "10.0.0.1:9090,10.0.0.2:9090", "--replica-name", "r0"}, true},
		{[]string{"--config-dir", "a", "--peer-service", "ns/router-peers", "--pod-ip", "10.0.0.1"}, true},
		{[]string{"--config-dir", "a", "--peers", "10.0.0.1:9090", "--peer-service", "ns/router-peers"}, false},
		{[]string{"--config-dir", "a", "--peers", "10.0.0.1"}, false},
		{[]string{"--config-dir", "a", "--peer-service", "router-peers"}, false},
	} {
		if _, err := parseFlags(tc.args); (err == nil) != tc.ok {
			t.Errorf("%v: err %v", tc.args, err)
		}
	}
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestGracefulShutdown starts the router, sends a slow request, signals
// shutdown while it is in flight, and expects the request to complete.
func TestGracefulShutdown(t *testing.T) {
	started := make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			close(started)
			time.Sleep(300 * time.Millisecond)
		}
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer backend.Close()
	dir := t.TempDir()
	doc := fmt.Sprintf(`{"apiVersion":"routing.warmroute.dev/v1alpha1","kind":"RoutingConfig","model":"m",
"instances":[{"id":"a","address":%q}]}`, strings.TrimPrefix(backend.URL, "http://"))
	if err := os.WriteFile(filepath.Join(dir, "routing.json"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := parseFlags([]string{"--config-dir", dir, "--listen", freeAddr(t), "--metrics-listen", freeAddr(t), "--health-interval", "0", "--allow-loopback-backends"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- run(ctx, f, logr.Discard()) }()
	readyz := func() (int, error) {
		resp, err := http.Get("http://" + f.metricsListen + "/readyz")
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	NewWithT(t).Eventually(readyz, 2*time.Second, 20*time.Millisecond).Should(Equal(http.StatusOK), "router ready")
	result := make(chan int)
	go func() {
		resp, err := http.Post("http://"+f.listen+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			result <- -1
			return
		}
		resp.Body.Close()
		result <- resp.StatusCode
	}()
	<-started
	cancel()
	if code := <-result; code != 200 {
		t.Fatalf("in-flight request got %d during shutdown", code)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + f.listen + "/ping"); err == nil {
		t.Fatal("still accepting after shutdown")
	}
}

func TestBufferBudgetFromTheContainerLimit(t *testing.T) {
	write := func(dir, name, content string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	for _, tc := range []struct {
		name string
		root string
		flag int64
		want int64
	}{
		{"v2 limit", write(t.TempDir(), "memory.max", "1073741824\n"), 0, 512 << 20},
		{"v2 no limit", write(t.TempDir(), "memory.max", "max\n"), 0, fallbackBufferBudget},
		{"v1 limit", write(t.TempDir(), "memory/memory.limit_in_bytes", "268435456\n"), 0, 128 << 20},
		{"v1 no limit", write(t.TempDir(), "memory/memory.limit_in_bytes", "9223372036854771712\n"), 0, fallbackBufferBudget},
		{"no cgroup", t.TempDir(), 0, fallbackBufferBudget},
		{"flag wins", write(t.TempDir(), "memory.max", "1073741824\n"), 64 << 20, 64 << 20},
	} {
		if got, _ := bufferBudget(tc.flag, tc.root); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestLargeHeadersGet431(t *testing.T) {
	f, err := parseFlags([]string{"--config-file", "x"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.Config = trafficServer(f, srv.Config.Handler, logr.Discard())
	srv.Start()
	defer srv.Close()
	for size, want := range map[int]int{32 << 10: 200, 128 << 10: http.StatusRequestHeaderFieldsTooLarge} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/ping", nil)
		req.Header.Set("X-Big", strings.Repeat("h", size))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%d-byte header: %d, want %d", size, resp.StatusCode, want)
		}
	}
}

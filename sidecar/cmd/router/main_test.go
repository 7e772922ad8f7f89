package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"

	"github.com/warmroute/warmroute/sidecar/router/proxy"
)

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--config-dir", "/etc/warmroute"}, true},
		// Only benchmark builds (the benchstrategies tag) take the flag.
		{[]string{"--config-file", "/x/routing.json", "--strategy-override", "SAGEMAKER_BASELINE"}, benchmarkFlags != nil},
		{[]string{"--configmap", "ns/name"}, true},
		{[]string{}, false},
		{[]string{"--config-dir", "a", "--config-file", "b"}, false},
		{[]string{"--config-dir", "a", "--strategy-override", "FASTEST"}, false},
		{[]string{"--config-dir", "a", "--listen=", "--epp-listen", ":9002", "--epp-tls-cert-file", "c", "--epp-tls-key-file", "k", "--epp-client-ca-file", "ca"}, true}, // picker only
		{[]string{"--config-dir", "a", "--listen=", "--epp-listen", ":9002", "--epp-insecure"}, true},
		{[]string{"--config-dir", "a", "--listen=", "--epp-listen", ":9002"}, false},                                                        // no TLS, not said insecure
		{[]string{"--config-dir", "a", "--listen=", "--epp-listen", ":9002", "--epp-tls-cert-file", "c", "--epp-tls-key-file", "k"}, false}, // no client CA
		{[]string{"--config-dir", "a", "--epp-listen", ":9002", "--epp-insecure", "--epp-client-ca-file", "ca"}, false},
		{[]string{"--config-dir", "a", "--epp-insecure"}, false}, // no --epp-listen
		{[]string{"--config-dir", "a", "--epp-listen", ":9002", "--epp-insecure", "--epp-max-streams", "0"}, false},
		{[]string{"--config-dir", "a", "--listen="}, false}, // serves nothing
		{[]string{"--config-dir", "a", "--picker", "10.0.0.1:9091", "--pick-key-file", "/k", "--pod-name", "r0"}, true},
		{[]string{"--config-dir", "a", "--picker", "10.0.0.1:9091"}, false}, // no key
		{[]string{"--config-dir", "a", "--picker", "10.0.0.1", "--pick-key-file", "/k"}, false},
		{[]string{"--config-dir", "a", "--lease", "ns/ep-router", "--pod-name", "r0", "--pod-ip", "10.0.0.1", "--pick-key-file", "/k"}, true},
		{[]string{"--config-dir", "a", "--lease", "ns/ep-router", "--pod-name", "r0", "--pick-key-file", "/k"}, false}, // no pod IP
		{[]string{"--config-dir", "a", "--lease", "ep-router", "--pod-name", "r0", "--pod-ip", "10.0.0.1", "--pick-key-file", "/k"}, false},
		{[]string{"--config-dir", "a", "--lease", "ns/ep", "--picker", "10.0.0.1:9091", "--pod-name", "r0", "--pod-ip", "10.0.0.1", "--pick-key-file", "/k"}, false},
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

// startRouter runs the router in process in front of backend, logging to
// log, and waits for it to be ready. Cancelling the context starts its
// shutdown; run's result arrives on the channel.
func startRouter(t *testing.T, backend string, log logr.Logger, args ...string) (*flags, context.CancelFunc, <-chan error) {
	t.Helper()
	dir := t.TempDir()
	doc := fmt.Sprintf(`{"apiVersion":"routing.warmroute.dev/v1alpha1","kind":"RoutingConfig","model":"m",
"instances":[{"id":"a","address":%q}]}`, strings.TrimPrefix(backend, "http://"))
	if err := os.WriteFile(filepath.Join(dir, "routing.json"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := parseFlags(append([]string{"--config-dir", dir, "--listen", freeAddr(t), "--metrics-listen", freeAddr(t), "--health-interval", "0", "--allow-loopback-backends"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- run(ctx, f, log) }()
	readyz := func() (int, error) {
		resp, err := http.Get("http://" + f.metricsListen + "/readyz")
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	NewWithT(t).Eventually(readyz, 2*time.Second, 20*time.Millisecond).Should(Equal(http.StatusOK), "router ready")
	return f, cancel, done
}

// slowBackend answers chat completions after 300 ms, closing started when
// the first one arrives.
func slowBackend(started chan struct{}) *httptest.Server {
	var once sync.Once
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			once.Do(func() { close(started) })
			time.Sleep(300 * time.Millisecond)
		}
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
}

// shutdownDuringRequest sends one chat completion through the router,
// starts the shutdown once the backend has it, and fails the test unless
// it completes; it returns run's result.
func shutdownDuringRequest(t *testing.T, f *flags, started <-chan struct{}, cancel context.CancelFunc, done <-chan error) error {
	t.Helper()
	result := make(chan int, 1)
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
	return <-done
}

// TestGracefulShutdown starts the router, sends a slow request, signals
// shutdown while it is in flight, and expects the request to complete.
// Without a drain delay the request is still in flight when the server
// shuts down.
func TestGracefulShutdown(t *testing.T) {
	started := make(chan struct{})
	backend := slowBackend(started)
	defer backend.Close()
	f, cancel, done := startRouter(t, backend.URL, logr.Discard(), "--drain-delay", "0s")
	if err := shutdownDuringRequest(t, f, started, cancel, done); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.Get("http://" + f.listen + "/ping"); err == nil {
		resp.Body.Close()
		t.Fatal("still accepting after shutdown")
	}
}

// TestShutdownClosesConnectionsThatSentNothing: a connection a client
// opened and never used must not hold the shutdown. net/http's Shutdown
// waits 5 s for one, so before the router closed them itself this
// shutdown, given 3 s, timed out and run failed.
func TestShutdownClosesConnectionsThatSentNothing(t *testing.T) {
	started := make(chan struct{})
	backend := slowBackend(started)
	defer backend.Close()
	var mu sync.Mutex
	var logged []string
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, args)
	}, funcr.Options{})
	f, cancel, done := startRouter(t, backend.URL, log, "--drain-delay", "0s", "--shutdown-timeout", "3s")
	var unused []net.Conn
	for _, addr := range []string{f.listen, f.metricsListen} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		unused = append(unused, c)
	}
	if err := shutdownDuringRequest(t, f, started, cancel, done); err != nil {
		t.Fatalf("shutdown with unused connections open: %v", err)
	}
	for _, c := range unused {
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Errorf("unused connection to %s read a byte, want it closed", c.RemoteAddr())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.ContainsFunc(logged, func(s string) bool { return strings.Contains(s, "closed connections that sent no request") }) {
		t.Errorf("no log of the closed connections in %q", logged)
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
		{"v2 no limit", write(t.TempDir(), "memory.max", "max\n"), 0, proxy.DefaultMaxBufferedBytes},
		{"v1 limit", write(t.TempDir(), "memory/memory.limit_in_bytes", "268435456\n"), 0, 128 << 20},
		{"v1 no limit", write(t.TempDir(), "memory/memory.limit_in_bytes", "9223372036854771712\n"), 0, proxy.DefaultMaxBufferedBytes},
		{"no cgroup", t.TempDir(), 0, proxy.DefaultMaxBufferedBytes},
		{"flag wins", write(t.TempDir(), "memory.max", "1073741824\n"), 64 << 20, 64 << 20},
	} {
		if got, _ := bufferBudget(tc.flag, tc.root); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestListenerLimits: the traffic and the metrics listener, as run starts
// them, both refuse a header block over --max-header-bytes with 431 and
// close a kept-alive connection once it has been idle for --idle-timeout
// (net/http's defaults are 1 MiB and never).
func TestListenerLimits(t *testing.T) {
	started := make(chan struct{})
	backend := slowBackend(started)
	defer backend.Close()
	f, _, _ := startRouter(t, backend.URL, logr.Discard(), "--idle-timeout", "200ms")
	for _, addr := range []string{f.listen, f.metricsListen} {
		for size, want := range map[int]int{32 << 10: 200, 128 << 10: http.StatusRequestHeaderFieldsTooLarge} {
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/healthz", nil)
			req.Header.Set("X-Big", strings.Repeat("h", size))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("%s, %d-byte header: %d, want %d", addr, size, resp.StatusCode, want)
			}
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: router\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		// Far past the idle timeout: a connection still open then is kept.
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("%s: an idle kept-alive connection was not closed (read: %v)", addr, err)
		}
	}
}

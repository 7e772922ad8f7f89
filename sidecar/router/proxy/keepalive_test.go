package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

// uvicornLike is a backend that treats a connection idle for closeAfter as
// closed, as vLLM's server does with its keep-alive timeout (5 s): a
// request that arrives on it then is dropped unanswered, which is what a
// client sees when it writes just as the server closes.
type uvicornLike struct {
	srv        *httptest.Server
	closeAfter time.Duration
	idleSince  sync.Map // net.Conn → time.Time
	dropped    atomic.Int64
}

type connKey struct{}

func newUvicornLike(t *testing.T, closeAfter time.Duration) *uvicornLike {
	u := &uvicornLike{closeAfter: closeAfter}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		conn := req.Context().Value(connKey{}).(net.Conn)
		if since, ok := u.idleSince.Load(conn); ok && time.Since(since.(time.Time)) >= u.closeAfter {
			u.dropped.Add(1)
			c, _, _ := w.(http.Hijacker).Hijack()
			c.Close()
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	u.srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) }
	u.srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateIdle {
			u.idleSince.Store(c, time.Now())
		}
	}
	u.srv.Start()
	t.Cleanup(u.srv.Close)
	return u
}

// router serves a router to the backend; a non-nil transport replaces its
// own.
func (u *uvicornLike) router(t *testing.T, transport http.RoundTripper) (*Router, string) {
	r := New(Options{AllowLoopbackBackends: true})
	if transport != nil {
		r.upstream = transport
	}
	if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, map[string]string{"b": strings.TrimPrefix(u.srv.URL, "http://")})); err != nil {
		t.Fatal(err)
	}
	return r, newServer(t, r)
}

// TestPooledConnectionsCloseBeforeVLLMs requests across vLLM's 5 s
// keep-alive boundary with the router's own transport: its pool must have
// let go of each connection before the backend would.
func TestPooledConnectionsCloseBeforeVLLMs(t *testing.T) {
	t.Parallel()
	u := newUvicornLike(t, 5*time.Second)
	r, srv := u.router(t, nil)
	for i, gap := range []time.Duration{0, 4500 * time.Millisecond, 5500 * time.Millisecond} {
		time.Sleep(gap)
		if resp := postTo(t, srv, "/v1/chat/completions", chatBody("m", "hi", "")); resp.StatusCode != 200 {
			t.Fatalf("request %d after %v idle: %d", i, gap, resp.StatusCode)
		}
	}
	if n := u.dropped.Load(); n != 0 {
		t.Fatalf("%d requests written on connections the backend had closed", n)
	}
	if n := counterValue(r.Metrics().StaleConnRetries); n != 0 {
		t.Fatalf("%v stale-connection retries", n)
	}
}

// TestStaleConnectionRetried: when a request does land on a connection the
// backend just closed, it is resent on a new one, not answered 502.
func TestStaleConnectionRetried(t *testing.T) {
	u := newUvicornLike(t, 30*time.Millisecond)
	r, srv := u.router(t, &http.Transport{}) // pools without an idle timeout
	for i := range 4 {
		time.Sleep(60 * time.Millisecond)
		if resp := postTo(t, srv, "/v1/chat/completions", chatBody("m", "hi", "")); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	if u.dropped.Load() == 0 || counterValue(r.Metrics().StaleConnRetries) != float64(u.dropped.Load()) {
		t.Fatalf("%d dropped, %v retried", u.dropped.Load(), counterValue(r.Metrics().StaleConnRetries))
	}
}

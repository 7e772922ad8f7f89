package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

// replicaPair is two routers in front of the same backends, each knowing
// the other as a peer that takes forwarded requests at peerAddr.
type replicaPair struct {
	a, b     *Router
	aURL     string
	bURL     string
	backends map[string]*backend
}

func newReplicaPair(t *testing.T, n int, bAddr func(real string) string) *replicaPair {
	t.Helper()
	pr := &replicaPair{}
	var addrs map[string]string
	pr.backends, addrs = newBackends(t, n)
	start := func() (*Router, string) {
		r := New(Options{AllowLoopbackBackends: true, EjectBase: time.Minute})
		if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, addrs)); err != nil {
			t.Fatal(err)
		}
		return r, newServer(t, r)
	}
	pr.a, pr.aURL = start()
	pr.b, pr.bURL = start()
	host := func(u string) string { return strings.TrimPrefix(u, "http://") }
	pr.a.Policy().SetForward("a", host(pr.aURL))
	pr.b.Policy().SetForward("b", bAddr(host(pr.bURL)))
	for _, x := range []struct {
		to, from *Router
		name     string
	}{{pr.a, pr.b, "b"}, {pr.b, pr.a, "a"}} {
		rep := x.from.Policy().LocalReport("", 0)
		rep.Replica = x.name
		x.to.Policy().ApplyPeer(rep)
	}
	return pr
}

func forwards(r *Router, result string) float64 {
	return counterValue(r.Metrics().Forwards.WithLabelValues(result))
}

// TestForwardsToTheOwner: a request that reaches a replica which does not
// own the instance it places it on goes, body and stream intact, to the
// owner, which decides it and is the one that counts it in flight; a
// forwarded request is never forwarded again.
func TestForwardsToTheOwner(t *testing.T) {
	pr := newReplicaPair(t, 6, func(real string) string { return real })
	const n = 40
	for i := range n {
		body := chatBody("m", fmt.Sprintf("conversation %d: %s", i, strings.Repeat("context ", 40)), `,"stream":true`)
		req, _ := http.NewRequest(http.MethodPost, pr.aURL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		events := 0
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data: ") {
				events++
			}
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || events != 4 || resp.Header.Get("X-Backend") == "" {
			t.Fatalf("request %d: status %d, %d events, backend %q", i, resp.StatusCode, events, resp.Header.Get("X-Backend"))
		}
	}
	fwd, recv := forwards(pr.a, "forwarded"), forwards(pr.b, "received")
	if fwd == 0 || fwd == n || fwd != recv {
		t.Fatalf("a forwarded %v of %d requests, b received %v: want some, not all, and the same", fwd, n, recv)
	}
	var decidedA, decidedB float64
	for id := range pr.backends {
		decidedA += counterValue(pr.a.Metrics().Requests.WithLabelValues(id, "PREFIX_AWARE", "2xx"))
		decidedB += counterValue(pr.b.Metrics().Requests.WithLabelValues(id, "PREFIX_AWARE", "2xx"))
	}
	if decidedA+fwd != n || decidedB != fwd {
		t.Fatalf("a decided %v and forwarded %v, b decided %v, of %d", decidedA, fwd, decidedB, n)
	}
	// vLLM never sees the mark, and a forwarded request still names the
	// client first in X-Forwarded-For, then the replica it reached.
	for i := 0; ; i++ {
		if i == 100 {
			t.Fatal("100 more prompts, none forwarded")
		}
		resp, _ := postURL(t, pr.aURL+"/v1/chat/completions", chatBody("m", fmt.Sprintf("one more %d", i), ""))
		if forwards(pr.a, "forwarded") == fwd {
			continue // decided by a: try another prompt
		}
		b := pr.backends[resp.Header.Get("X-Backend")]
		b.mu.Lock()
		h := b.headers
		b.mu.Unlock()
		if h.Get(ForwardedHeader) != "" || strings.Count(h.Get("X-Forwarded-For"), ",") != 1 {
			t.Errorf("forwarded request reached vLLM with %s %q, X-Forwarded-For %q", ForwardedHeader, h.Get(ForwardedHeader), h.Get("X-Forwarded-For"))
		}
		break
	}
	// Sent to b already marked as forwarded: b decides, whatever it owns.
	for i := range 20 {
		resp, _ := postURL(t, pr.bURL+"/v1/chat/completions", chatBody("m", fmt.Sprintf("marked %d", i), ""), ForwardedHeader, "1")
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if got := forwards(pr.b, "forwarded"); got != 0 {
		t.Fatalf("b forwarded %v requests marked as forwarded", got)
	}
}

// TestUnreachableOwnerFallsBack: when the owner cannot be reached, the
// replica decides the request itself and nothing fails.
func TestUnreachableOwnerFallsBack(t *testing.T) {
	pr := newReplicaPair(t, 6, func(string) string { return deadAddr(t) })
	for i := range 40 {
		resp, body := postURL(t, pr.aURL+"/v1/chat/completions", chatBody("m", fmt.Sprintf("conversation %d", i), ""))
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d: %s", i, resp.StatusCode, body)
		}
	}
	if fb := forwards(pr.a, "fallback"); fb == 0 || forwards(pr.a, "forwarded") != 0 {
		t.Fatalf("fallbacks %v, forwarded %v: want every request for b's instances decided here", fb, forwards(pr.a, "forwarded"))
	}
}

// TestOwnerClosingAPooledConnectionFallsBack: an owner that closes a
// kept-alive connection as the next forward goes out on it (it restarted,
// or closed it idle) costs no request: the replica decides it itself.
func TestOwnerClosingAPooledConnectionFallsBack(t *testing.T) {
	var answered atomic.Int64
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if answered.Add(1) == 1 {
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = io.WriteString(w, `{"ok":true}`) // kept alive, pooled
			return
		}
		c, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			c.Close() // the next request on it finds it closed
		}
	}))
	defer owner.Close()
	pr := newReplicaPair(t, 6, func(string) string { return strings.TrimPrefix(owner.URL, "http://") })
	statuses := map[int]int{}
	for i := 0; forwards(pr.a, "forwarded")+forwards(pr.a, "fallback") < 2; i++ {
		if i == 200 {
			t.Fatal("200 prompts, fewer than two for b's instances")
		}
		resp, _ := postURL(t, pr.aURL+"/v1/chat/completions", chatBody("m", fmt.Sprintf("prompt %d", i), ""))
		statuses[resp.StatusCode]++
	}
	if len(statuses) != 1 || statuses[200] == 0 || forwards(pr.a, "fallback") != 1 {
		t.Fatalf("statuses %v, forwarded %v, fallbacks %v: want every request answered, the second forward decided here",
			statuses, forwards(pr.a, "forwarded"), forwards(pr.a, "fallback"))
	}
}

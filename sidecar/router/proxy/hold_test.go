package proxy

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

// holdingRouter serves a router that holds requests, with no instance yet.
func holdingRouter(t *testing.T, opts Options) (*Router, string) {
	t.Helper()
	opts.AllowLoopbackBackends = true
	opts.HoldTimeout = cmp.Or(opts.HoldTimeout, time.Minute)
	r := New(opts)
	if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, map[string]string{})); err != nil {
		t.Fatal(err)
	}
	return r, newServer(t, r)
}

type answer struct {
	status int
	header http.Header
	body   string
	err    error
}

// send posts in the background; the answer arrives on the channel.
func send(ctx context.Context, url, body string) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			ch <- answer{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ch <- answer{status: resp.StatusCode, header: resp.Header, body: string(b)}
	}()
	return ch
}

func errorCode(t *testing.T, body string) string {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code == nil {
		t.Fatalf("not an OpenAI error body: %q", body)
	}
	return *e.Error.Code
}

// TestHoldDispatchesInArrivalOrderOnReadiness: requests arriving with no
// instance wait, one activation is asked for, and all are answered once an
// instance arrives, dispatched oldest first.
func TestHoldDispatchesInArrivalOrderOnReadiness(t *testing.T) {
	g := NewWithT(t)
	r, url := holdingRouter(t, Options{})
	var mu sync.Mutex
	var order []uint64
	r.holder.dispatched = func(seq uint64) { mu.Lock(); order = append(order, seq); mu.Unlock() }
	const n = 50 // the figure for requests arriving during an activation
	var answers []<-chan answer
	for i := range n {
		answers = append(answers, send(context.Background(), url, chatBody("m", fmt.Sprintf("request %d", i), "")))
		g.Eventually(r.heldCount).Should(Equal(i+1), "request %d held", i)
	}
	g.Expect(counterValue(r.Metrics().Activations)).To(Equal(1.0), "one activation for the run")
	b := newBackend(t, "a")
	ready := time.Now()
	if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, map[string]string{"a": b.addr()})); err != nil {
		t.Fatal(err)
	}
	for i, ch := range answers {
		a := <-ch
		g.Expect(a.err).NotTo(HaveOccurred())
		g.Expect(a.status).To(Equal(http.StatusOK), "request %d: %s", i, a.body)
		if i == 0 {
			t.Logf("first held request answered %s after the instance arrived", time.Since(ready))
		}
	}
	t.Logf("all %d held requests answered %s after the instance arrived", n, time.Since(ready))
	g.Expect(r.heldCount()).To(Equal(0))
	g.Expect(b.count()).To(Equal(n))
	mu.Lock()
	want := make([]uint64, n)
	for i := range want {
		want[i] = uint64(i)
	}
	g.Expect(order).To(Equal(want))
	mu.Unlock()
	g.Expect(histogram(t, r.Metrics().HoldWait).GetSampleCount()).To(Equal(uint64(n)))
	g.Expect(r.budget.used.Load()).To(BeZero())
	// A new run asks again.
	if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, map[string]string{})); err != nil {
		t.Fatal(err)
	}
	ch := send(context.Background(), url, chatBody("m", "later", ""))
	g.Eventually(r.heldCount).Should(Equal(1))
	g.Expect(counterValue(r.Metrics().Activations)).To(Equal(2.0))
	if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, map[string]string{"a": b.addr()})); err != nil {
		t.Fatal(err)
	}
	g.Expect((<-ch).status).To(Equal(http.StatusOK))
}

// TestHoldClientDisconnectLeaves: a client that gives up leaves the queue
// and its body's budget; nothing is sent for it later.
func TestHoldClientDisconnectLeaves(t *testing.T) {
	g := NewWithT(t)
	r, url := holdingRouter(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	ch := send(ctx, url, chatBody("m", "impatient", ""))
	g.Eventually(r.heldCount).Should(Equal(1))
	g.Expect(r.budget.used.Load()).To(BeNumerically(">", 0))
	cancel()
	g.Expect((<-ch).err).To(HaveOccurred())
	g.Eventually(r.heldCount).Should(Equal(0))
	g.Eventually(r.budget.used.Load).Should(BeZero())
	b := newBackend(t, "a")
	if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, map[string]string{"a": b.addr()})); err != nil {
		t.Fatal(err)
	}
	g.Consistently(b.count, 300*time.Millisecond).Should(BeZero())
	g.Expect(outcomes(r)).NotTo(HaveKey("2xx"))
}

// TestHoldQueueBounded: past --max-held, or past half the buffer budget
// in held bodies (the rest is for the requests served when instances
// return), a request gets 503 with Retry-After at once, and the held ones
// stay held.
func TestHoldQueueBounded(t *testing.T) {
	big := chatBody("m", strings.Repeat("x", 3000), "")
	for name, tc := range map[string]struct {
		opts Options
		body string
	}{
		"count": {Options{MaxHeld: 2}, chatBody("m", "hi", "")},
		"bytes": {Options{MaxBufferedBytes: int64(4 * len(big))}, big},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			r, url := holdingRouter(t, tc.opts)
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel) // before the server closes
			for i := range 2 {
				send(ctx, url, tc.body)
				g.Eventually(r.heldCount).Should(Equal(i + 1))
			}
			a := <-send(context.Background(), url, tc.body)
			g.Expect(a.status).To(Equal(http.StatusServiceUnavailable), a.body)
			g.Expect(a.header.Get("Retry-After")).NotTo(BeEmpty())
			g.Expect(errorCode(t, a.body)).To(Equal("router_overloaded"))
			g.Expect(r.heldCount()).To(Equal(2))
		})
	}
}

// TestHoldWaitLimit: a request held past --hold-timeout gets 504 with
// Retry-After and leaves the queue.
func TestHoldWaitLimit(t *testing.T) {
	g := NewWithT(t)
	r, url := holdingRouter(t, Options{HoldTimeout: 200 * time.Millisecond})
	a := <-send(context.Background(), url, chatBody("m", "too late", ""))
	g.Expect(a.status).To(Equal(http.StatusGatewayTimeout))
	g.Expect(a.header.Get("Retry-After")).NotTo(BeEmpty())
	g.Expect(errorCode(t, a.body)).To(Equal("no_instance_in_time"))
	g.Expect(r.heldCount()).To(Equal(0))
}

// TestHoldThroughEjection: an instance ejected after failing is retried
// for held requests once its back-off runs out, without a new document.
func TestHoldThroughEjection(t *testing.T) {
	g := NewWithT(t)
	r, url := holdingRouter(t, Options{EjectBase: time.Second, EjectMax: time.Second, MaxAttempts: 1})
	b := newBackend(t, "a")
	addr := b.addr()
	b.srv.Close() // not listening yet: "starting"
	if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, map[string]string{"a": addr})); err != nil {
		t.Fatal(err)
	}
	first := <-send(context.Background(), url, chatBody("m", "probe", ""))
	g.Expect(first.status).To(Equal(http.StatusServiceUnavailable), "the connection fails: the instance is ejected")
	ch := send(context.Background(), url, chatBody("m", "held", ""))
	g.Eventually(r.heldCount).Should(Equal(1), "held while the only instance is ejected")
	b2 := newBackendOn(t, "a", addr)
	a := <-ch
	g.Expect(a.status).To(Equal(http.StatusOK), a.body)
	g.Expect(b2.count()).To(Equal(1))
}

// TestHoldNotForAnAdapterLoadedNowhere: with base-model instances up, an
// adapter ready on none (its load failed or runs) gets 503 at once.
func TestHoldNotForAnAdapterLoadedNowhere(t *testing.T) {
	g := NewWithT(t)
	r, url := holdingRouter(t, Options{})
	b := newBackend(t, "a")
	if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, map[string]string{"a": b.addr()},
		routingv1alpha1.Adapter{Name: "lora-cold"})); err != nil {
		t.Fatal(err)
	}
	a := <-send(context.Background(), url, chatBody("lora-cold", "hi", ""))
	g.Expect(a.status).To(Equal(http.StatusServiceUnavailable), a.body)
	g.Expect(errorCode(t, a.body)).To(Equal("no_instance"))
	g.Expect(counterValue(r.Metrics().Activations)).To(BeZero())
}

// TestHoldAnAdapterAtZero: with no instance at all (scaled to zero), an
// adapter's request is held and asks for an instance like the base
// model's, and is answered once an instance with the adapter is ready.
func TestHoldAnAdapterAtZero(t *testing.T) {
	g := NewWithT(t)
	r, url := holdingRouter(t, Options{})
	if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, map[string]string{},
		routingv1alpha1.Adapter{Name: "lora-x"})); err != nil {
		t.Fatal(err)
	}
	ch := send(context.Background(), url, chatBody("lora-x", "at zero", ""))
	g.Eventually(r.heldCount).Should(Equal(1))
	g.Expect(counterValue(r.Metrics().Activations)).To(Equal(1.0))
	b := newBackend(t, "a")
	if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, map[string]string{"a": b.addr()},
		routingv1alpha1.Adapter{Name: "lora-x", Desired: []string{"a"}, Ready: []string{"a"}})); err != nil {
		t.Fatal(err)
	}
	a := <-ch
	g.Expect(a.status).To(Equal(http.StatusOK), a.body)
	g.Expect(b.count()).To(Equal(1))
}

// TestGatewayAdmissionAsksForAnInstance: admitted for a caller that
// forwards nothing (the Endpoint Picker Protocol), a request is answered
// 503 at once, and asks for an instance exactly when the proxy would hold
// it (waitsForInstance).
func TestGatewayAdmissionAsksForAnInstance(t *testing.T) {
	b := newBackend(t, "a")
	for _, tc := range []struct {
		name      string
		instances map[string]string
		model     string
		asks      bool
	}{
		{"base model at zero", map[string]string{}, "m", true},
		{"adapter at zero", map[string]string{}, "lora-x", true},
		{"adapter loaded nowhere while the base model has instances", map[string]string{"a": b.addr()}, "lora-x", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var holds atomic.Int64
			r, _ := holdingRouter(t, Options{OnHold: func() { holds.Add(1) }})
			if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, tc.instances, routingv1alpha1.Adapter{Name: "lora-x"})); err != nil {
				t.Fatal(err)
			}
			d, refused := r.Admit(context.Background(), Admission{Method: http.MethodPost, Path: "/v1/chat/completions", Body: []byte(chatBody(tc.model, "hi", ""))})
			if d != nil || refused == nil {
				t.Fatalf("decided %v, want a refusal", d)
			}
			if got := holds.Load() == 1; got != tc.asks {
				t.Errorf("asked for an instance: %v, want %v", got, tc.asks)
			}
		})
	}
}

// TestUnheldRequestAsksForAnInstance: without holding (HoldTimeout 0) a
// request that finds no instance is answered 503 at once and still asks
// for one (scale from zero), as the same request through the Endpoint
// Picker Protocol does.
func TestUnheldRequestAsksForAnInstance(t *testing.T) {
	var holds atomic.Int64
	r := New(Options{AllowLoopbackBackends: true, OnHold: func() { holds.Add(1) }})
	if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, map[string]string{})); err != nil {
		t.Fatal(err)
	}
	a := <-send(context.Background(), newServer(t, r), chatBody("m", "at zero", ""))
	if a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" {
		t.Fatalf("answered %d %v %s, want 503 with Retry-After", a.status, a.header, a.body)
	}
	if holds.Load() != 1 || r.heldCount() != 0 {
		t.Fatalf("asked for an instance %d times, %d held; want once, none held", holds.Load(), r.heldCount())
	}
}

// TestHooksTellHeldFromForwarded: a held request calls OnHold and not
// OnForward until it is sent to an instance; each request sent calls
// OnForward once.
func TestHooksTellHeldFromForwarded(t *testing.T) {
	g := NewWithT(t)
	var holds, forwards atomic.Int64
	r, url := holdingRouter(t, Options{OnHold: func() { holds.Add(1) }, OnForward: func() { forwards.Add(1) }})
	ch := send(context.Background(), url, chatBody("m", "at zero", ""))
	g.Eventually(r.heldCount).Should(Equal(1))
	g.Expect(holds.Load()).To(Equal(int64(1)))
	g.Expect(forwards.Load()).To(BeZero(), "a held request has not been sent")
	b := newBackend(t, "a")
	if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, map[string]string{"a": b.addr()})); err != nil {
		t.Fatal(err)
	}
	g.Expect((<-ch).status).To(Equal(http.StatusOK))
	g.Expect((<-send(context.Background(), url, chatBody("m", "warm", ""))).status).To(Equal(http.StatusOK))
	g.Expect(forwards.Load()).To(Equal(int64(2)))
	g.Expect(holds.Load()).To(Equal(int64(1)))
}

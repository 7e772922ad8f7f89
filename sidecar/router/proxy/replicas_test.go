package proxy

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/router/picker"
)

// replicaSet is R routers in process, each with its traffic server on
// loopback; with shared set, the first leads and serves the pick API and
// the others ask it; otherwise each decides alone.
func replicaSet(t *testing.T, n int, shared bool, backends map[string]*backend, threshold int) []*httptest.Server {
	t.Helper()
	keys, err := picker.DeriveKeys([]byte("the endpoint's key, 32 bytes long"))
	if err != nil {
		t.Fatal(err)
	}
	addrs := map[string]string{}
	for id, b := range backends {
		addrs[id] = b.addr()
	}
	doc := document(routingv1alpha1.StrategyPrefixAware, addrs)
	doc.PrefixAware.ConcurrencyThreshold = threshold
	var out []*httptest.Server
	pickAddr := PickerSelf
	for i := range n {
		opts := Options{AllowLoopbackBackends: true, EjectBase: time.Minute, Replica: fmt.Sprintf("router-%d", i), Keys: keys}
		if shared {
			opts.Picker = pickAddr
		}
		r := New(opts)
		if err := r.Apply(doc); err != nil {
			t.Fatal(err)
		}
		if shared && i == 0 {
			pick := httptest.NewServer(r.Picker().Handler())
			t.Cleanup(pick.Close)
			pickAddr = strings.TrimPrefix(pick.URL, "http://")
		}
		srv := httptest.NewServer(r.Handler())
		t.Cleanup(srv.Close)
		out = append(out, srv)
	}
	return out
}

// hotLoad sends clients concurrent loops of one hot prompt, spread over
// the replicas as a Service would, and returns the most requests any
// backend ever had at once, and the failures.
func hotLoad(t *testing.T, replicas []*httptest.Server, backends map[string]*backend, clients, each int) (int64, int) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	body := chatBody("m", strings.Repeat("a system prompt every request shares. ", 40), "")
	for c := range clients {
		wg.Go(func() {
			for i := range each {
				url := replicas[(c+i)%len(replicas)].URL
				resp, out := postURL(t, url+"/v1/chat/completions", body)
				if resp.StatusCode != 200 {
					mu.Lock()
					failed++
					mu.Unlock()
					t.Logf("status %d: %s", resp.StatusCode, out)
				}
			}
		})
	}
	wg.Wait()
	var peak int64
	for _, b := range backends {
		peak = max(peak, b.peak.Load())
	}
	return peak, failed
}

// TestThresholdHoldsAcrossReplicas: three routers sharing one picker keep
// every instance within concurrencyThreshold, as one router does, while
// the fleet has room (6 clients, 3 instances of 4); the same three
// deciding alone, each counting its own requests, do not.
func TestThresholdHoldsAcrossReplicas(t *testing.T) {
	const threshold, clients = 4, 6
	run := func(shared bool) int64 {
		backends, _ := newBackends(t, 3)
		for _, b := range backends {
			b.delay = 20 * time.Millisecond
		}
		peak, failed := hotLoad(t, replicaSet(t, 3, shared, backends, threshold), backends, clients, 25)
		if failed > 0 {
			t.Fatalf("%d requests failed", failed)
		}
		return peak
	}
	shared, alone := run(true), run(false)
	t.Logf("most requests at once on one instance: %d with one picker, %d with each router alone", shared, alone)
	if peak := shared; peak > threshold {
		t.Errorf("with one picker for 3 routers an instance had %d requests at once, over the threshold %d", peak, threshold)
	}
	if peak := alone; peak <= threshold {
		t.Errorf("control: 3 routers deciding alone kept the instance at %d, within the threshold; the test cannot tell", peak)
	}
}

// TestNoPickerNoFailure: a replica whose picker is gone (here: nothing
// listens at its address) serves every request by its fallback, stays
// ready, and says so in its metrics.
func TestNoPickerNoFailure(t *testing.T) {
	backends, addrs := newBackends(t, 3)
	keys, err := picker.DeriveKeys([]byte("the endpoint's key, 32 bytes long"))
	if err != nil {
		t.Fatal(err)
	}
	r := New(Options{AllowLoopbackBackends: true, EjectBase: time.Minute, Replica: "router-1", Keys: keys, Picker: deadAddr(t)})
	if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, addrs)); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r.Handler())
	t.Cleanup(srv.Close)
	const n = 20
	for i := range n {
		resp, body := postURL(t, srv.URL+"/v1/chat/completions", chatBody("m", fmt.Sprintf("conversation %d", i), ""))
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d: %s", i, resp.StatusCode, body)
		}
	}
	if !r.Ready() {
		t.Error("not ready without a picker")
	}
	if got := counterValue(r.Picker().Metrics().Picks.WithLabelValues("fallback")); got != n {
		t.Errorf("%v requests by the fallback, want %d", got, n)
	}
	served := 0
	for _, b := range backends {
		served += b.count()
	}
	if served != n {
		t.Errorf("backends served %d of %d", served, n)
	}
}

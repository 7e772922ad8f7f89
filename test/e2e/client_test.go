package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warmroute/warmroute/test/harness"
	"github.com/warmroute/warmroute/test/vllmsim"
)

// reply is what a client saw of one chat completion.
type reply struct {
	status   int
	instance string
	cached   int
	body     string
	err      error
	// via is the router replica that answered.
	via int
}

func (r reply) ok() bool { return r.err == nil && r.status == http.StatusOK }

var httpClient = &http.Client{
	Timeout:   30 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 64},
}

// chat sends one non-streaming chat completion with a system prompt and a
// user message; tenant, when set, goes in the X-Prefix-Aware-Id header.
func chat(ctx context.Context, baseURL, model, system, user, tenant string, maxTokens int) reply {
	return chatWith(ctx, httpClient, baseURL, model, system, user, tenant, maxTokens)
}

// chatWith is chat through client (a router Service's spreader, say).
func chatWith(ctx context.Context, client *http.Client, baseURL, model, system, user, tenant string, maxTokens int) reply {
	body, _ := json.Marshal(map[string]any{
		"model": model,
		"messages": []map[string]string{
			{"role": "system", "content": system},
			{"role": "user", "content": user},
		},
		"max_tokens": maxTokens,
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return reply{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if tenant != "" {
		req.Header.Set("X-Prefix-Aware-Id", tenant)
	}
	resp, err := client.Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	cached, _ := strconv.Atoi(resp.Header.Get(vllmsim.HeaderCachedTokens))
	return reply{status: resp.StatusCode, instance: resp.Header.Get(vllmsim.HeaderInstance), cached: cached, body: string(b), err: err}
}

// longText is deterministic filler of about n characters, distinct per seed.
func longText(seed string, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%s policy clause %d: customers may ask about orders, returns and warranties. ", seed, i)
	}
	return b.String()[:n]
}

// traffic sends requests in a loop from several workers until stopped, and
// records every reply by prefix group.
type traffic struct {
	sent, failed atomic.Int64
	mu           sync.Mutex
	failures     []string
	lastInstance map[int]string // group×8+router → instance of its latest reply
	served       map[string]int // instance → successful replies
	cancel       context.CancelFunc
	done         sync.WaitGroup
}

// startTraffic runs workers that each cycle through groups; every group has
// its own long prefix (a conversation) so its placement can be followed.
// send picks the router for a request (several routers act as a Service).
func startTraffic(ctx context.Context, send func(ctx context.Context, group, n int) reply, groups, workers int) *traffic {
	t := &traffic{lastInstance: map[int]string{}, served: map[string]int{}}
	ctx, t.cancel = context.WithCancel(ctx)
	var next atomic.Int64
	for w := 0; w < workers; w++ {
		t.done.Add(1)
		go func() {
			defer t.done.Done()
			for ctx.Err() == nil {
				n := int(next.Add(1))
				g := n % groups
				r := send(ctx, g, n)
				if ctx.Err() != nil && r.err != nil {
					return // stopped mid-request: not a failure of the system
				}
				t.sent.Add(1)
				if !r.ok() {
					t.failed.Add(1)
					t.mu.Lock()
					t.failures = append(t.failures, fmt.Sprintf("group %d: status %d err %v body %.200s", g, r.status, r.err, r.body))
					t.mu.Unlock()
					continue
				}
				t.mu.Lock()
				// Keyed per router replica: a group's placement is
				// followed through each router's own eyes.
				t.lastInstance[pairKey(g, r.via)] = r.instance
				t.served[r.instance]++
				t.mu.Unlock()
			}
		}()
	}
	return t
}

// pairKey is the key of a (prefix group, router replica) pair in
// traffic.placement; pairOf takes it apart.
func pairKey(group, via int) int { return group*8 + via }

func pairOf(key int) (group, via int) { return key / 8, key % 8 }

func (t *traffic) stop() {
	t.cancel()
	t.done.Wait()
}

// placement snapshots group → instance.
func (t *traffic) placement() map[int]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.lastInstance)
}

// servedBy counts successful replies by instance.
func (t *traffic) servedBy() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.served)
}

func (t *traffic) failureList() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.failures...)
}

// endpointsView tracks which routers are ready, like a Service's endpoints.
type endpointsView struct {
	mu    sync.Mutex
	state map[int]bool
}

func newEndpointsView() *endpointsView { return &endpointsView{state: map[int]bool{}} }

// watch polls each router's readiness every 50 ms until ctx ends.
func (e *endpointsView) watch(ctx context.Context, routers []*harness.Router) {
	go func() {
		for ctx.Err() == nil {
			for i, r := range routers {
				ok := false
				if resp, err := httpClient.Get(r.MetricsURL + "/readyz"); err == nil {
					ok = resp.StatusCode == http.StatusOK
					resp.Body.Close()
				}
				e.mu.Lock()
				e.state[i] = ok
				e.mu.Unlock()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
}

func (e *endpointsView) ready(i int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	ok, seen := e.state[i]
	return ok || !seen
}

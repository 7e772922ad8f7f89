package policy

import (
	"container/list"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warmroute/warmroute/test/workload"
)

// This file simulates the benchmark workloads offline at block level: each
// prompt is a chain of 64-byte blocks (~16 tokens, as vLLM's cache keys
// are chained), each instance an LRU cache of blocks, and the hit rate the
// share of prompt blocks found as a cached prefix on the chosen instance.
// A pooled LRU of the whole fleet's size is the oracle no router can beat.
// Requests are routed through replicaSet (agreement_test.go), so in-flight
// load and report exchange are modelled as in the agreement tests.
//
// The figures are logged (go test -run TestSimulate -v); the assertions
// are ratios measured in the same process, so they hold on any machine.

const (
	simBlockBytes = 64
	simInstances  = 7
)

type lru struct {
	cap   int
	ll    *list.List
	items map[uint64]*list.Element
}

func newLRU(n int) *lru { return &lru{cap: n, ll: list.New(), items: map[uint64]*list.Element{}} }

// access returns how many leading blocks were cached, then caches all.
func (c *lru) access(blocks []uint64) int {
	hit := 0
	for hit < len(blocks) {
		if _, ok := c.items[blocks[hit]]; !ok {
			break
		}
		hit++
	}
	for _, b := range blocks {
		if e, ok := c.items[b]; ok {
			c.ll.MoveToFront(e)
			continue
		}
		c.items[b] = c.ll.PushFront(b)
		if c.ll.Len() > c.cap {
			old := c.ll.Back()
			c.ll.Remove(old)
			delete(c.items, old.Value.(uint64))
		}
	}
	return hit
}

// simRequest is what the policy sees of a request (extracted as the router
// does) and the cache keys of its whole prompt.
type simRequest struct {
	req    Request
	blocks []uint64
}

func simRequests(t testing.TB, w workload.Workload) []simRequest {
	t.Helper()
	reqs := workloadRequests(t, w)
	out := make([]simRequest, len(reqs))
	for i, r := range w.Requests {
		var prompt strings.Builder
		for _, m := range r.Messages {
			prompt.WriteString(m.Content)
			for _, p := range m.Parts {
				prompt.WriteString(p)
			}
		}
		out[i] = simRequest{req: reqs[i], blocks: blocksOf(prompt.String())}
	}
	return out
}

// blocksOf is the block chain of a whole prompt.
func blocksOf(prompt string) []uint64 {
	return newKey(Request{Text: []byte(prompt), WindowBytes: len(prompt)}, 0x1234, simBlockBytes).BlockHashes()
}

// cacheBlocks sizes each instance's cache at a quarter of the workload's
// distinct blocks: one instance cannot hold the working set, the pooled
// fleet (7/4 of it) can, so where requests go decides the hit rate.
func cacheBlocks(reqs []simRequest) int {
	distinct := map[uint64]struct{}{}
	for _, r := range reqs {
		for _, b := range r.blocks {
			distinct[b] = struct{}{}
		}
	}
	return max(1, len(distinct)/4)
}

type simResult struct {
	hit   float64 // share of prompt blocks served from cache
	share float64 // the busiest instance's requests over the average
}

// simulate routes reqs with s through one policy (the elected picker
// decides for every router replica) and measures the fleet's cache. Eight
// requests stay in flight, released oldest first.
func simulate(t *testing.T, reqs []simRequest, s Strategy, capBlocks int) simResult {
	p := newPolicy(t, s, simInstances, Tuning{})
	caches := make(map[string]*lru, simInstances)
	for _, in := range instancesOf(simInstances) {
		caches[in.ID] = newLRU(capBlocks)
	}
	counts := map[string]int{}
	hit, total := 0, 0
	var inFlight []*Choice
	for _, r := range reqs {
		c := pick(t, p, r.req)
		if inFlight = append(inFlight, c); len(inFlight) > 8 {
			inFlight[0].Done()
			inFlight = inFlight[1:]
		}
		id := c.Instance().ID
		counts[id]++
		hit += caches[id].access(r.blocks)
		total += len(r.blocks)
	}
	for _, c := range inFlight {
		c.Done()
	}
	most := 0
	for _, c := range counts {
		most = max(most, c)
	}
	return simResult{
		hit:   float64(hit) / float64(total),
		share: float64(most) / (float64(len(reqs)) / simInstances),
	}
}

func pooled(reqs []simRequest, capBlocks int) float64 {
	c := newLRU(capBlocks)
	hit, total := 0, 0
	for _, r := range reqs {
		hit += c.access(r.blocks)
		total += len(r.blocks)
	}
	return float64(hit) / float64(total)
}

func simWorkloads(t *testing.T) []workload.Workload {
	ws := []workload.Workload{
		workload.LongContext(workload.LongContextConfig{Seed: 1}),
		workload.SupportBot(workload.SupportBotConfig{Seed: 1}),
		workload.RAG(workload.RAGConfig{Seed: 1}),
		workload.ShareGPT(workload.ShareGPTConfig{Seed: 1}),
	}
	if trace, ok := mooncakeTrace(); ok {
		w, err := workload.Mooncake(workload.MooncakeConfig{Path: trace, Seed: 1, Requests: 1500})
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	} else {
		t.Log("Mooncake trace not found in shared/traces above the checkout: left out")
	}
	return ws
}

// mooncakeTrace finds the shared trace, which lives in shared/traces next
// to the checkout (how far up depends on where the checkout is).
func mooncakeTrace() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		p := filepath.Join(dir, "shared", "traces", "mooncake_synthetic_trace.jsonl")
		if _, err := os.Stat(p); err == nil {
			return p, true
		}
		if filepath.Dir(dir) == dir {
			return "", false
		}
		dir = filepath.Dir(dir)
	}
}

// TestSimulate checks, on every benchmark workload, that prefix-aware
// routing keeps most of what a pooled cache would hit and clearly more
// than the load-only strategies, without piling requests on one instance.
func TestSimulate(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates five workloads")
	}
	for _, w := range simWorkloads(t) {
		t.Run(w.Name, func(t *testing.T) {
			reqs := simRequests(t, w)
			capBlocks := cacheBlocks(reqs)
			oracle := pooled(reqs, capBlocks*simInstances)
			res := map[Strategy]simResult{}
			line := fmt.Sprintf("%d requests, pooled %5.1f%%", len(reqs), 100*oracle)
			for _, s := range testedStrategies {
				res[s] = simulate(t, reqs, s, capBlocks)
				line += fmt.Sprintf(" | %s %5.1f%% max/avg %.2f", s, 100*res[s].hit, res[s].share)
			}
			t.Log(line)

			prefix := res[PrefixAware]
			if prefix.hit < 0.8*oracle {
				t.Errorf("PREFIX_AWARE hit rate %.1f%% < 80%% of the pooled cache's %.1f%%", 100*prefix.hit, 100*oracle)
			}
			for _, s := range []Strategy{LeastOutstandingRequests, Random} {
				if prefix.hit < res[s].hit+0.5*(oracle-res[s].hit) {
					t.Errorf("PREFIX_AWARE hit rate %.1f%% closes less than half the gap from %s's %.1f%% to the pooled %.1f%%",
						100*prefix.hit, s, 100*res[s].hit, 100*oracle)
				}
			}
			if prefix.share > 2 {
				t.Errorf("PREFIX_AWARE sends the busiest instance %.2f× the average share of requests", prefix.share)
			}
		})
	}
}

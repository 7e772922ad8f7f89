package policy

import (
	"bufio"
	"container/list"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// This file is an offline simulation of the benchmark workloads at block
// level: each prompt is a list of 64-character blocks (~16 tokens), each
// instance an LRU cache of blocks, and hit rate the share of prompt blocks
// found as a cached prefix on the chosen instance. A pooled LRU of the same
// total size is the oracle. In-flight load is modelled by completing each
// request when the concurrency-th later one is issued. Run with
// WARMROUTE_SIM=1 go test -run TestSimulate -v ./sidecar/router/policy/

const simBlockChars = 64

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

// simRequest is a prompt as content ids of its blocks; the cache key of a
// block is the chain of ids up to it (as in vLLM).
type simRequest struct{ ids []uint64 }

func chainKeys(ids []uint64) []uint64 {
	out := make([]uint64, len(ids))
	h := uint64(0x1234)
	for i, id := range ids {
		h = mix64(h ^ mix64(id+1))
		out[i] = h
	}
	return out
}

func renderText(ids []uint64, maxChars int) []byte {
	n := min(len(ids)*simBlockChars, maxChars)
	out := make([]byte, 0, n)
	for _, id := range ids {
		if len(out) >= n {
			break
		}
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], mix64(id))
		for j := 0; j < simBlockChars/16; j++ {
			out = fmt.Appendf(out, "%016x", binary.LittleEndian.Uint64(b[:])+uint64(j))
		}
	}
	return out[:n]
}

type simResult struct {
	hit, share float64
	spills     map[string]int
	// agree is the fraction of requests on which every replica's Peek
	// named the same instance (1 with one replica).
	agree float64
}

func (r simResult) spillCount() int {
	n := 0
	for _, v := range r.spills {
		n += v
	}
	return n
}

// simulate routes reqs; with several replicas, each request goes to one at
// random (as behind a Service), and the replicas exchange reports every
// exchangeEvery decisions, as sidecar/router/peers has them do about every
// 100 ms. Before each decision every replica is asked where it would send
// the request (Peek), which measures agreement.
func simulate(t *testing.T, reqs []simRequest, s Strategy, n, capBlocks, concurrency, replicas, exchangeEvery int, tune Tuning) simResult {
	ps := make([]*Policy, replicas)
	for i := range ps {
		tune.BenchmarkStrategies = true
		ps[i] = New(tune)
		ps[i].SetReplicas(replicas)
		if err := ps[i].Update(Config{Strategy: s, Model: "m", HashSeed: 7, PrefixLength: 4096, ConcurrencyThreshold: 10, Instances: fleet(n)}); err != nil {
			t.Fatal(err)
		}
	}
	caches := make([]*lru, n)
	for i := range caches {
		caches[i] = newLRU(capBlocks)
	}
	idx := map[string]int{}
	for i, in := range fleet(n) {
		idx[in.ID] = i
	}
	var pending []*Choice
	counts := make([]int, n)
	hit, total, agreed := 0, 0, 0
	spills := map[string]int{}
	look := ps[0].LookaheadBytes()
	seen := make([]uint64, replicas*replicas)
	rng := rand.New(rand.NewPCG(uint64(replicas), simSeed()))
	for k, r := range reqs {
		if replicas > 1 && k%exchangeEvery == 0 {
			for to := range ps {
				for from := range ps {
					if from != to {
						rep := ps[from].LocalReport(seen[from*replicas+to])
						rep.Replica = fmt.Sprint(from)
						ps[to].ApplyPeer(rep)
						seen[from*replicas+to] = rep.Seq
					}
				}
			}
		}
		text := renderText(r.ids, 4096+look)
		req := Request{Text: text, WindowBytes: min(4096, len(text))}
		agree := true
		if replicas > 1 {
			first := ""
			for i, p := range ps {
				id, err := p.Peek(req)
				if err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					first = id
				} else if id != first {
					agree = false
				}
			}
		}
		if agree {
			agreed++
		}
		c, err := ps[rng.IntN(replicas)].Pick(req)
		if err != nil {
			t.Fatal(err)
		}
		if c.Spill != SpillNone {
			spills[c.Spill]++
		}
		i := idx[c.Instance().ID]
		counts[i]++
		keys := chainKeys(r.ids)
		hit += caches[i].access(keys)
		total += len(keys)
		pending = append(pending, c)
		if n := len(pending); n > prefillLag {
			pending[n-1-prefillLag].Prefilled() // the first token, a few decisions later
		}
		if len(pending) > concurrency {
			pending[0].Done()
			pending = pending[1:]
		}
	}
	for _, c := range pending {
		c.Done()
	}
	most := 0
	for _, c := range counts {
		most = max(most, c)
	}
	return simResult{
		hit: float64(hit) / float64(total), share: float64(most) / (float64(len(reqs)) / float64(n)),
		spills: spills, agree: float64(agreed) / float64(len(reqs)),
	}
}

func pooled(reqs []simRequest, capBlocks int) float64 {
	c := newLRU(capBlocks)
	hit, total := 0, 0
	for _, r := range reqs {
		keys := chainKeys(r.ids)
		hit += c.access(keys)
		total += len(keys)
	}
	return float64(hit) / float64(total)
}

// Workload generators; ids are content ids of 64-character blocks.
type idGen struct{ next uint64 }

func (g *idGen) fresh(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		g.next++
		out[i] = g.next
	}
	return out
}

func cat(parts ...[]uint64) []uint64 {
	var out []uint64
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// sharedContexts: a few ~8k-token contexts (512 blocks), short questions.
func sharedContexts(r *rand.Rand, n int) []simRequest {
	g := &idGen{}
	ctxs := make([][]uint64, 12)
	for i := range ctxs {
		ctxs[i] = g.fresh(512)
	}
	out := make([]simRequest, n)
	for i := range out {
		out[i] = simRequest{cat(ctxs[r.IntN(len(ctxs))], g.fresh(2))}
	}
	return out
}

// systemAndConversations: a 3k-token system prompt (188 blocks) in every
// request, then per-user conversations that grow each turn.
func systemAndConversations(r *rand.Rand, n, users int) []simRequest {
	g := &idGen{}
	system := g.fresh(188)
	hist := make([][]uint64, users)
	turns := make([]int, users)
	out := make([]simRequest, n)
	for i := range out {
		u := r.IntN(users)
		if turns[u] >= 12 { // conversation over: a new user takes the slot
			hist[u], turns[u] = nil, 0
		}
		q := g.fresh(2 + r.IntN(6))
		out[i] = simRequest{cat(system, hist[u], q)}
		hist[u] = cat(hist[u], q, g.fresh(4+r.IntN(12)))
		turns[u]++
	}
	return out
}

// rag: shared system prompt, one of many documents by Zipf popularity, a
// question.
func rag(r *rand.Rand, n int) []simRequest {
	g := &idGen{}
	system := g.fresh(40)
	docs := make([][]uint64, 400)
	for i := range docs {
		docs[i] = g.fresh(96 + r.IntN(64))
	}
	z := rand.NewZipf(r, 1.1, 1, uint64(len(docs)-1))
	out := make([]simRequest, n)
	for i := range out {
		out[i] = simRequest{cat(system, docs[z.Uint64()], g.fresh(2))}
	}
	return out
}

// shareGPT: multi-turn conversations with no common system prompt.
func shareGPT(r *rand.Rand, n, convs int) []simRequest {
	g := &idGen{}
	hist := make([][]uint64, convs)
	turns := make([]int, convs)
	out := make([]simRequest, n)
	for i := range out {
		c := r.IntN(convs)
		if turns[c] >= 8 {
			hist[c], turns[c] = nil, 0
		}
		q := g.fresh(1 + r.IntN(10))
		out[i] = simRequest{cat(hist[c], q)}
		hist[c] = cat(hist[c], q, g.fresh(4+r.IntN(20)))
		turns[c]++
	}
	return out
}

// mooncake replays the shared trace: each 512-token hash id becomes 32
// blocks of 16 tokens.
func mooncake(t *testing.T) []simRequest {
	f, err := os.Open("/work/shared/traces/mooncake_synthetic_trace.jsonl")
	if err != nil {
		t.Skip("trace not available:", err)
	}
	defer f.Close()
	var out []simRequest
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var rec struct {
			InputLength int      `json:"input_length"`
			HashIDs     []uint64 `json:"hash_ids"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		nBlocks := int(math.Ceil(float64(rec.InputLength) / 16))
		ids := make([]uint64, 0, nBlocks)
		for _, h := range rec.HashIDs {
			for j := range 32 {
				if len(ids) < nBlocks {
					ids = append(ids, h*32+uint64(j)+1<<40)
				}
			}
		}
		out = append(out, simRequest{ids})
	}
	return out
}

func TestSimulate(t *testing.T) {
	if os.Getenv("WARMROUTE_SIM") == "" {
		t.Skip("set WARMROUTE_SIM=1 to run the workload simulation")
	}
	const n = 7
	r := rand.New(rand.NewPCG(11, 12))
	workloads := []struct {
		name        string
		reqs        []simRequest
		capBlocks   int
		concurrency int
	}{
		{"shared 8k contexts + questions", sharedContexts(r, 12000), 1500, 32},
		{"3k system prompt + conversations", systemAndConversations(r, 12000, 300), 3000, 32},
		{"RAG (system + Zipf docs + question)", rag(r, 12000), 3000, 32},
		{"ShareGPT-like multi-turn", shareGPT(r, 12000, 600), 3000, 32},
		{"Mooncake trace (512k tokens/instance)", mooncake(t), 32768, 32},
	}
	strategies := []Strategy{PrefixAware, Baseline, LeastOutstandingRequests, Random}
	if os.Getenv("WARMROUTE_SIM") == "prefix" {
		strategies = strategies[:1]
	}
	var tune Tuning
	if v := os.Getenv("WARMROUTE_SIM_REPLICA_LOAD"); v != "" {
		_, _ = fmt.Sscan(v, &tune.ReplicaLoad)
	}
	if v := os.Getenv("WARMROUTE_SIM_MOVE_SLACK"); v != "" {
		_, _ = fmt.Sscan(v, &tune.MoveSlack)
	}
	if v := os.Getenv("WARMROUTE_SIM_SHARE_SLACK"); v != "" {
		_, _ = fmt.Sscan(v, &tune.ShareSlack)
	}
	for _, w := range workloads {
		if only := os.Getenv("WARMROUTE_SIM_ONLY"); only != "" && !strings.Contains(w.name, only) {
			continue
		}
		oracle := pooled(w.reqs, w.capBlocks*n)
		line := fmt.Sprintf("%-40s pooled %5.1f%%", w.name, 100*oracle)
		var one simResult
		for _, s := range strategies {
			res := simulate(t, w.reqs, s, n, w.capBlocks, w.concurrency, 1, 1, tune)
			line += fmt.Sprintf(" | %s %5.1f%% (%3.0f%% of pooled) max/avg %.2f spills %d %v", s, 100*res.hit, 100*res.hit/oracle, res.share, res.spillCount(), res.spills)
			if s == PrefixAware {
				one = res
			}
		}
		t.Log(line)
		// Reports every 2 decisions are about every 100 ms at the
		// benchmark's request rates (4–12/s); every 100 decisions is the
		// stress case, where the whole in-flight set turns over three
		// times between reports.
		for _, every := range []int{2, exchangeEvery} {
			for _, r := range []int{2, 3} {
				res := simulate(t, w.reqs, PrefixAware, n, w.capBlocks, w.concurrency, r, every, tune)
				t.Logf("%-40s   PREFIX_AWARE, %d router replicas, reports every %3d decisions: %5.1f%% (%3.0f%% of pooled, %3.0f%% of 1 replica) max/avg %.2f agree %6.2f%% spills %v",
					"", r, every, 100*res.hit, 100*res.hit/oracle, 100*res.hit/one.hit, res.share, 100*res.agree, res.spills)
			}
		}
	}
}

func simSeed() uint64 {
	var s uint64 = 99
	if v := os.Getenv("WARMROUTE_SIM_SEED"); v != "" {
		_, _ = fmt.Sscan(v, &s)
	}
	return s
}

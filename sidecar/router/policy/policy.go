// Package policy decides which instance serves a request. It is pure Go over
// plain structs — no net/http, no Kubernetes types — so that every strategy
// can be table-tested and benchmarked without a network.
package policy

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/warmroute/warmroute/sidecar/router/popularity"
	"github.com/warmroute/warmroute/sidecar/router/prefixindex"
)

// Policy routes requests under the current configuration. It is safe for
// concurrent use; Update swaps the configuration atomically while decisions
// in progress finish on the one they started with.
type Policy struct {
	tuning     Tuning
	table      atomic.Pointer[table]
	stats      registry
	pop        *popularity.Sketch
	index      *prefixindex.Index
	shareSince atomic.Int64
	shareDecay atomic.Bool
	// shareEpoch counts share decays: how long ago an instance joined (see
	// joining).
	shareEpoch atomic.Int64
	// pick makes a decision and its charge one step, so that concurrent
	// decisions cannot all read an instance as under the threshold.
	pick sync.Mutex
	// chain, parent, depths and view are the decision's buffers (block
	// hashes, the anchor's parent set, the depths it records, what it
	// reads of the fleet), reused under pick.
	chain          []uint64
	parent, depths []int
	view           view
}

// New returns a policy with no instances; call Update before Pick.
func New(t Tuning) *Policy {
	t = t.withDefaults()
	return &Policy{tuning: t, pop: popularity.New(t.SketchWidth, t.DecayEvery), index: prefixindex.New(t.IndexEntries)}
}

// Update installs a new configuration. Live counters follow instances by ID.
func (p *Policy) Update(cfg Config) error {
	impl, err := p.lookup(cfg.Strategy)
	if err != nil {
		return fmt.Errorf("strategy: %w", err)
	}
	t, joined := newTable(cfg, &p.stats)
	t.strategy = impl
	p.seedShares(t, joined)
	p.startDrains(t, p.table.Load())
	p.table.Store(t)
	p.stats.Prune(t.Index)
	return nil
}

// LookaheadBytes is how far past the window the caller should extract text.
func (p *Policy) LookaheadBytes() int { return lookaheadBytes }

// IndexEntries is the number of entries in the prefix index.
func (p *Policy) IndexEntries() int { return p.index.Len() }

// MemoryBytes estimates the memory of the index and the sketch.
func (p *Policy) MemoryBytes() int { return p.index.Len()*prefixindex.EntryBytes + p.pop.Bytes() }

// InFlight is the requests decided here in flight to an instance.
func (p *Policy) InFlight(id string) int64 { return p.stats.Get(id).InFlight.Load() }

// PrefillTokens is the prompt tokens the requests decided here are
// estimated to leave an instance to prefill.
func (p *Policy) PrefillTokens(id string) int64 { return p.stats.Get(id).Prefill.Load() }

// Instances returns the configured instances.
func (p *Policy) Instances() []Instance {
	if t := p.table.Load(); t != nil {
		return t.Cfg.Instances
	}
	return nil
}

// allowed is the configuration in force and the instances of it allowed
// to serve model.
func (p *Policy) allowed(model string) (*table, []int, error) {
	t := p.table.Load()
	if t == nil {
		return nil, nil, ErrNoInstance
	}
	set, err := t.Candidates(model)
	return t, set, err
}

// ErrFull is PickIfRoom's answer when every instance that could serve the
// request is at its concurrency threshold.
var ErrFull = errors.New("every instance that could serve the request is at its concurrency threshold")

// Pick decides where a request goes (the strategy's decide, which
// changes nothing) and then records the decision (record). Decisions run
// one at a time (see Policy.pick).
func (p *Policy) Pick(key Key) (*Choice, error) { return p.choose(key, false) }

// PickIfRoom is Pick for a request that may wait (flow control): when
// every available instance that could serve it is at its threshold, it
// records nothing and answers ErrFull instead of overflowing. It reads
// more than Pick only when the decision lands on a full instance.
func (p *Policy) PickIfRoom(key Key) (*Choice, error) { return p.choose(key, true) }

func (p *Policy) choose(key Key, ifRoom bool) (*Choice, error) {
	p.pick.Lock()
	defer p.pick.Unlock()
	t, allowed, err := p.allowed(key.Model)
	if err != nil {
		return nil, err
	}
	v := p.look(t)
	d := t.strategy.decide(p, v, key, allowed)
	if ifRoom && v.full(d.order[0]) && !slices.ContainsFunc(allowed, func(m int) bool { return v.available(m) && !v.full(m) }) {
		return nil, ErrFull
	}
	d.Strategy = t.Cfg.Strategy
	return p.record(t, key, &d), nil
}

// Room is how many more requests the instances in rotation take before
// each is at its threshold (what a configuration change frees: flow
// control releases that many queued requests), and Capacity how many they
// take when idle (flow control's headroom is measured against it).
func (p *Policy) Room() (room, capacity int) {
	p.pick.Lock()
	defer p.pick.Unlock()
	t := p.table.Load()
	if t == nil {
		return 0, 0
	}
	v := p.look(t)
	for m := range t.Members {
		if v.available(m) && !t.Members[m].Draining {
			room += int(max(v.threshold-v.load(m).inFlight, 0))
			capacity += int(v.threshold)
		}
	}
	return room, capacity
}

// PromptTokens estimates the prompt of the request with key in tokens.
func (p *Policy) PromptTokens(key Key) int64 { return p.tokensOf(key.PromptBytes) }

// record makes a decision happen: the request counts in flight (its
// prefill: the prompt less what the instance is expected to hold) and in
// the shares, and the policy learns its blocks' popularity and where its
// key now lives.
func (p *Policy) record(t *table, key Key, d *decision) *Choice {
	prompt := p.tokensOf(key.PromptBytes)
	c := newChoice(t, d.order, d.unranked, prompt, prompt-int64(float64(prompt)*d.hit), false, d.Decision)
	p.countShare(t, d.order[0])
	p.learn(&d.learning)
	p.recordWarm(t, c, d.warm, d.learning)
	return c
}

// leastLoadedOrder is set by requests in flight, ties in random order.
func (v *view) leastLoadedOrder(set []int) []int {
	order := slices.Clone(set)
	// Shuffle first so that the stable sort breaks ties randomly.
	rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(v.inFlight(a), v.inFlight(b)) })
	return order
}

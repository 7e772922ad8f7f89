// Package policy decides which instance serves a request: pure Go over
// plain structs, no net/http and no Kubernetes types, so that every
// strategy is table-tested and benchmarked without a network.
package policy

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

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
	// shareEpoch counts share decays: how long ago an instance joined.
	shareEpoch atomic.Int64
	// pick makes a decision and its charge one step, so that concurrent
	// decisions cannot all read an instance as under the threshold.
	pick sync.Mutex
	// The decision's buffers, reused under pick.
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

// allowed is the configuration in force and its instances allowed to
// serve model.
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
// changes nothing) and then records the decision.
func (p *Policy) Pick(key Key) (*Choice, error) { return p.choose(key, false) }

// PickIfRoom is Pick for a request that may wait (flow control): when
// every available instance that could serve it is at its threshold, it
// records nothing and answers ErrFull instead of overflowing.
func (p *Policy) PickIfRoom(key Key) (*Choice, error) { return p.choose(key, true) }

func (p *Policy) choose(key Key, ifRoom bool) (*Choice, error) {
	p.pick.Lock()
	defer p.pick.Unlock()
	t, allowed, err := p.allowed(key.Model)
	if err != nil {
		return nil, err
	}
	v := p.look(t)
	d := t.strategy(p, v, key, allowed)
	if ifRoom && v.full(d.order[0]) && !slices.ContainsFunc(allowed, func(m int) bool { return v.available(m) && !v.full(m) }) {
		return nil, ErrFull
	}
	d.Strategy = t.Cfg.Strategy
	return p.record(t, key, &d), nil
}

// Room is how many more requests the instances in rotation take before
// each is at its threshold, and capacity how many they take when idle:
// what flow control releases and measures its headroom against.
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

// Eject keeps an instance the transport found failing out of new
// decisions until the deadline, unless every candidate is ejected: the
// policy then fails open rather than refuse traffic over a blip.
func (p *Policy) Eject(id string, until time.Time) {
	p.stats.Get(id).EjectedUntil.Store(until.UnixNano())
}

// Readmit ends an ejection early (a health check passed).
func (p *Policy) Readmit(id string) { p.stats.Get(id).EjectedUntil.Store(0) }

// Healthy reports whether an instance is currently not ejected.
func (p *Policy) Healthy(id string) bool {
	return p.stats.Get(id).EjectedUntil.Load() <= p.tuning.Now().UnixNano()
}

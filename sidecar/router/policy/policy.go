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

	"github.com/warmroute/warmroute/sidecar/router/fleet"
	"github.com/warmroute/warmroute/sidecar/router/popularity"
	"github.com/warmroute/warmroute/sidecar/router/prefixindex"
	"github.com/warmroute/warmroute/sidecar/router/prefixkey"
)

// Errors the transport turns into HTTP statuses.
var (
	ErrUnknownModel = errors.New("model is neither the served model nor a known adapter")
	ErrNoInstance   = errors.New("no instance can serve this model")
)

type member struct {
	Instance
	idHash uint64
	weight float64
	stat   *fleet.Stat
}

type table struct {
	cfg      Config
	strategy strategy
	members  []member
	adapters map[string][]int
	// all are the members that take new keys: every one not draining
	// (every one when all are, rather than refuse traffic while a whole
	// fleet leaves); draining are the others (see warm.go).
	all       []int
	draining  []int
	index     map[string]int // member position by ID
	blockSize int
	// uniform: every member has the same weight, so a key's order is
	// its rendezvous hashes' order and ranking needs no logarithm.
	uniform bool
}

// Policy routes requests under the current configuration. It is safe for
// concurrent use; Update swaps the configuration atomically while decisions
// in progress finish on the one they started with.
type Policy struct {
	tuning     Tuning
	table      atomic.Pointer[table]
	stats      fleet.Registry
	pop        *popularity.Sketch
	index      *prefixindex.Index
	shareSince atomic.Int64
	shareDecay atomic.Bool
	// shareEpoch counts share decays: how long ago an instance joined (see
	// joining).
	shareEpoch atomic.Int64
	// pick makes a decision and its charge one step, so that concurrent
	// decisions cannot all read an instance as under the threshold
	// (TestConcurrentPicksKeepTheThreshold).
	pick sync.Mutex
	// chain, parent and depths are buffers of the decision in progress
	// (block hashes, the anchor's parent set, the depths it records),
	// reused from one decision to the next under pick.
	chain          []uint64
	parent, depths []int
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
	pos := make(map[string]int, len(cfg.Instances))
	t := &table{cfg: cfg, strategy: impl, adapters: make(map[string][]int, len(cfg.Adapters)), index: pos}
	var joined []*fleet.Stat
	for i, in := range cfg.Instances {
		w := float64(max(in.Weight, 1))
		s, fresh := p.stats.Lookup(in.ID)
		if fresh {
			joined = append(joined, s)
		}
		t.members = append(t.members, member{Instance: in, idHash: prefixkey.HashString(cfg.HashSeed, in.ID), weight: w, stat: s})
		pos[in.ID] = i
	}
	t.all, t.draining = t.serving(indexes(len(t.members)))
	t.uniform = !slices.ContainsFunc(t.members, func(m member) bool { return m.weight != t.members[0].weight })
	p.seedShares(t, joined)
	p.startDrains(t, p.table.Load())
	for name, ids := range cfg.Adapters {
		set := make([]int, 0, len(ids))
		for _, id := range ids {
			if i, ok := pos[id]; ok {
				set = append(set, i)
			}
		}
		slices.Sort(set)
		t.adapters[name], _ = t.serving(slices.Compact(set))
	}
	// About 32 blocks a window: fine enough that two prompts sharing most
	// of a window share most of its blocks (a block is at most 3 % of
	// it), few enough to hash and look up in a few microseconds. At least
	// 64 bytes, about 16 tokens: vLLM's KV block, the least it caches, so
	// a finer block would tell apart prefixes its cache does not.
	t.blockSize = max(64, cfg.PrefixLength/32)
	p.table.Store(t)
	p.stats.Prune(pos)
	return nil
}

// serving splits set into the members not draining and the draining
// ones; all of set serves when every member of it drains.
func (t *table) serving(set []int) (serving, draining []int) {
	for _, m := range set {
		if t.members[m].Draining {
			draining = append(draining, m)
		} else {
			serving = append(serving, m)
		}
	}
	if len(serving) == 0 {
		return set, nil
	}
	return serving, draining
}

func indexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// LookaheadBytes is how far past the window the caller should extract text.
func (p *Policy) LookaheadBytes() int { return lookaheadBytes }

// IndexEntries is the number of entries in the prefix index.
func (p *Policy) IndexEntries() int { return p.index.Len() }

// MemoryBytes estimates the memory held by the index and the sketch, both of
// which are bounded by configuration.
func (p *Policy) MemoryBytes() int { return p.index.Len()*prefixindex.EntryBytes + p.pop.Bytes() }

// InFlight returns the number of requests decided here in flight to an
// instance.
func (p *Policy) InFlight(id string) int64 { return p.stats.Get(id).InFlight.Load() }

// PrefillTokens returns the prompt tokens the requests decided here are
// estimated to leave an instance to prefill.
func (p *Policy) PrefillTokens(id string) int64 { return p.stats.Get(id).Prefill.Load() }

// Instances returns the configured instances.
func (p *Policy) Instances() []Instance {
	t := p.table.Load()
	if t == nil {
		return nil
	}
	return t.cfg.Instances
}

// allowed is the configuration in force and the instances of it allowed
// to serve model.
func (p *Policy) allowed(model string) (*table, []int, error) {
	t := p.table.Load()
	if t == nil {
		return nil, nil, ErrNoInstance
	}
	set, err := t.candidates(model)
	return t, set, err
}

// candidates resolves the model to the instances allowed to serve it.
func (t *table) candidates(model string) ([]int, error) {
	if model == "" || model == t.cfg.Model {
		if len(t.all) == 0 {
			return nil, ErrNoInstance
		}
		return t.all, nil
	}
	set, ok := t.adapters[model]
	if !ok {
		return nil, ErrUnknownModel
	}
	if len(set) == 0 {
		return nil, ErrNoInstance
	}
	return set, nil
}

// Pick decides where a request goes (the strategy's decide, which
// changes nothing) and then records the decision (record). Decisions run
// one at a time (see Policy.pick).
func (p *Policy) Pick(key Key) (*Choice, error) {
	p.pick.Lock()
	defer p.pick.Unlock()
	t, allowed, err := p.allowed(key.Model)
	if err != nil {
		return nil, err
	}
	d := t.strategy.decide(p, t, key, allowed)
	d.Strategy = t.cfg.Strategy
	return p.record(t, key, &d), nil
}

// record makes a decision happen: the request counts in flight and in the
// shares on its instance, and the policy learns the popularity of its
// blocks and where its key now lives.
func (p *Policy) record(t *table, key Key, d *decision) *Choice {
	c := &Choice{t: t, order: d.order, unranked: d.unranked, prompt: p.tokensOf(key.PromptBytes), Decision: d.Decision}
	// The prefill expected on the chosen instance: what of the prompt it is
	// not expected to hold. Strategies that do not match prefixes know
	// nothing of the cache and charge the whole prompt.
	c.prefill = c.prompt - int64(float64(c.prompt)*d.hit)
	c.charge()
	p.countShare(t, c.order[0])
	p.learn(&d.learning)
	p.recordWarm(t, c, d.warm-1, d.learning, d.warmVer)
	return c
}

func (p *Policy) leastLoadedOrder(t *table, set []int) []int {
	order := slices.Clone(set)
	// Shuffle first so that the stable sort breaks ties randomly.
	rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(inFlight(t.members[a].stat), inFlight(t.members[b].stat))
	})
	return order
}

// leastLoaded is the position in order of the available instance with the
// fewest in flight (the first such on ties, so ties follow the key's order);
// if none is available, of any instance.
func (p *Policy) leastLoaded(t *table, order []int) int {
	best := -1
	for _, onlyAvailable := range []bool{true, false} {
		for i, m := range order {
			if onlyAvailable && !p.available(t, m) {
				continue
			}
			if best < 0 || inFlight(t.members[m].stat) < inFlight(t.members[order[best]].stat) {
				best = i
			}
		}
		if best >= 0 {
			return best
		}
	}
	return 0
}

package policy

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Spill reasons, as counted in metrics.
const (
	SpillNone        = ""
	SpillConcurrency = "concurrency_threshold" // preferred over the threshold, walked its order
	SpillAllBusy     = "all_busy"              // nobody under threshold and cap: least loaded
	SpillTokens      = "token_load"            // preferred far above the average token load
	SpillUnhealthy   = "unhealthy"             // preferred instance ejected by health checks
)

// Key move reasons, as counted in metrics: why PREFIX_AWARE placed a key
// its prefix index knew off the instance the index held it on (see
// sticky). Each move costs the key a cold prefill.
const (
	MoveNone       = ""
	MoveShare      = "share"       // its instance's share was over MoveSlack × the average
	MoveJoining    = "joining"     // its first choice joined the fleet lately
	MoveHolderLeft = "holder_left" // its instance left its set; back to the one before
)

// Errors the transport turns into HTTP statuses.
var (
	ErrUnknownModel = errors.New("model is neither the served model nor a known adapter")
	ErrNoInstance   = errors.New("no instance can serve this model")
)

// Instance is one backend as the policy sees it.
type Instance struct {
	ID      string
	Address string
	Weight  int // 0 means 1
}

// Config is the part of the routing document the policy needs.
type Config struct {
	Strategy             Strategy
	Model                string
	HashSeed             uint64
	PrefixLength         int // characters (OpenAI) or bytes (/invocations)
	ConcurrencyThreshold int
	Instances            []Instance
	// Adapters maps an adapter name to the IDs of the instances where it is
	// loaded; its requests go only there.
	Adapters map[string][]string
}

// Tuning holds the router's own knobs (flags, not the routing document).
// Zero values take the defaults of DefaultTuning.
type Tuning struct {
	// BlockSize is the size in bytes of a hashed block; 0 derives it from
	// the prefix length (prefixLength/32, at least 64), so a window is
	// always about 32 blocks.
	BlockSize int
	// LookaheadBytes is how far past the window the policy may read when
	// every block of the window is shared by a dominant fraction of the
	// traffic (a long common system prompt), to find what tells requests
	// apart. 0 uses the default; negative disables it.
	LookaheadBytes int
	// BalanceFactor is the bounded-load cap on in-flight requests, as a
	// multiple of the average (HAProxy's hash-balance-factor/100).
	BalanceFactor float64
	// ReplicaLoad is the largest fraction of one instance's fair share of
	// traffic that a single prefix may bring to one instance; a hotter
	// prefix is deliberately served by ⌈fraction×N/ReplicaLoad⌉ instances.
	ReplicaLoad float64
	// ShareSlack bounds where a new key may be placed: an instance whose
	// recent request share exceeds ShareSlack × the average of the
	// candidates is passed over for the next one in the key's order.
	ShareSlack float64
	// MoveSlack is when a key already placed is moved: its instance's
	// recent share is over MoveSlack × the average of the candidates (and
	// over the average + 8 decisions, see stickySlack). Each move costs a
	// cold prefill: on the benchmark's long-context workload (7 instances,
	// 128 contexts of 8,000 tokens) 1.08 brought the busiest instance's
	// share from 1.14 to 1.09 × the average for 1.6 points of hit rate.
	MoveSlack float64
	// IndexEntries bounds the prefix index (entries; ~48 bytes each).
	IndexEntries int
	// SketchWidth is the width of the popularity sketch (counters per row).
	SketchWidth int
	// DecayEvery is how many decisions between halvings of the popularity
	// and share counts: the memory of the policy, in requests.
	DecayEvery int64
	// BytesPerToken converts prompt text bytes into estimated tokens.
	BytesPerToken float64
	// DecodeTokens is the load, in prefill-token equivalents, of one
	// request in flight (decoding, or waiting to): an instance's token load
	// is its unprefilled prompt tokens plus DecodeTokens per request.
	DecodeTokens int64
	// TokenBalance is when the preferred instance counts as overloaded by
	// tokens: its token load is over TokenBalance × the candidates' average
	// (and over TokenFloor). It is also how much lighter (as a ratio) the
	// second HRW choice must be to take a new key from the first. At 1.5
	// the guard spilled long prompts cold too readily: on the Mooncake
	// trace (one router) 2 raised the hit rate from 20.2 to 21.0-21.2 %
	// (the pooled oracle: 21.9 %) and token spills fell by about a third,
	// with TTFT p90 unchanged (2.06 s); on the five generated workloads hit
	// rates moved by −0.6 to +0.9 points and p90 by −19 to +0 %.
	TokenBalance float64
	// TokenFloor is the token load under which an instance never counts as
	// overloaded, so that a lightly loaded fleet never spills (about one
	// engine step's token budget).
	TokenFloor int64
	// BenchmarkStrategies accepts the benchmark-only strategies (Baseline),
	// for the router's --strategy-override.
	BenchmarkStrategies bool
	// Now is the clock used for ejection deadlines (tests replace it).
	Now func() time.Time
}

// DefaultTuning returns the defaults.
func DefaultTuning() Tuning {
	return Tuning{
		LookaheadBytes: 32768,
		BalanceFactor:  1.25,
		ReplicaLoad:    0.75,
		ShareSlack:     1.05,
		MoveSlack:      1.08,
		IndexEntries:   1 << 18,
		SketchWidth:    1 << 16,
		DecayEvery:     4096,
		BytesPerToken:  4,
		DecodeTokens:   256,
		TokenBalance:   2,
		TokenFloor:     8192,
		Now:            time.Now,
	}
}

func (t Tuning) withDefaults() Tuning {
	d := DefaultTuning()
	t.LookaheadBytes = max(cmp.Or(t.LookaheadBytes, d.LookaheadBytes), 0)
	t.BalanceFactor = above(t.BalanceFactor, 1, d.BalanceFactor)
	t.ReplicaLoad = above(t.ReplicaLoad, 0, d.ReplicaLoad)
	// A negative ShareSlack is kept: it turns share balancing off.
	t.ShareSlack = cmp.Or(t.ShareSlack, d.ShareSlack)
	t.MoveSlack = cmp.Or(t.MoveSlack, max(d.MoveSlack, t.ShareSlack))
	t.IndexEntries = above(t.IndexEntries, 0, d.IndexEntries)
	t.SketchWidth = above(t.SketchWidth, 0, d.SketchWidth)
	t.DecayEvery = above(t.DecayEvery, 0, d.DecayEvery)
	t.BytesPerToken = above(t.BytesPerToken, 0, d.BytesPerToken)
	t.DecodeTokens = above(t.DecodeTokens, 0, d.DecodeTokens)
	t.TokenBalance = above(t.TokenBalance, 1, d.TokenBalance)
	t.TokenFloor = above(t.TokenFloor, 0, d.TokenFloor)
	if t.Now == nil {
		t.Now = d.Now
	}
	return t
}

// above returns the default d when v is at or under bound (a knob unset,
// or meaningless: a balance factor of 1 or less caps below the average),
// else v.
func above[T cmp.Ordered](v, bound, d T) T {
	if v <= bound {
		return d
	}
	return v
}

// Request is what the policy knows of a request.
type Request struct {
	// Model is the "model" the client asked for; "" means the served model.
	Model string
	// Tenant isolates identical prompts of different tenants.
	Tenant string
	// Text is the routing text: the window (first prefixLength characters
	// or bytes) followed by up to the lookahead.
	Text []byte
	// WindowBytes is how many bytes of Text form the window.
	WindowBytes int
	// PromptBytes is the length of the whole prompt text, which the routing
	// text may stop short of; 0 means len(Text). It sizes the request's
	// prefill in the token load.
	PromptBytes int
}

func (p *Policy) tokensOf(bytes int) int64 {
	return int64(math.Ceil(float64(bytes) / p.tuning.BytesPerToken))
}

type member struct {
	Instance
	idHash uint64
	weight float64
	stat   *stat
}

type table struct {
	cfg       Config
	strategy  strategy
	members   []member
	adapters  map[string][]int
	all       []int
	index     map[string]int // member position by ID
	blockSize int
}

// Policy routes requests under the current configuration. It is safe for
// concurrent use; Update swaps the configuration atomically while decisions
// in progress finish on the one they started with.
type Policy struct {
	tuning     Tuning
	table      atomic.Pointer[table]
	stats      statRegistry
	pop        *popularity
	index      *prefixIndex
	shareSince atomic.Int64
	shareDecay atomic.Bool
	// shareEpoch counts share decays: how long ago an instance joined (see
	// joining).
	shareEpoch atomic.Int64
	// pick makes a decision and its charge one step: without it, requests
	// decided at the same moment all read an instance's count as under the
	// threshold and all charge it (TestConcurrentPicksKeepTheThreshold:
	// T + 1 on one instance of a fleet filled exactly to T).
	pick sync.Mutex
	// chain, parent and depths are buffers of the decision in progress
	// (block hashes, the anchor's parent set, the depths it records),
	// reused from one decision to the next under pick.
	chain          []uint64
	parent, depths []int
	// learnt is what the decision in progress teaches the policy, which
	// Pick records after it (see learn).
	learnt learning
}

// New returns a policy with no instances; call Update before Pick.
func New(t Tuning) *Policy {
	t = t.withDefaults()
	p := &Policy{
		tuning: t,
		pop:    newPopularity(t.SketchWidth, t.DecayEvery),
		index:  newPrefixIndex(t.IndexEntries),
	}
	return p
}

// Update installs a new configuration. Live counters follow instances by ID.
func (p *Policy) Update(cfg Config) error {
	impl, err := p.lookup(cfg.Strategy)
	if err != nil {
		return fmt.Errorf("strategy: %w", err)
	}
	t := &table{cfg: cfg, strategy: impl, adapters: make(map[string][]int, len(cfg.Adapters))}
	pos := make(map[string]int, len(cfg.Instances))
	var joined []*stat
	for i, in := range cfg.Instances {
		w := float64(max(in.Weight, 1))
		s, fresh := p.stats.lookup(in.ID)
		if fresh {
			joined = append(joined, s)
		}
		t.members = append(t.members, member{Instance: in, idHash: hashString(cfg.HashSeed, in.ID), weight: w, stat: s})
		t.all = append(t.all, i)
		pos[in.ID] = i
	}
	p.seedShares(t, joined)
	for name, ids := range cfg.Adapters {
		set := make([]int, 0, len(ids))
		for _, id := range ids {
			if i, ok := pos[id]; ok {
				set = append(set, i)
			}
		}
		slices.Sort(set)
		t.adapters[name] = slices.Compact(set)
	}
	t.index = pos
	t.blockSize = above(p.tuning.BlockSize, 0, max(64, cfg.PrefixLength/32))
	p.table.Store(t)
	p.stats.prune(pos)
	return nil
}

// LookaheadBytes is how far past the window the caller should extract text.
func (p *Policy) LookaheadBytes() int { return p.tuning.LookaheadBytes }

// IndexEntries is the number of entries in the prefix index.
func (p *Policy) IndexEntries() int { return p.index.Len() }

// MemoryBytes estimates the memory held by the index and the sketch, both of
// which are bounded by configuration.
func (p *Policy) MemoryBytes() int { return p.index.Len()*48 + p.pop.Bytes() }

// Eject keeps an instance out of new decisions until the deadline, unless
// every candidate is ejected (then the policy fails open rather than refuse
// traffic because of a blip).
func (p *Policy) Eject(id string, until time.Time) {
	p.stats.get(id).ejectedUntil.Store(until.UnixNano())
}

// Readmit ends an ejection early (a health check passed).
func (p *Policy) Readmit(id string) { p.stats.get(id).ejectedUntil.Store(0) }

// InFlight returns the number of requests decided here in flight to an
// instance.
func (p *Policy) InFlight(id string) int64 { return p.stats.get(id).inFlight.Load() }

// PrefillTokens returns the prompt tokens the requests decided here are
// estimated to leave an instance to prefill.
func (p *Policy) PrefillTokens(id string) int64 { return p.stats.get(id).prefill.Load() }

// Instances returns the configured instances.
func (p *Policy) Instances() []Instance {
	t := p.table.Load()
	if t == nil {
		return nil
	}
	return t.cfg.Instances
}

// Healthy reports whether an instance is currently not ejected.
func (p *Policy) Healthy(id string) bool {
	return p.stats.get(id).ejectedUntil.Load() <= p.tuning.Now().UnixNano()
}

// Choice is the outcome of a decision: the instance to use first and the
// order to fall back along after connection failures. The chosen instance
// is counted in flight until Done, and its estimated prefill in its token
// load until Prefilled (or Done).
type Choice struct {
	t     *table
	order []int
	pos   int
	// prefill is the token load charged to the current instance.
	prefill int64
	// prompt is the request's whole prompt in tokens: what a fallback
	// instance, not expected to hold any of it, is charged.
	prompt int64
	// hit is the fraction of the prompt the chosen instance is expected to
	// hold (0 for strategies that do not match prefixes).
	hit       float64
	prefilled atomic.Bool
	done      atomic.Bool
	// placed is the member the strategy chose before the overload guard
	// (-1: the first of order, for strategies without a guard).
	placed int

	Decision
}

// Decision is what a decision says of itself, for metrics and logs.
type Decision struct {
	Strategy Strategy
	// Spill is why the preferred instance was not used ("" if it was).
	Spill string
	// AnchorDepth is the block depth that placed the request (PREFIX_AWARE).
	AnchorDepth int
	// ColdPlaced says a new key with a long prompt was placed where its
	// prefill would finish first rather than on its first choice
	// (PREFIX_AWARE, see coldPlacement).
	ColdPlaced bool
	// Moved says why a key the prefix index knew left the instance the
	// index held it on (PREFIX_AWARE, one of the Move reasons); MoveNone
	// when it stayed, was new, or the guard spilled the request (the index
	// then keeps the key where it was, but for a long prompt cold there:
	// see remembersSpill).
	Moved string
	// MatchChars estimates how much of the routing text the chosen
	// instance has recently been sent.
	MatchChars int
}

// Instance is the current target.
func (c *Choice) Instance() Instance { return c.t.members[c.order[c.pos]].Instance }

func (c *Choice) stat() *stat { return c.t.members[c.order[c.pos]].stat }

// Next moves to the next instance of the preference order after a failure
// before any byte was exchanged; false when the order is exhausted.
func (c *Choice) Next() bool {
	if c.done.Load() || c.pos+1 >= len(c.order) {
		return false
	}
	c.release()
	c.pos++
	c.prefill = c.prompt
	c.charge()
	return true
}

// Prefilled says the instance has prefilled the prompt (the first token,
// or the whole non-streamed response, arrived): the request leaves the
// instance's prefill load and counts as decoding until Done.
func (c *Choice) Prefilled() {
	if !c.done.Load() && !c.prefilled.Swap(true) {
		c.stat().prefill.Add(-c.prefill)
	}
}

// Done releases the in-flight slot; calling it twice is harmless.
func (c *Choice) Done() {
	if !c.done.Swap(true) {
		c.release()
	}
}

func (c *Choice) charge() {
	s := c.stat()
	s.inFlight.Add(1)
	if !c.prefilled.Load() {
		s.prefill.Add(c.prefill)
	}
}

func (c *Choice) release() {
	s := c.stat()
	s.inFlight.Add(-1)
	if !c.prefilled.Load() {
		s.prefill.Add(-c.prefill)
	}
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

// healthy drops ejected instances, failing open when none is left.
func (p *Policy) healthy(t *table, set []int) []int {
	now := p.tuning.Now().UnixNano()
	out := make([]int, 0, len(set))
	for _, i := range set {
		if t.members[i].stat.ejectedUntil.Load() <= now {
			out = append(out, i)
		}
	}
	if len(out) == 0 {
		return append(out, set...)
	}
	return out
}

// Pick decides where a request goes, counts it in flight there, and then
// records what the decision teaches the policy (popularity, placement).
// Decisions run one at a time (see Policy.pick).
func (p *Policy) Pick(key Key) (*Choice, error) {
	p.pick.Lock()
	defer p.pick.Unlock()
	t, allowed, err := p.allowed(key.Model)
	if err != nil {
		return nil, err
	}
	c := &Choice{t: t, placed: -1, Decision: Decision{Strategy: t.cfg.Strategy}}
	p.learnt = learning{}
	t.strategy.decide(p, t, key, allowed, c)
	c.prompt = p.tokensOf(key.PromptBytes)
	// The prefill expected on the chosen instance: what of the prompt it is
	// not expected to hold. Strategies that do not match prefixes know
	// nothing of the cache and charge the whole prompt.
	c.prefill = c.prompt - int64(float64(c.prompt)*c.hit)
	c.charge()
	p.countShare(t, c.order[0])
	p.learn(c)
	return c, nil
}

func (p *Policy) leastLoadedOrder(t *table, set []int) []int {
	order := slices.Clone(set)
	// Shuffle first so that the stable sort breaks ties randomly.
	rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(p.requests(t.members[a].stat), p.requests(t.members[b].stat))
	})
	return order
}

// available reports whether an instance is not ejected.
func (p *Policy) available(t *table, i int) bool {
	return t.members[i].stat.ejectedUntil.Load() <= p.tuning.Now().UnixNano()
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
			// Live counts (own now, peers as reported): every decision
			// made since the last report counts, so that a burst of
			// overflow does not pile onto the one instance that looked
			// least loaded when the report was made.
			if best < 0 || p.requests(t.members[m].stat) < p.requests(t.members[order[best]].stat) {
				best = i
			}
		}
		if best >= 0 {
			return best
		}
	}
	return 0
}

// seedShares starts instances that joined a running fleet at the average
// share of the others, as if they had always been there, and marks them
// joining. Shares are counts of past decisions: a newcomer at zero would sit
// far below the average for as long as the counts remember (DecayEvery),
// so every key with it among its first choices would be moved to it or
// placed on it (up to twice its fair part of the keys), and the instances
// it relieves would look over-share next to it. Seeded, it takes the new
// keys whose first choice it is and, while joining, the known keys whose
// first choice it is (see sticky): the keys plain rendezvous hashing would
// move, and no others.
func (p *Policy) seedShares(t *table, joined []*stat) {
	if len(joined) == 0 || len(joined) == len(t.members) {
		return
	}
	var share int64
	for _, m := range t.members {
		if !slices.Contains(joined, m.stat) {
			share += m.stat.share.Load()
		}
	}
	n := int64(len(t.members) - len(joined))
	epoch := p.shareEpoch.Load()
	for _, s := range joined {
		s.share.Store(share / n)
		s.joined.Store(epoch + 1)
	}
}

// joining reports whether the instance joined the fleet recently: in the
// share decay cycle it joined in or the next one, so for DecayEvery to
// twice that decisions, long enough for the keys that are its first choice
// to come back once.
func (p *Policy) joining(s *stat) bool {
	j := s.joined.Load()
	return j > 0 && p.shareEpoch.Load() < j+1
}

// countShare adds a decision to the chosen instance's decayed share.
func (p *Policy) countShare(t *table, chosen int) {
	t.members[chosen].stat.share.Add(1)
	if p.shareSince.Add(1) >= p.tuning.DecayEvery && p.shareDecay.CompareAndSwap(false, true) {
		p.shareSince.Store(0)
		for _, m := range t.members {
			m.stat.share.Store(m.stat.share.Load() / 2)
		}
		p.shareEpoch.Add(1)
		p.shareDecay.Store(false)
	}
}

// capOf is ⌈f × total / n⌉, the bounded-load cap.
func capOf(f float64, total int64, n int) int64 {
	return int64(math.Ceil(f * float64(total) / float64(n)))
}

package policy

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"
)

// Strategy names a routing strategy.
type Strategy string

const (
	Random                   Strategy = "RANDOM"
	LeastOutstandingRequests Strategy = "LEAST_OUTSTANDING_REQUESTS"
	PrefixAware              Strategy = "PREFIX_AWARE"
	// Baseline is the comparison point for benchmarks, not offered by the
	// CRD: one hash of the first prefixLength, consistent (HRW) placement,
	// overflow to the least loaded instance when over the threshold. It is
	// what a router without block matching or a load-aware walk would do.
	Baseline Strategy = "SAGEMAKER_BASELINE"
)

// Valid reports whether the policy implements s.
func (s Strategy) Valid() bool {
	switch s {
	case Random, LeastOutstandingRequests, PrefixAware, Baseline:
		return true
	}
	return false
}

// Spill reasons, as counted in metrics.
const (
	SpillNone        = ""
	SpillConcurrency = "concurrency_threshold" // preferred over the threshold, walked its order
	SpillAllBusy     = "all_busy"              // nobody under threshold and cap: least loaded
	SpillUnhealthy   = "unhealthy"             // preferred instance ejected by health checks
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
	// recent share is over MoveSlack × the average of the candidates.
	MoveSlack float64
	// IndexEntries bounds the prefix index (entries; ~48 bytes each).
	IndexEntries int
	// SketchWidth is the width of the popularity sketch (counters per row).
	SketchWidth int
	// DecayEvery is how many decisions between halvings of the popularity
	// and share counts: the memory of the policy, in requests.
	DecayEvery int64
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
		MoveSlack:      1.10,
		IndexEntries:   1 << 18,
		SketchWidth:    1 << 16,
		DecayEvery:     4096,
		Now:            time.Now,
	}
}

func (t Tuning) withDefaults() Tuning {
	d := DefaultTuning()
	if t.LookaheadBytes == 0 {
		t.LookaheadBytes = d.LookaheadBytes
	}
	if t.LookaheadBytes < 0 {
		t.LookaheadBytes = 0
	}
	if t.BalanceFactor <= 1 {
		t.BalanceFactor = d.BalanceFactor
	}
	if t.ReplicaLoad <= 0 {
		t.ReplicaLoad = d.ReplicaLoad
	}
	if t.ShareSlack == 0 {
		t.ShareSlack = d.ShareSlack
	}
	if t.MoveSlack == 0 {
		t.MoveSlack = max(d.MoveSlack, t.ShareSlack)
	}
	if t.IndexEntries <= 0 {
		t.IndexEntries = d.IndexEntries
	}
	if t.SketchWidth <= 0 {
		t.SketchWidth = d.SketchWidth
	}
	if t.DecayEvery <= 0 {
		t.DecayEvery = d.DecayEvery
	}
	if t.Now == nil {
		t.Now = d.Now
	}
	return t
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
}

type member struct {
	Instance
	idHash uint64
	weight float64
	stat   *Stat
}

type table struct {
	cfg       Config
	members   []member
	adapters  map[string][]int
	all       []int
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
}

// New returns a policy with no instances; call Update before Pick.
func New(t Tuning) *Policy {
	t = t.withDefaults()
	return &Policy{
		tuning: t,
		pop:    newPopularity(t.SketchWidth, t.DecayEvery),
		index:  newPrefixIndex(t.IndexEntries),
	}
}

// Update installs a new configuration. Live counters follow instances by ID.
func (p *Policy) Update(cfg Config) error {
	if !cfg.Strategy.Valid() {
		return fmt.Errorf("strategy %q is not implemented", cfg.Strategy)
	}
	t := &table{cfg: cfg, adapters: make(map[string][]int, len(cfg.Adapters))}
	pos := make(map[string]int, len(cfg.Instances))
	keep := make(map[string]bool, len(cfg.Instances))
	for i, in := range cfg.Instances {
		w := float64(max(in.Weight, 1))
		t.members = append(t.members, member{Instance: in, idHash: hashString(cfg.HashSeed, in.ID), weight: w, stat: p.stats.get(in.ID)})
		t.all = append(t.all, i)
		pos[in.ID] = i
		keep[in.ID] = true
	}
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
	t.blockSize = p.tuning.BlockSize
	if t.blockSize <= 0 {
		t.blockSize = max(64, cfg.PrefixLength/32)
	}
	p.table.Store(t)
	p.stats.prune(keep)
	return nil
}

// Strategy is the strategy in force.
func (p *Policy) Strategy() Strategy {
	if t := p.table.Load(); t != nil {
		return t.cfg.Strategy
	}
	return ""
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

// InFlight returns the in-flight count of an instance.
func (p *Policy) InFlight(id string) int64 { return p.stats.get(id).InFlight() }

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
// is counted in flight until Done.
type Choice struct {
	t     *table
	order []int
	pos   int
	done  bool

	Strategy Strategy
	// Spill is why the preferred instance was not used ("" if it was).
	Spill string
	// AnchorDepth is the block depth that placed the request (PREFIX_AWARE).
	AnchorDepth int
	// MatchChars estimates how much of the routing text the chosen
	// instance has recently been sent.
	MatchChars int
}

// Instance is the current target.
func (c *Choice) Instance() Instance { return c.t.members[c.order[c.pos]].Instance }

// Next moves to the next instance of the preference order after a failure
// before any byte was exchanged; false when the order is exhausted.
func (c *Choice) Next() bool {
	if c.done || c.pos+1 >= len(c.order) {
		return false
	}
	c.t.members[c.order[c.pos]].stat.inFlight.Add(-1)
	c.pos++
	c.t.members[c.order[c.pos]].stat.inFlight.Add(1)
	return true
}

// Done releases the in-flight slot; calling it twice is harmless.
func (c *Choice) Done() {
	if !c.done {
		c.done = true
		c.t.members[c.order[c.pos]].stat.inFlight.Add(-1)
	}
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

// Pick decides where a request goes and counts it in flight there.
func (p *Policy) Pick(req Request) (*Choice, error) {
	t := p.table.Load()
	if t == nil {
		return nil, ErrNoInstance
	}
	allowed, err := t.candidates(req.Model)
	if err != nil {
		return nil, err
	}
	c := &Choice{t: t, Strategy: t.cfg.Strategy}
	switch t.cfg.Strategy {
	case Random:
		c.order = p.healthy(t, allowed)
		rand.Shuffle(len(c.order), func(i, j int) { c.order[i], c.order[j] = c.order[j], c.order[i] })
	case LeastOutstandingRequests:
		c.order = p.leastLoadedOrder(t, p.healthy(t, allowed))
	case Baseline:
		c.order, c.Spill = p.baseline(t, req, allowed)
	default:
		p.prefixAware(t, req, allowed, c)
	}
	t.members[c.order[0]].stat.inFlight.Add(1)
	p.countShare(t, c.order[0])
	return c, nil
}

func (p *Policy) leastLoadedOrder(t *table, set []int) []int {
	order := slices.Clone(set)
	// Shuffle first so that the stable sort breaks ties randomly.
	rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	slices.SortStableFunc(order, func(a, b int) int {
		return int(t.members[a].stat.inFlight.Load() - t.members[b].stat.inFlight.Load())
	})
	return order
}

// baseline is one hash of the whole window, HRW placement, and overflow to
// the least loaded instance anywhere.
func (p *Policy) baseline(t *table, req Request, set []int) ([]int, string) {
	seed := ScopeSeed(t.cfg.HashSeed, req.Model, req.Tenant)
	key := seed
	if w := min(req.WindowBytes, len(req.Text)); w > 0 {
		var buf [1]uint64
		key = BlockChain(buf[:0], seed, req.Text[:w], w)[0]
	}
	order := rank(t, set, key, nil)
	first := order[0]
	if p.available(t, first) && t.members[first].stat.inFlight.Load() < int64(t.cfg.ConcurrencyThreshold) {
		return order, SpillNone
	}
	best := p.leastLoaded(t, order)
	if best == 0 {
		return order, SpillNone
	}
	order[0], order[best] = order[best], order[0]
	if !p.available(t, first) {
		return order, SpillUnhealthy
	}
	return order, SpillAllBusy
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
			if best < 0 || t.members[m].stat.inFlight.Load() < t.members[order[best]].stat.inFlight.Load() {
				best = i
			}
		}
		if best >= 0 {
			return best
		}
	}
	return 0
}

// rank returns set ordered by descending HRW score of key (the key's
// preference order), reusing out's storage.
func rank(t *table, set []int, key uint64, out []int) []int {
	out = append(out[:0], set...)
	var stack [32]float64
	scores := stack[:0]
	if len(set) > len(stack) {
		scores = make([]float64, 0, len(set))
	}
	for _, i := range out {
		scores = append(scores, hrwScore(key, t.members[i].idHash, t.members[i].weight))
	}
	// Insertion sort: sets are a handful of instances.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && (scores[j] > scores[j-1] || scores[j] == scores[j-1] && out[j] < out[j-1]); j-- {
			scores[j], scores[j-1] = scores[j-1], scores[j]
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// countShare adds a decision to the chosen instance's decayed share.
func (p *Policy) countShare(t *table, chosen int) {
	t.members[chosen].stat.share.Add(1)
	if p.shareSince.Add(1) >= p.tuning.DecayEvery && p.shareDecay.CompareAndSwap(false, true) {
		p.shareSince.Store(0)
		for _, m := range t.members {
			m.stat.share.Store(m.stat.share.Load() / 2)
		}
		p.shareDecay.Store(false)
	}
}

// capOf is ⌈f × total / n⌉, the bounded-load cap.
func capOf(f float64, total int64, n int) int64 {
	return int64(math.Ceil(f * float64(total) / float64(n)))
}

// PickAny chooses an instance for a request that carries no prompt (such as
// listing models): the least loaded healthy instance, the others after it
// for retries. It leaves the prefix state untouched.
func (p *Policy) PickAny() (*Choice, error) {
	t := p.table.Load()
	if t == nil || len(t.all) == 0 {
		return nil, ErrNoInstance
	}
	c := &Choice{t: t, Strategy: t.cfg.Strategy, order: p.leastLoadedOrder(t, p.healthy(t, t.all))}
	t.members[c.order[0]].stat.inFlight.Add(1)
	return c, nil
}

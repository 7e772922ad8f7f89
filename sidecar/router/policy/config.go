package policy

import (
	"cmp"
	"math"
	"time"
)

// What the policy is given: the routing document's part (Config), the
// router's own tuning (Tuning) and each request (Request).

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
	// BenchmarkStrategies accepts the benchmark-only strategies (Baseline,
	// in builds with the benchstrategies tag), for the router's
	// --strategy-override (in the same builds).
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

package policy

import (
	"sync/atomic"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

// Spill reasons, as counted in metrics.
const (
	SpillNone        = ""
	SpillConcurrency = "concurrency_threshold" // preferred over the threshold, walked its order
	SpillAllBusy     = "all_busy"              // nobody under threshold and cap: least loaded
	SpillTokens      = "token_load"            // another instance under the threshold clearly cheaper
	SpillUnhealthy   = "unhealthy"             // preferred instance ejected by health checks
)

// Key move reasons, as counted in metrics: why PREFIX_AWARE placed a key
// its prefix index knew off its holder (see sticky), a cold prefill.
const (
	MoveNone       = ""
	MoveShare      = "share"       // its instance's share was over moveSlack × the average
	MoveJoining    = "joining"     // its first choice joined the fleet lately
	MoveHolderLeft = "holder_left" // its instance left its set; back to the one before
)

// Choice is the outcome of a decision: the instance to use first and the
// order to fall back along after connection failures. The chosen instance
// is counted in flight until Done, and its estimated prefill in its token
// load until Prefilled (or Done).
type Choice struct {
	t        *table
	order    []int
	unranked unrankedTail
	pos      int
	prefill  int64 // the token load charged to the current instance
	// prompt is the request's whole prompt in tokens: what a fallback
	// instance, not expected to hold any of it, is charged.
	prompt          int64
	prefilled, done atomic.Bool
	Warm            *warmCopy // the warm copy to send (nil: none)
	settled         atomic.Bool

	Decision
}

// Decision is what a decision says of itself, for metrics and logs.
type Decision struct {
	Strategy    routing.Strategy
	Spill       string // why the preferred instance was not used ("" if it was)
	AnchorDepth int32  // the block depth that placed the request
	// ColdPlaced says a new key with a long prompt was placed where its
	// prefill would finish first rather than on its first choice.
	ColdPlaced bool
	// Moved says why a key left its holder (a Move reason; "" when it
	// stayed, was new, or was spilled).
	Moved string
	// MatchChars estimates how much of the routing text the chosen
	// instance has recently been sent.
	MatchChars int
}

// warmCopy is a one-token copy of the request for another member, to warm
// its cache before the request's key moves there.
type warmCopy struct {
	member int
	Tokens int64         // the prompt tokens it is charged
	Settle func(ok bool) // records the copy's outcome, once (Warmed)
}

// newChoice charges a decision to order[0]: the prefill it leaves there
// (prefilled: the first token has already come).
func newChoice(t *table, order []int, u unrankedTail, prompt, prefill int64, prefilled bool, d Decision) *Choice {
	c := &Choice{t: t, order: order, unranked: u, prompt: prompt, prefill: prefill, Decision: d}
	c.prefilled.Store(prefilled)
	c.charge()
	return c
}

// Instance is the current target.
func (c *Choice) Instance() Instance { return c.t.Members[c.order[c.pos]].Instance }

func (c *Choice) stat() *counters { return c.t.Members[c.order[c.pos]].Stat }

// Next moves to the next instance of the order after a failure before
// any byte was exchanged; false when the order is exhausted.
func (c *Choice) Next() bool {
	if c.done.Load() || c.pos+1 >= len(c.order) {
		return false
	}
	if c.pos+1 >= len(c.order)-c.unranked.N {
		c.unranked.rank(c.t, c.order)
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
		c.stat().Prefill.Add(-c.prefill)
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
	s.InFlight.Add(1)
	if !c.prefilled.Load() {
		s.Prefill.Add(c.prefill)
	}
}

func (c *Choice) release() {
	s := c.stat()
	s.InFlight.Add(-1)
	if !c.prefilled.Load() {
		s.Prefill.Add(-c.prefill)
	}
}

// Order is the instances of the choice in the order they are tried, the
// current one first, at most limit of them (all when limit ≤ 0).
func (c *Choice) Order(limit int) []string {
	order := c.order[c.pos:]
	if limit > 0 && len(order) > limit {
		order = order[:limit]
	}
	if c.pos+len(order) > len(c.order)-c.unranked.N {
		c.unranked.rank(c.t, c.order)
	}
	out := make([]string, 0, len(order))
	for _, m := range order {
		out = append(out, c.t.Members[m].ID)
	}
	return out
}

// Charge is the prompt, the prefill still expected of the current
// instance, and whether the first token came.
func (c *Choice) Charge() (prompt, prefill int64, prefilled bool) {
	return c.prompt, c.prefill, c.prefilled.Load()
}

// WarmTarget is the instance to send a one-token copy of the request to,
// and the prompt tokens it is charged; false when none.
func (c *Choice) WarmTarget() (Instance, int64, bool) {
	if c.Warm == nil {
		return Instance{}, 0, false
	}
	return c.t.Members[c.Warm.member].Instance, c.Warm.Tokens, true
}

// Warmed settles the warm copy; only the first call counts.
func (c *Choice) Warmed(ok bool) {
	if c.Warm != nil && !c.settled.Swap(true) {
		c.Warm.Settle(ok)
	}
}

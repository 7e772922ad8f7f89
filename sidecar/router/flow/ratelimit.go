package flow

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// Window is one rate limit's state as OpenAI's x-ratelimit-* headers carry
// it. A zero Limit is no limit.
type Window struct {
	Limit     int64         // per minute (x-ratelimit-limit-*)
	Remaining int64         // now (x-ratelimit-remaining-*)
	Reset     time.Duration // until the limit is whole again (x-ratelimit-reset-*)
}

// Ticket is an admitted request's claim on its tenant's limits.
type Ticket struct {
	// Requests and Tokens are the tenant's limits after this request, for
	// the response's x-ratelimit-* headers.
	Requests, Tokens Window
	c                *Controller
	e                *entry
	est              int64
	running          bool      // Started and not settled; guarded by c.mu
	started          time.Time // when it was Started
}

// Settle corrects the tenant's tokens with the request's actual usage
// (prompt and completion), refunding or charging the difference from the
// estimate Admit charged: 0 for a request refused or never sent, Unknown
// when the response carried no usage (the estimate stands). Call it once
// per admitted request; it also ends the request's count as running.
func (t *Ticket) Settle(actual int64) {
	if t == nil || t.e == nil {
		return
	}
	t.c.mu.Lock()
	t.c.stopLocked(t, t.c.clock())
	t.c.mu.Unlock()
	if actual < 0 {
		actual = t.est
	}
	t.e.m.tokens.Add(float64(actual))
	if t.e.lm != nil && actual != t.est {
		t.e.lm.settle(actual - t.est)
	}
}

// Unknown is the usage of a request whose response did not say (Settle).
const Unknown = -1

// Limited is a refusal by a rate limit (HTTP 429).
type Limited struct {
	// Reason is the limit that holds the request longer: ReasonRequests or
	// ReasonTokens.
	Reason           Reason
	Requests, Tokens Window
	// RetryAfter is when both limits have room for the request again.
	RetryAfter time.Duration
	// Tenant is the entry the request was counted under (DefaultName for
	// tenants not listed).
	Tenant string
}

func (l *Limited) Error() string {
	w := l.Requests
	if l.Reason == ReasonTokens {
		w = l.Tokens
	}
	return fmt.Sprintf("rate limit reached for tenant %q: %d %s per minute; retry after %v", l.Tenant, w.Limit, l.Reason, l.RetryAfter)
}

// Admit charges a request estimated at estTokens (prompt plus the most it
// may generate) to its tenant's limits, or says which limit refuses it and
// until when. A tenant without limits takes no lock.
func (c *Controller) Admit(tenant string, estTokens int64) (*Ticket, *Limited) {
	e := c.snap.Load().lookup(tenant)
	estTokens = max(estTokens, 0)
	if e.lm == nil {
		return &Ticket{c: c, e: e, est: estTokens}, nil
	}
	t, l := e.lm.admit(estTokens, c.clock())
	if l != nil {
		l.Tenant = e.fl.name
		e.m.limited.WithLabelValues(string(l.Reason)).Inc()
		return nil, l
	}
	t.c, t.e, t.est = c, e, estTokens
	return t, nil
}

// limiter is one tenant's two token buckets, under one lock so that a
// request takes from both or from neither.
type limiter struct {
	mu       sync.Mutex
	req, tok bucket
}

// bucket refills continuously at perMinute/60 s up to one minute's worth:
// under sustained load it admits perMinute a minute, and a tenant idle for
// a minute may spend a whole minute's worth at once.
type bucket struct {
	perMinute float64 // 0: unlimited
	level     float64 // may go below 0 after Settle charges a difference
	last      time.Time
}

func (l *limiter) set(rpm, tpm int64, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.req.set(rpm, now)
	l.tok.set(tpm, now)
}

func (b *bucket) set(perMinute int64, now time.Time) {
	if b.perMinute == 0 {
		b.level = float64(perMinute) // newly limited: a whole minute's worth
	} else {
		b.refill(now)
		b.level = min(b.level, float64(perMinute))
	}
	b.perMinute, b.last = float64(perMinute), now
}

func (b *bucket) refill(now time.Time) {
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.level = min(b.perMinute, b.level+b.perMinute*dt/60)
		b.last = now
	}
}

// need is what a request of n units must find in the bucket: n, or a
// whole bucket for one larger than a minute's worth, which would otherwise
// never pass (it then leaves the bucket in debt).
func (b *bucket) need(n float64) float64 { return min(n, b.perMinute) }

// until is how long until the bucket holds n.
func (b *bucket) until(n float64) time.Duration {
	if b.perMinute == 0 || b.level >= b.need(n) {
		return 0
	}
	// Up to the millisecond, so that float rounding never says "now" to a
	// request that would be refused.
	ms := math.Ceil((b.need(n) - b.level) / b.perMinute * float64(time.Minute/time.Millisecond))
	return time.Duration(ms) * time.Millisecond
}

func (b *bucket) window() Window {
	if b.perMinute == 0 {
		return Window{}
	}
	return Window{Limit: int64(b.perMinute), Remaining: max(int64(b.level), 0), Reset: b.until(b.perMinute)}
}

func (l *limiter) admit(est int64, now time.Time) (*Ticket, *Limited) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.req.refill(now)
	l.tok.refill(now)
	waitReq, waitTok := l.req.until(1), l.tok.until(float64(est))
	if waitReq > 0 || waitTok > 0 {
		r := ReasonRequests
		if waitTok > waitReq {
			r = ReasonTokens
		}
		return nil, &Limited{Reason: r, Requests: l.req.window(), Tokens: l.tok.window(), RetryAfter: max(waitReq, waitTok)}
	}
	if l.req.perMinute > 0 {
		l.req.level--
	}
	if l.tok.perMinute > 0 {
		l.tok.level -= float64(est)
	}
	return &Ticket{Requests: l.req.window(), Tokens: l.tok.window()}, nil
}

func (l *limiter) settle(diff int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tok.perMinute > 0 {
		l.tok.level = min(l.tok.perMinute, l.tok.level-float64(diff))
	}
}

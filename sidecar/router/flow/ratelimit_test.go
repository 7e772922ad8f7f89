package flow

import (
	"math/rand/v2"
	"testing"
	"time"
)

// simClock is a clock the test moves.
type simClock struct{ now time.Time }

func newSimClock() *simClock { return &simClock{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)} }

func (s *simClock) time() time.Time         { return s.now }
func (s *simClock) advance(d time.Duration) { s.now = s.now.Add(d) }

// limited is a flow control with one tenant, "t", of the given limits.
func limited(rpm, tpm int64) Config {
	return Config{QueueTimeout: 30 * time.Second, MaxQueued: 1000, Default: Limits{Weight: 1, MaxQueued: 100},
		Tenants: map[string]Limits{"t": {Weight: 1, MaxQueued: 100, RequestsPerMinute: rpm, TokensPerMinute: tpm}}}
}

// TestRateLimitsHoldPerMinute offers 10 simulated minutes of Poisson load at
// 2× and 0.5× a limit. At 2× every minute after the first admits the limit
// within ±5 %, and so does every sliding minute in that time; the first
// admits the bucket's burst on top (a minute's worth, the tenant having
// been idle), at most twice the limit. At 0.5× nothing is refused. Token
// limits are charged the estimate at admission and settled with the actual
// usage two seconds later; the volume counted is the actual one.
func TestRateLimitsHoldPerMinute(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rpm, tpm int64
		offered  float64 // × the limit
	}{
		{"requests at 2×", 600, 0, 2},
		{"requests at 0.5×", 600, 0, 0.5},
		{"tokens at 2×, settled", 0, 600_000, 2},
		{"tokens at 0.5×, settled", 0, 600_000, 0.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newSimClock()
			start := clk.now
			c := New(limited(tc.rpm, tc.tpm), clk.time)
			rng := rand.New(rand.NewPCG(3, 4))
			limit := float64(tc.rpm)
			perMinute := tc.offered * float64(tc.rpm) // requests offered a minute
			if tc.tpm > 0 {
				limit = float64(tc.tpm)
				perMinute = tc.offered * float64(tc.tpm) / 1000 // of 1000 tokens on average
			}
			type pending struct {
				at     time.Time
				ticket *Ticket
				actual int64
			}
			var settles []pending
			perSecond := make([]float64, 600) // volume admitted, by second
			refused := 0
			for clk.now.Sub(start) < 10*time.Minute {
				for len(settles) > 0 && !settles[0].at.After(clk.now) {
					settles[0].ticket.Settle(settles[0].actual)
					settles = settles[1:]
				}
				est := 500 + rng.Int64N(1001)
				actual := est/2 + rng.Int64N(est+1) // the estimate ±50 %
				ticket, lim := c.Admit("t", est)
				if lim != nil {
					refused++
				} else {
					sec := int(clk.now.Sub(start) / time.Second)
					if tc.tpm > 0 {
						perSecond[sec] += float64(actual)
						settles = append(settles, pending{clk.now.Add(2 * time.Second), ticket, actual})
					} else {
						perSecond[sec]++
					}
				}
				clk.advance(time.Duration(rng.ExpFloat64() / perMinute * float64(time.Minute)))
			}
			window := func(from int) (v float64) {
				for _, x := range perSecond[from : from+60] {
					v += x
				}
				return v
			}
			var minutes []float64
			for m := range 10 {
				minutes = append(minutes, window(60*m))
			}
			t.Logf("limit %.0f a minute; admitted by minute %v; refused %d", limit, minutes, refused)
			if tc.offered < 1 {
				if refused > 0 {
					t.Errorf("%d requests refused at %.1f× the limit", refused, tc.offered)
				}
				return
			}
			if minutes[0] > 2*limit*1.05 {
				t.Errorf("the first minute admitted %.0f, over the burst plus a minute's refill (%.0f)", minutes[0], 2*limit)
			}
			lo, hi := limit, limit
			for s := 60; s+60 <= len(perSecond); s++ {
				v := window(s)
				lo, hi = min(lo, v), max(hi, v)
			}
			t.Logf("sliding minutes after the first: %.0f–%.0f (%.1f %% to %+.1f %%)", lo, hi, 100*(lo/limit-1), 100*(hi/limit-1))
			if lo < 0.95*limit || hi > 1.05*limit {
				t.Errorf("a minute after the first admitted %.0f–%.0f, want within ±5 %% of %.0f", lo, hi, limit)
			}
		})
	}
}

// TestRateLimitRules pins what Admit and Settle answer, row by row.
func TestRateLimitRules(t *testing.T) {
	for _, tc := range []struct {
		rule     string
		rpm, tpm int64
		before   []admit
		est      int64
		want     *Limited // nil: admitted
		ticket   Ticket   // the windows of the admitted ticket
	}{
		{"the ticket carries the x-ratelimit headers", 60, 6000, nil, 100, nil,
			Ticket{Requests: Window{60, 59, time.Second}, Tokens: Window{6000, 5900, time.Second}}},
		{"a minute's requests at once are admitted; one more waits a second", 60, 0, repeat(60, admit{1, -1}), 1,
			&Limited{Reason: ReasonRequests, Requests: Window{60, 0, time.Minute}, RetryAfter: time.Second}, Ticket{}},
		{"a request over the tokens left waits for the difference", 0, 6000, []admit{{5000, -1}}, 2000,
			&Limited{Reason: ReasonTokens, Tokens: Window{6000, 1000, 50 * time.Second}, RetryAfter: 10 * time.Second}, Ticket{}},
		{"both limits short: the one that holds it longer", 60, 6000, append(repeat(59, admit{0, -1}), admit{5000, -1}), 2000,
			&Limited{Reason: ReasonTokens, Requests: Window{60, 0, time.Minute}, Tokens: Window{6000, 1000, 50 * time.Second}, RetryAfter: 10 * time.Second}, Ticket{}},
		{"a request over a minute's worth passes a full bucket, leaving it in debt", 0, 1000, []admit{{3000, -1}}, 10,
			&Limited{Reason: ReasonTokens, Tokens: Window{1000, 0, 3 * time.Minute}, RetryAfter: 120*time.Second + 600*time.Millisecond}, Ticket{}},
		{"Settle refunds an overestimate", 0, 6000, []admit{{5000, 1000}}, 0, nil,
			Ticket{Tokens: Window{6000, 5000, 10 * time.Second}}},
		{"Settle charges an underestimate", 0, 6000, []admit{{1000, 4000}}, 0, nil,
			Ticket{Tokens: Window{6000, 2000, 40 * time.Second}}},
		{"a refund never fills the bucket past a minute's worth", 0, 6000, []admit{{10, 0}, {10, 0}}, 0, nil,
			Ticket{Tokens: Window{6000, 6000, 0}}},
	} {
		clk := newSimClock()
		c := New(limited(tc.rpm, tc.tpm), clk.time)
		for _, a := range tc.before {
			tk, lim := c.Admit("t", a.est)
			if lim != nil {
				t.Fatalf("%s: setting up, admit %d refused: %v", tc.rule, a.est, lim)
			}
			if a.settle >= 0 {
				tk.Settle(a.settle)
			}
		}
		tk, lim := c.Admit("t", tc.est)
		if lim != nil {
			lim.Tenant = ""
		}
		switch {
		case tc.want == nil && lim != nil:
			t.Errorf("%s: refused %+v, want admitted", tc.rule, *lim)
		case tc.want != nil && (lim == nil || *lim != *tc.want):
			t.Errorf("%s: got %+v, want refused %+v", tc.rule, lim, *tc.want)
		case tc.want == nil && (tk.Requests != tc.ticket.Requests || tk.Tokens != tc.ticket.Tokens):
			t.Errorf("%s: ticket windows %+v %+v, want %+v %+v", tc.rule, tk.Requests, tk.Tokens, tc.ticket.Requests, tc.ticket.Tokens)
		}
	}
}

// admit is a request admitted before a row's: its estimate, and what it
// is settled with at once (< 0: not settled).
type admit struct{ est, settle int64 }

func repeat(n int, a admit) []admit {
	out := make([]admit, n)
	for i := range out {
		out[i] = a
	}
	return out
}

// TestRateLimitReload: a reload keeps what a tenant has spent, a lowered
// limit caps what is left, a tenant whose limits go is unlimited, and a
// tenant removed is limited by Default's bucket, which all the unlisted
// share.
func TestRateLimitReload(t *testing.T) {
	clk := newSimClock()
	c := New(limited(100, 0), clk.time)
	for range 40 {
		if _, lim := c.Admit("t", 0); lim != nil {
			t.Fatalf("setting up: %v", lim)
		}
	}
	cfg := limited(50, 0)
	c.Update(cfg)
	if tk, _ := c.Admit("t", 0); tk.Requests.Remaining != 49 {
		t.Errorf("after lowering the limit to 50 with 60 left: %d remaining, want 49", tk.Requests.Remaining)
	}
	cfg = limited(200, 0)
	c.Update(cfg)
	if tk, _ := c.Admit("t", 0); tk.Requests.Remaining != 48 {
		t.Errorf("after raising the limit to 200: %d remaining, want 48 (what was left, less this one)", tk.Requests.Remaining)
	}
	c.Update(limited(0, 0))
	for range 1000 {
		if _, lim := c.Admit("t", 0); lim != nil {
			t.Fatalf("a tenant without limits was refused: %v", lim)
		}
	}
	cfg = Config{QueueTimeout: time.Second, MaxQueued: 10, Default: Limits{Weight: 1, RequestsPerMinute: 3}}
	c.Update(cfg)
	for i, tenant := range []string{"t", "u", ""} {
		if _, lim := c.Admit(tenant, 0); lim != nil {
			t.Fatalf("request %d of Default's 3 refused: %v", i, lim)
		}
	}
	if _, lim := c.Admit("v", 0); lim == nil || lim.Tenant != DefaultName {
		t.Errorf("a 4th request of an unlisted tenant: %v, want refused by %s's limit", lim, DefaultName)
	}
}

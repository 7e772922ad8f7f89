// Package workload generates the request streams that the benchmark and the
// demo drive through the router, and sends them: deterministic generators
// from a seed (long shared contexts, a support bot, RAG, ShareGPT-style
// chats, the Mooncake trace), a load driver that keeps the turns of a
// conversation in order and measures what a client sees, and helpers that
// read the simulators' own prefix-cache counters.
//
// Sizes are configurable throughout, so the same workloads run as a
// minutes-long benchmark or as a few-second demo or test.
package workload

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// CharsPerToken is the text-to-token ratio the generators size text by; it
// matches the simulator's default tokenizer (vllmsim.DefaultCharsPerToken).
const CharsPerToken = 4

// Message is one chat message. Parts, when set, are sent as an array of
// text content parts instead of Content; the simulator and the router read
// their concatenation, and shared parts (a document, a trace block) share
// memory across requests.
type Message struct {
	Role    string
	Content string
	Parts   []string
}

// Chars is the length of the message text.
func (m Message) Chars() int {
	n := len(m.Content)
	for _, p := range m.Parts {
		n += len(p)
	}
	return n
}

// Request is one OpenAI chat-completions request of a workload.
type Request struct {
	// Session names the conversation the request belongs to ("" for a
	// single-turn request). Turns of one session are sent in slice order,
	// each after the previous one has finished.
	Session string
	// Turn is the 0-based turn number within the session.
	Turn int
	// Arrival is when the request is due, from the start of the run, in
	// simulated time (the driver multiplies it by Options.TimeScale). A
	// later turn is sent at its arrival or when the previous turn
	// finishes, whichever is later.
	Arrival time.Duration
	// Tenant, if set, is sent as prompt_cache_key (or the tenant header),
	// which keeps the tenant's prefixes apart in routing and in the cache.
	Tenant    string
	Messages  []Message
	MaxTokens int
}

// PromptChars is the length of the request's message text.
func (r Request) PromptChars() int {
	n := 0
	for _, m := range r.Messages {
		n += m.Chars()
	}
	return n
}

// Workload is a named request stream, ordered by arrival.
type Workload struct {
	Name     string
	Requests []Request
}

// PromptTokens estimates the prompt tokens of the whole workload.
func (w Workload) PromptTokens() int {
	n := 0
	for _, r := range w.Requests {
		n += r.PromptChars() / CharsPerToken
	}
	return n
}

// Duration is the arrival time of the last request (simulated).
func (w Workload) Duration() time.Duration {
	if len(w.Requests) == 0 {
		return 0
	}
	return w.Requests[len(w.Requests)-1].Arrival
}

// sortByArrival orders requests by arrival, keeping the order of equal
// arrivals (and so the order of a session's turns, whose arrivals grow).
func sortByArrival(reqs []Request) {
	slices.SortStableFunc(reqs, func(a, b Request) int {
		switch {
		case a.Arrival < b.Arrival:
			return -1
		case a.Arrival > b.Arrival:
			return 1
		}
		return 0
	})
}

// newRand returns the generator for one stream of a workload: the same seed
// and stream give the same numbers on every platform.
func newRand(seed uint64, stream string) *rand.Rand {
	return rand.New(rand.NewPCG(seed, hashString(stream)))
}

func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// poisson returns arrival times of a Poisson process at rate per second.
type poisson struct {
	rng  *rand.Rand
	rate float64
	t    float64
}

func (p *poisson) next() time.Duration {
	if p.rate > 0 {
		p.t += p.rng.ExpFloat64() / p.rate
	}
	return time.Duration(p.t * float64(time.Second))
}

// lognormal draws exp(N(ln median, sigma)), clamped to [lo, hi].
func lognormal(rng *rand.Rand, median, sigma float64, lo, hi int) int {
	v := int(math.Round(median * math.Exp(sigma*rng.NormFloat64())))
	return min(max(v, lo), hi)
}

// zipf samples ranks 0..n-1 with probability proportional to 1/(k+1)^s;
// unlike math/rand's it accepts s ≤ 1, the usual document popularity.
type zipf struct {
	cdf []float64
}

func newZipf(n int, s float64) *zipf {
	z := &zipf{cdf: make([]float64, n)}
	sum := 0.0
	for k := range n {
		sum += 1 / math.Pow(float64(k+1), s)
		z.cdf[k] = sum
	}
	for k := range z.cdf {
		z.cdf[k] /= sum
	}
	return z
}

func (z *zipf) sample(rng *rand.Rand) int {
	i, _ := slices.BinarySearch(z.cdf, rng.Float64())
	return min(i, len(z.cdf)-1)
}

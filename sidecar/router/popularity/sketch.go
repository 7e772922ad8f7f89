// Package popularity estimates what fraction of recent requests carried a
// given block hash, in fixed memory.
package popularity

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/warmroute/warmroute/api/hrw"
)

// Sketch is a count-min sketch of rows × width counters whose counts are
// halved every decayEvery requests. It only ever over-estimates, by about
// blocks-per-request ÷ width of the traffic: far below the fractions that
// matter to the policy (a share of one instance). Record is not safe for
// concurrent use with itself (the policy records under its decision
// lock); the rest is.
type Sketch struct {
	counts     []atomic.Uint32 // rows × width
	width      uint64
	total      atomic.Int64 // decayed number of requests
	decayEvery int64
	since      atomic.Int64
}

// rows is the sketch's depth. A count-min estimate is off by more than its
// bound with probability about e^-rows; the bound here is tiny (0.05 % of
// traffic), so a second row makes a rare error rarer still, and each row
// is a memory read per block on the decision's hot path.
const rows = 2

// New returns a sketch of at least width counters a row (rounded up to a
// power of two) that halves every decayEvery requests.
func New(width int, decayEvery int64) *Sketch {
	w := uint64(1)
	for w < uint64(width) {
		w <<= 1
	}
	return &Sketch{counts: make([]atomic.Uint32, rows*w), width: w, decayEvery: decayEvery}
}

// slots are h's counters, one a row: row 0 reads h's low bits (block
// hashes are xxhash output, already uniform), row 1 those of h remixed.
func (p *Sketch) slots(h uint64) (*atomic.Uint32, *atomic.Uint32) {
	mask := p.width - 1
	return &p.counts[h&mask], &p.counts[p.width+hrw.Mix64(h^0x9e3779b97f4a7c15)&mask]
}

// Estimate returns the count of h (an over-estimate by construction).
func (p *Sketch) Estimate(h uint64) uint32 {
	a, b := p.slots(h)
	return min(a.Load(), b.Load())
}

// Total is the decayed number of requests recorded.
func (p *Sketch) Total() int64 { return p.total.Load() }

// Record counts one request carrying the given hashes, halving every count
// each decayEvery requests.
func (p *Sketch) Record(hashes []uint64) {
	for _, h := range hashes {
		a, b := p.slots(h)
		a.Add(1)
		b.Add(1)
	}
	p.total.Add(1)
	if p.since.Add(1) >= p.decayEvery {
		// Halving keeps the estimate about the last ~2×decayEvery requests.
		p.since.Add(-p.decayEvery)
		for i := range p.counts {
			if v := p.counts[i].Load(); v != 0 {
				p.counts[i].Store(v / 2)
			}
		}
		p.total.Store(p.total.Load() / 2)
	}
}

// Bytes is the sketch's fixed memory.
func (p *Sketch) Bytes() int { return len(p.counts) * 4 }

// State is a sketch's counts, for handing them to another process.
type State struct {
	Width  uint64
	Total  int64
	Since  int64 // requests since the last halving
	Counts []uint32
}

// State copies the sketch's counts.
func (p *Sketch) State() State {
	s := State{Width: p.width, Total: p.total.Load(), Since: p.since.Load(), Counts: make([]uint32, len(p.counts))}
	for i := range p.counts {
		s.Counts[i] = p.counts[i].Load()
	}
	return s
}

// SetState replaces the counts with s's; it refuses, changing nothing, a
// state of another width or a malformed one.
func (p *Sketch) SetState(s State) error {
	switch {
	case s.Width != p.width:
		return fmt.Errorf("sketch width %d, this one's is %d", s.Width, p.width)
	case uint64(len(s.Counts)) != rows*p.width:
		return fmt.Errorf("sketch of %d counts, want %d", len(s.Counts), rows*p.width)
	case s.Total < 0 || s.Since < 0:
		return errors.New("sketch total or decay phase negative")
	}
	for i, c := range s.Counts {
		p.counts[i].Store(c)
	}
	p.total.Store(s.Total)
	p.since.Store(s.Since)
	return nil
}

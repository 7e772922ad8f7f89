package policy

import (
	"sync/atomic"

	"github.com/warmroute/warmroute/api/hrw"
)

// popularity estimates what fraction of recent requests carried a given
// block hash, with a count-min sketch of fixed size whose counts are halved
// every decayEvery requests. Its memory is fixed (rows × width counters)
// whatever the traffic, and it only ever over-estimates, by about
// blocks-per-request ÷ width of the traffic: far below the fractions that
// matter here (a share of one instance).
type popularity struct {
	counts     []atomic.Uint32 // rows × width
	width      uint64
	total      atomic.Int64 // decayed number of requests
	decayEvery int64
	since      atomic.Int64
	decaying   atomic.Bool
}

// sketchRows is the count-min sketch's depth. A count-min estimate is off
// by more than its bound with probability about e^-rows; the bound here is
// tiny (0.05 % of traffic against the 1/N fractions that decide), so the
// rare row that is off still errs far below a decision, and a second row
// is enough to make that rarer still. Each row is a memory read per block
// on the decision's hot path.
const sketchRows = 2

func newPopularity(width int, decayEvery int64) *popularity {
	w := uint64(1)
	for w < uint64(width) {
		w <<= 1
	}
	return &popularity{counts: make([]atomic.Uint32, sketchRows*w), width: w, decayEvery: decayEvery}
}

// slots are h's counters, one a row: row 0 reads h's low bits (block
// hashes are xxhash output, already uniform), row 1 those of h remixed.
func (p *popularity) slots(h uint64) (*atomic.Uint32, *atomic.Uint32) {
	mask := p.width - 1
	return &p.counts[h&mask], &p.counts[p.width+hrw.Mix64(h^0x9e3779b97f4a7c15)&mask]
}

// estimate returns the count of h (an over-estimate by construction).
func (p *popularity) estimate(h uint64) uint32 {
	a, b := p.slots(h)
	return min(a.Load(), b.Load())
}

// record counts one request carrying the given hashes.
func (p *popularity) record(hashes []uint64) {
	for _, h := range hashes {
		a, b := p.slots(h)
		a.Add(1)
		b.Add(1)
	}
	p.counted(1)
}

// counted adds n requests to the total, halving every count each
// decayEvery requests.
func (p *popularity) counted(n int64) {
	p.total.Add(n)
	if p.since.Add(n) >= p.decayEvery && p.decaying.CompareAndSwap(false, true) {
		// Halving keeps the estimate about the last ~2×decayEvery requests;
		// a concurrent increment may be halved or not, which is noise well
		// below the fractions the policy compares.
		p.since.Add(-p.decayEvery)
		for i := range p.counts {
			if v := p.counts[i].Load(); v != 0 {
				p.counts[i].Store(v / 2)
			}
		}
		p.total.Store(p.total.Load() / 2)
		p.decaying.Store(false)
	}
}

// Bytes is the sketch's fixed memory.
func (p *popularity) Bytes() int { return len(p.counts) * 4 }

package picker

import (
	"crypto/cipher"
	"sync"
	"time"
)

// replayWindow is how many of a session's most recent sequence numbers
// the picker tells apart: a replica's calls overtake each other (its
// requests ask concurrently), but never by thousands — a call that late
// is past its timeout anyway, and is refused as a replay.
const replayWindow = 4096

// sessionTTL is how long the picker keeps a silent session: any call of
// it still to come was signed before the session went silent, and is
// older than maxSkew from the picker's clock by then (2 × maxSkew covers
// a call signed up to maxSkew ahead of the picker's clock).
const sessionTTL = 2*maxSkew + time.Second

// peer is the picker's side of one caller session.
type peer struct {
	aead cipher.AEAD
	mu   sync.Mutex
	seen time.Time
	// top is the highest sequence number accepted; bits marks, of the
	// replayWindow numbers up to it, those accepted.
	top  uint64
	bits [replayWindow / 64]uint64
}

// fresh reports whether seq may be accepted: checked before the body is
// read, while accept marks it seen once the body opened.
func (p *peer) fresh(seq uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.freshLocked(seq)
}

func (p *peer) freshLocked(seq uint64) bool {
	switch {
	case seq > p.top:
		return true
	case p.top-seq >= replayWindow:
		return false
	}
	return p.bits[seq%replayWindow/64]&(1<<(seq%64)) == 0
}

// accept marks seq seen, false if it was (two copies of one call racing:
// only the first counts).
func (p *peer) accept(seq uint64, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.freshLocked(seq) {
		return false
	}
	if seq > p.top {
		// The slots of the numbers skipped now hold newer ones.
		if seq-p.top >= replayWindow {
			p.bits = [replayWindow / 64]uint64{}
		} else {
			for s := p.top + 1; s < seq; s++ {
				p.bits[s%replayWindow/64] &^= 1 << (s % 64)
			}
		}
		p.top = seq
	}
	p.bits[seq%replayWindow/64] |= 1 << (seq % 64)
	p.seen = now
	return true
}

// peers are the caller sessions a picker has accepted calls of; only a
// key holder can sign a call, so only key holders add entries.
type peers struct {
	keys Keys
	// started is when this process began answering, to the millisecond
	// of a call's time: a call signed before was not for it, and would be
	// a replay it cannot otherwise tell (its windows start empty).
	started time.Time

	mu    sync.Mutex
	byID  map[sessionID]*peer
	swept time.Time
}

func newPeers(keys Keys, now time.Time) *peers {
	return &peers{keys: keys, started: time.UnixMilli(now.UnixMilli()), swept: now, byID: map[sessionID]*peer{}}
}

// get is the session's peer, new if unknown; silent sessions go.
func (ps *peers) get(id sessionID, now time.Time) *peer {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if now.Sub(ps.swept) > maxSkew {
		ps.swept = now
		for k, p := range ps.byID {
			p.mu.Lock()
			silent := now.Sub(p.seen) > sessionTTL
			p.mu.Unlock()
			if silent {
				delete(ps.byID, k)
			}
		}
	}
	p, ok := ps.byID[id]
	if !ok {
		p = &peer{aead: ps.keys.sessionAEAD(id), seen: now}
		ps.byID[id] = p
	}
	return p
}

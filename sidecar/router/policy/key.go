package policy

import "cmp"

// Key is what a decision needs of a request, and all a router replica
// sends the elected picker (sidecar/router/picker): block hashes, sizes and
// the model, never the prompt text. Hashes are keyed (Config.HashSeed) and
// scoped to the model and tenant (see scopeSeed), so identical text of two
// tenants never shares a hash and a hash says nothing of the text to
// anyone without the key.
type Key struct {
	// Model is the "model" the client asked for; "" means the served model.
	Model string
	// Hashes is the block chain of the routing text (see blockChain): the
	// window's blocks, then the lookahead's, chained on from the window's
	// last. A request without routing text has one hash, its scope seed.
	Hashes []uint64
	// WindowBlocks is how many of Hashes cover the window.
	WindowBlocks int
	// TextBytes is the length of the routing text the hashes cover.
	TextBytes int
	// PromptBytes is the length of the whole prompt text, which sizes the
	// request's prefill in the token load.
	PromptBytes int
}

// Key hashes a request under the configuration in force. Every replica
// computes the same Key for the same request as long as they share the
// hash seed, the prefix length and the block size.
func (p *Policy) Key(req Request) Key {
	return p.KeyAppend(nil, req)
}

// KeyAppend is Key with the hashes appended to buf (reused by the caller).
func (p *Policy) KeyAppend(buf []uint64, req Request) Key {
	t := p.table.Load()
	var seed uint64
	bs := 64
	if t != nil {
		seed, bs = t.cfg.HashSeed, t.blockSize
	}
	seed = scopeSeed(seed, req.Model, req.Tenant)
	window := min(req.WindowBytes, len(req.Text))
	hashes := blockChain(buf[:0], seed, req.Text[:window], bs)
	if len(hashes) == 0 {
		hashes = append(hashes, seed)
	}
	k := Key{Model: req.Model, WindowBlocks: len(hashes), TextBytes: len(req.Text),
		PromptBytes: cmp.Or(req.PromptBytes, len(req.Text))}
	// Lookahead blocks start where the window ends: a partial last window
	// block is not re-hashed with lookahead bytes.
	k.Hashes = blockChain(hashes, hashes[len(hashes)-1], req.Text[window:], bs)
	return k
}

// windowHash is the hash standing for the whole window: its last block's.
func (k Key) windowHash(seed uint64) uint64 {
	if n := min(k.WindowBlocks, len(k.Hashes)); n > 0 {
		return k.Hashes[n-1]
	}
	return scopeSeed(seed, k.Model, "")
}

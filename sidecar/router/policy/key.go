package policy

import "cmp"

// Request is what the policy knows of a request.
type Request struct {
	// Model is the "model" the client asked for; "" means the served model.
	Model string
	// Tenant isolates identical prompts of different tenants.
	Tenant string
	// Text is the routing text: the window (first prefixLength characters
	// or bytes, WindowBytes long) followed by up to the lookahead.
	Text        []byte
	WindowBytes int
	// PromptBytes is the length of the whole prompt text, which the routing
	// text may stop short of; 0 means len(Text). It sizes the request's
	// prefill in the token load.
	PromptBytes int
}

// Key is what a decision needs of a request, and all a router replica
// sends the elected picker: block hashes (keyed by the hash seed, scoped
// to model and tenant), sizes and the model, never the prompt text.
//
// A Key made by Policy.Key holds the routing text instead, valid while the
// Request's Text is: a decision hashes the lookahead only when it reads
// past the window, which few requests do. BlockHashes gives the whole
// chain, for sending the Key elsewhere.
type Key struct {
	Model string // see Request
	// Hashes is the block chain of the routing text: the window's blocks,
	// then the lookahead's. A request without routing text has one hash,
	// its scope seed. Nil in a Key that holds its text.
	Hashes       []uint64
	WindowBlocks int // how many blocks of the chain cover the window
	TextBytes    int // the length of the routing text the hashes cover
	PromptBytes  int // see Request

	// The routing text and its window's length, the chain's first link and
	// its block size (0 in a Key of hashes).
	text      []byte
	window    int
	seed      uint64
	blockSize int
}

// newKey makes the key of a request under a hash seed and block size.
func newKey(req Request, hashSeed uint64, bs int) Key {
	window := min(req.WindowBytes, len(req.Text))
	return Key{
		Model:        req.Model,
		WindowBlocks: max(1, (window+bs-1)/bs),
		TextBytes:    len(req.Text),
		PromptBytes:  cmp.Or(req.PromptBytes, len(req.Text)),
		text:         req.Text,
		window:       window,
		seed:         scopeSeed(hashSeed, req.Model, req.Tenant),
		blockSize:    bs,
	}
}

// BlockHashes returns the key's whole block chain, window and lookahead.
func (k Key) BlockHashes() []uint64 {
	if !k.HoldsText() {
		return k.Hashes
	}
	return k.WithLookahead(k.Window(make([]uint64, 0, (len(k.text)+k.blockSize-1)/k.blockSize+1)))
}

// Window returns the window's block hashes: the key's own, or those
// of its text appended to dst. A window without text is its seed.
func (k Key) Window(dst []uint64) []uint64 {
	if !k.HoldsText() {
		return k.Hashes[:min(max(k.WindowBlocks, 1), len(k.Hashes))]
	}
	out := blockChain(dst, k.seed, k.text[:k.window], k.blockSize)
	if len(out) == len(dst) {
		out = append(out, k.seed)
	}
	return out
}

// WithLookahead returns the window's hashes, as Window returned them,
// followed by the lookahead's.
func (k Key) WithLookahead(window []uint64) []uint64 {
	if !k.HoldsText() {
		return k.Hashes
	}
	// Lookahead blocks start where the window ends: a partial last window
	// block is not re-hashed with lookahead bytes.
	return blockChain(window, window[len(window)-1], k.text[k.window:], k.blockSize)
}

// HoldsText reports whether the key holds its text rather than hashes.
func (k Key) HoldsText() bool { return k.blockSize > 0 }

// WindowHash is the window's last block hash, which stands for all of it.
func (k Key) WindowHash(seed uint64) uint64 {
	if k.HoldsText() {
		return chainEnd(k.seed, k.text[:k.window], k.blockSize)
	}
	if n := min(k.WindowBlocks, len(k.Hashes)); n > 0 {
		return k.Hashes[n-1]
	}
	return scopeSeed(seed, k.Model, "")
}

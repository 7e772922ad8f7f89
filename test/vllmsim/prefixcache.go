package vllmsim

import "cmp"

// PrefixCache is the simulator's prefix cache on its own, without engine or
// timing, serving requests one at a time in the order given. A benchmark's
// pooled oracle (one cache as large as all instances together) built on it
// tokenizes, hashes and evicts exactly as the instances do, so their hit
// rates compare like for like.
type PrefixCache struct {
	tok       tokenizer
	blockSize int
	pool      *blockPool
	queries   int64
	hits      int64
}

// Message is a chat message for PrefixCache.Chat.
type Message struct {
	Role, Content string
}

// NewPrefixCache builds an empty cache; zero arguments take Config's
// defaults.
func NewPrefixCache(cacheTokens, blockSize, charsPerToken int) *PrefixCache {
	cacheTokens = cmp.Or(cacheTokens, DefaultCacheTokens)
	blockSize = cmp.Or(blockSize, DefaultBlockSize)
	charsPerToken = cmp.Or(charsPerToken, DefaultCharsPerToken)
	return &PrefixCache{
		tok:       tokenizer{charsPerToken: charsPerToken},
		blockSize: blockSize,
		pool:      newBlockPool(cacheTokens / blockSize),
	}
}

// Chat serves a chat request, as /v1/chat/completions with this adapter
// ("" for the base model), cache_salt and max_tokens would, and returns its
// prompt and cached token counts.
func (c *PrefixCache) Chat(adapter, salt string, messages []Message, maxTokens int) (prompt, cached int) {
	msgs := make([]chatMessage, len(messages))
	for i, m := range messages {
		msgs[i] = chatMessage{role: m.Role, text: m.Content}
	}
	return c.serve(newSeq(c.blockSize, adapter, salt, c.tok.chat(msgs), maxTokens))
}

// Completion serves a completions request with a text prompt; see Chat.
func (c *PrefixCache) Completion(adapter, salt, text string, maxTokens int) (prompt, cached int) {
	return c.serve(newSeq(c.blockSize, adapter, salt, c.tok.completion(text), maxTokens))
}

// Queries and Hits are the cumulative prompt and cached tokens.
func (c *PrefixCache) Queries() int64 { return c.queries }
func (c *PrefixCache) Hits() int64    { return c.hits }

func (c *PrefixCache) serve(s *seq) (prompt, cached int) {
	c.queries += int64(s.prompt)
	if !s.admit(c.pool, c.blockSize) {
		return s.prompt, 0 // longer than the whole cache
	}
	c.hits += int64(s.cachedTokens)
	s.compute(c.pool, c.blockSize, s.prompt-s.computed)
	// The KV of every generated token but the last is computed.
	for j := range s.maxTokens - 1 {
		id, _ := c.tok.outputToken(s.outputSeed, j)
		s.tokens = append(s.tokens, id)
		s.compute(c.pool, c.blockSize, 1)
	}
	c.pool.release(s.held, s.reserved)
	return s.prompt, s.cachedTokens
}

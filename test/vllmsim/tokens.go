package vllmsim

import "strings"

// Token ids are 64-bit hashes rather than vocabulary indices: a text piece
// always maps to the same id, which is all the prefix cache needs.

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func hashString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

func hashUint64(h, v uint64) uint64 {
	for range 8 {
		h ^= v & 0xff
		h *= fnvPrime
		v >>= 8
	}
	return h
}

// specialToken is an atomic token such as a chat-template marker. Its id
// cannot collide with a text piece because of the prefix byte.
func specialToken(name string) uint64 { return hashString(fnvOffset, "\x00"+name) }

// tokenizer cuts text into pieces of charsPerToken bytes, each piece one
// token, and renders chat messages with a Llama-3-like template whose
// markers are single special tokens. Tokenization restarts at every marker,
// so a conversation's next turn re-tokenizes the previous answer into
// exactly the tokens that were generated — what makes multi-turn prefix
// hits work in vLLM too.
type tokenizer struct {
	charsPerToken int
}

var (
	tokenBeginOfText = specialToken("<|begin_of_text|>")
	tokenEndOfTurn   = specialToken("<|eot_id|>")
)

func roleHeaderToken(role string) uint64 {
	return specialToken("<|start_header_id|>" + role + "<|end_header_id|>")
}

// appendText appends the tokens of s; a trailing short piece is a token too.
func (t tokenizer) appendText(dst []uint64, s string) []uint64 {
	for len(s) > 0 {
		n := min(t.charsPerToken, len(s))
		dst = append(dst, hashString(fnvOffset, s[:n]))
		s = s[n:]
	}
	return dst
}

// countText is len(appendText(nil, s)) without the allocation.
func (t tokenizer) countText(s string) int {
	return (len(s) + t.charsPerToken - 1) / t.charsPerToken
}

// completion tokenizes a completions prompt: begin-of-text, then the text.
func (t tokenizer) completion(prompt string) []uint64 {
	return t.appendText(append(make([]uint64, 0, 1+t.countText(prompt)), tokenBeginOfText), prompt)
}

// chat renders messages with the template and appends the generation
// prompt (the assistant header), as vLLM does with add_generation_prompt.
func (t tokenizer) chat(msgs []chatMessage) []uint64 {
	n := 2
	for _, m := range msgs {
		n += 2 + t.countText(m.text)
	}
	toks := append(make([]uint64, 0, n), tokenBeginOfText)
	for _, m := range msgs {
		toks = append(toks, roleHeaderToken(m.role))
		toks = t.appendText(toks, m.text)
		toks = append(toks, tokenEndOfTurn)
	}
	return append(toks, roleHeaderToken("assistant"))
}

// outputWords is the vocabulary of generated text.
var outputWords = strings.Fields("the and for you are but not all any can had her was one our out day get has him his how man new now old see two way who boy did its let put say she too use")

// outputToken returns the j-th generated token of a sequence whose output
// is seeded by seed: its text is exactly charsPerToken bytes, so the text
// tokenizes back into the same token.
func (t tokenizer) outputToken(seed uint64, j int) (id uint64, text string) {
	h := hashUint64(seed, uint64(j))
	w := outputWords[h%uint64(len(outputWords))]
	var b strings.Builder
	if t.charsPerToken > 1 {
		b.WriteByte(' ')
	}
	for b.Len() < t.charsPerToken {
		b.WriteString(w[:min(len(w), t.charsPerToken-b.Len())])
	}
	text = b.String()
	return hashString(fnvOffset, text), text
}

// hashBlock chains one full block of tokens onto its parent's hash.
func hashBlock(parent uint64, toks []uint64) uint64 {
	h := hashUint64(fnvOffset, parent)
	for _, tok := range toks {
		h = hashUint64(h, tok)
	}
	return h
}

// chainSeed is the parent hash of a sequence's first block: like vLLM's
// extra keys, the adapter and cache_salt keep their blocks apart from every
// other adapter's and salt's.
func chainSeed(adapter, salt string) uint64 {
	return hashString(hashString(fnvOffset, "lora:"+adapter), "\x00salt:"+salt)
}

package extract

import (
	"encoding/json"
)

// WithCacheSalt returns the body of an OpenAI request with "cache_salt" set
// to salt as its first member, so that vLLM keeps this tenant's KV blocks
// apart from other tenants' even on the same instance. The body must be a
// JSON object that OpenAI accepted (so it starts with '{' after spaces) and
// that has no cache_salt of its own; the rest is left byte for byte.
func WithCacheSalt(body []byte, salt string) []byte {
	s := &scanner{data: body}
	if s.peek() != '{' {
		return body
	}
	open := s.pos + 1
	s.pos = open
	empty := s.peek() == '}'
	quoted, _ := json.Marshal(salt) // a string always marshals
	out := make([]byte, 0, len(body)+len(quoted)+16)
	out = append(out, body[:open]...)
	out = append(out, `"cache_salt":`...)
	out = append(out, quoted...)
	if !empty {
		out = append(out, ',')
	}
	return append(out, body[open:]...)
}

package extract

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// SaltedBody returns a body that OpenAI or Invocations accepted as it goes
// to vLLM, without a UTF-8 byte order mark: with "cache_salt" set to salt
// (none when salt is ""), and without the client's own cache_salt and
// prompt_cache_key members when tenantFields (Request.TenantFields) says it
// has some. vLLM keeps KV blocks of different salts apart and takes the
// last cache_salt member, so the router's must be the only one.
//
// The result is the body's own bytes cut into pieces around the members
// taken out and the one put in, never a copy: a second copy would hold
// twice what the router's buffer budget counts. Without tenant fields the
// rest is left byte for byte; with them the whitespace between top-level
// members is dropped.
func SaltedBody(body []byte, salt string, tenantFields bool) ([][]byte, error) {
	s, err := openObject(body) // as Request was read
	if err != nil {
		return nil, err
	}
	body, open := s.data, s.pos+1
	var member []byte
	if salt != "" {
		member = append(appendQuoted(append(make([]byte, 0, len(salt)+16), `"cache_salt":`...), salt), ',')
	}
	if !tenantFields {
		s.pos = open
		if s.peek() == '}' && member != nil {
			member = member[:len(member)-1] // {"cache_salt":"…"}: no comma
		}
		return nonEmpty(body[:open], member, body[open:]), nil
	}
	// Rebuild the object from its members: '{', the salt, each kept
	// member (key to the end of its value) with a comma, then '}' and
	// what followed it.
	out := [][]byte{body[:open], member}
	err = s.object(func(key jsonString) error {
		start := s.keyStart
		if _, err := s.skip(1); err != nil {
			return err
		}
		if !key.is("cache_salt") && !key.is("prompt_cache_key") {
			out = append(out, body[start:s.pos], comma)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("salt request body: %w", err)
	}
	// The last piece's comma (the salt's, or the last member's) goes.
	last := len(out) - 1
	if len(out[last]) > 0 && out[last][len(out[last])-1] == ',' {
		out[last] = out[last][:len(out[last])-1]
	}
	out = append(out, body[s.pos-1:])
	return nonEmpty(out...), nil
}

var comma = []byte{','}

// appendQuoted appends s as a JSON string. The router's salts are
// base64url, which needs no escaping; anything else goes through
// encoding/json.
func appendQuoted(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			quoted, _ := json.Marshal(s) // a string always marshals
			return append(dst, quoted...)
		}
	}
	return append(append(append(dst, '"'), s...), '"')
}

// nonEmpty drops the empty pieces.
func nonEmpty(pieces ...[]byte) [][]byte {
	out := pieces[:0]
	for _, p := range pieces {
		if len(p) > 0 {
			out = append(out, p)
		}
	}
	return out
}

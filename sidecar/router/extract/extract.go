// Package extract reads what routing needs from a request body: the routing
// text (the window of the prompt and a lookahead past it), the model, the
// tenant and whether the response streams. It works on raw bytes and never
// holds more of the prompt than the window and lookahead.
package extract

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"unicode/utf8"
)

// Tenant headers: SageMaker's name and a neutral alias.
const (
	TenantHeader      = "X-Amzn-SageMaker-Prefix-Aware-Id"
	TenantHeaderAlias = "X-Prefix-Aware-Id"
	maxTenantLen      = 64
)

// Limits says how much routing text to keep.
type Limits struct {
	// Window is the routing window: characters of message text on the
	// OpenAI API, bytes of the raw body on /invocations.
	Window int
	// Lookahead is how many more bytes of text to keep past the window:
	// bytes, not characters, as it only feeds block hashing and counting
	// characters over tens of kilobytes would cost as much as the rest.
	Lookahead int
}

// Request is what the router needs from a body.
type Request struct {
	Model string
	// Tenant is the tenant the request is routed and salted for: the
	// caller's (a header, an API key's) as given, or after ClaimBodyTenant
	// the body's claim.
	Tenant string
	Stream bool
	// PromptCacheKey and ClientSalt are the body's prompt_cache_key and
	// cache_salt strings ("" when absent or null): claims of a tenant that
	// only an unauthenticated router believes (ClaimBodyTenant).
	PromptCacheKey, ClientSalt string
	// TenantFields says the body has a cache_salt or prompt_cache_key
	// member (null ones too), which SaltedBody must take out: neither may
	// reach vLLM, where a client's salt would replace the router's and a
	// tenant id would be seen.
	TenantFields bool
	// Text is the window followed by the lookahead; WindowBytes is the
	// length of the window part.
	Text        []byte
	WindowBytes int
	// PromptBytes is the size of the whole prompt text, decoded, window or
	// not: every message content on chat (strings and the text of content
	// parts), the prompt strings on completions, the body on /invocations.
	// Token-id prompts count nothing. It is counted in the pass that
	// validates the body, for estimating prompt tokens.
	PromptBytes int
	// pooled is Text's buffer when it came from the pool: kept as the
	// pointer the pool holds, so that giving it back allocates nothing.
	pooled *[]byte
}

var textBuffers sync.Pool

func getBuffer(size int) *[]byte {
	if b, ok := textBuffers.Get().(*[]byte); ok && cap(*b) >= size {
		*b = (*b)[:0]
		return b
	}
	b := make([]byte, 0, size)
	return &b
}

// Release returns the routing text's memory for reuse; the request's Text
// must not be used afterwards. Calling it is optional.
func (r *Request) Release() {
	if r.pooled != nil {
		*r.pooled = r.Text[:0]
		textBuffers.Put(r.pooled)
	}
	r.Text, r.pooled = nil, nil
}

// ErrBadTenant is a tenant id that is too long or not printable ASCII.
var ErrBadTenant = errors.New("prefix-aware id must be 1 to 64 printable ASCII characters")

// ValidTenant checks a tenant id from a header or prompt_cache_key. Empty
// means none.
func ValidTenant(id string) error {
	if len(id) > maxTenantLen {
		return ErrBadTenant
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x20 || id[i] > 0x7e {
			return ErrBadTenant
		}
	}
	return nil
}

// Invocations extracts from vLLM's /invocations, which reads the body as
// a chat or completions request: the routing text is its first bytes, and
// the body must be a JSON object, read for its stream flag and tenant
// claims. A body the router cannot read is refused: forwarded as it came,
// vLLM might read it (see jsonText) with the client's own cache_salt.
func Invocations(body []byte, tenant string, lim Limits) (Request, error) {
	if err := ValidTenant(tenant); err != nil {
		return Request{}, err
	}
	req := Request{Tenant: tenant}
	body, err := readObject(body, &req, nil)
	if err != nil {
		return Request{}, err
	}
	n := min(len(body), lim.Window+lim.Lookahead)
	req.Text, req.WindowBytes, req.PromptBytes = body[:n:n], min(n, lim.Window), len(body)
	return req, nil
}

// openObject is a scanner at the start of a body that must be one JSON
// object, after jsonText.
func openObject(body []byte) (*scanner, error) {
	body, err := jsonText(body)
	if err != nil {
		return nil, err
	}
	s := &scanner{data: body}
	if s.peek() != '{' {
		return nil, s.fail("the body must be a JSON object")
	}
	return s, nil
}

// readObject reads a body that must be one JSON object into req: the
// members every inference body has alike (sharedMember), then those member
// reads (reporting whether it did; nil for none), skipping the rest. It
// returns the body without a byte order mark.
func readObject(body []byte, req *Request, member func(s *scanner, key jsonString) (bool, error)) ([]byte, error) {
	s, err := openObject(body)
	if err != nil {
		return nil, err
	}
	err = s.object(func(key jsonString) error {
		if ok, err := s.sharedMember(key, req); ok {
			return err
		}
		if member != nil {
			if ok, err := member(s, key); ok {
				return err
			}
		}
		_, err := s.skip(1)
		return err
	})
	if err != nil {
		return nil, err
	}
	if s.peek() != 0 {
		return nil, s.fail("trailing data after the JSON object")
	}
	return s.data, nil
}

// sharedMember reads the top-level members every inference body has alike
// (stream and the tenant claims), reporting whether key was one of them.
func (s *scanner) sharedMember(key jsonString, req *Request) (bool, error) {
	switch {
	case key.is("stream"):
		switch s.peek() {
		case 't':
			req.Stream = true
			return true, s.literal("true")
		case 'f':
			req.Stream = false
			return true, s.literal("false")
		case 'n':
			return true, s.literal("null")
		}
		return true, &fieldError{field: "stream", msg: "must be a boolean"}
	case key.is("prompt_cache_key"):
		v, err := s.optString("prompt_cache_key")
		req.PromptCacheKey, req.TenantFields = v, true
		return true, err
	case key.is("cache_salt"):
		v, err := s.optString("cache_salt")
		req.ClientSalt, req.TenantFields = v, true
		return true, err
	}
	return false, nil
}

// Kind is which OpenAI endpoint a body was sent to.
type Kind int

const (
	Chat        Kind = iota // /v1/chat/completions: "messages"
	Completions             // /v1/completions: "prompt"
)

// Separators in the routing text, so that moving text between messages or
// roles changes the key (bytes that JSON text rarely contains).
const (
	sepRole    = 0x1f // after a role name
	sepMessage = 0x1e // after a message or a prompt element
	sepPart    = 0x1d // before a non-text content part
)

// OpenAI extracts from a chat or completions body. tenant (from the
// headers or the authentication) is validated and kept; the body's own
// claims are returned apart, for ClaimBodyTenant. The messages' text is
// gathered in message order, each message's fields in a fixed order, so
// JSON whitespace and key order do not matter.
func OpenAI(kind Kind, body []byte, tenant string, lim Limits) (Request, error) {
	if err := ValidTenant(tenant); err != nil {
		return Request{}, err
	}
	var req Request
	tb := textBuilder{window: lim.Window, lookahead: lim.Lookahead}
	// Pooled: the text is needed only until the decision is made.
	pooled := getBuffer(min(len(body), 4*lim.Window+lim.Lookahead))
	tb.buf = *pooled
	_, err := readObject(body, &req, func(s *scanner, key jsonString) (bool, error) {
		switch {
		case key.is("model"):
			v, err := s.optString("model")
			req.Model = v
			return true, err
		case kind == Chat && key.is("messages"):
			tb.reset() // a repeated key replaces the earlier one, as in encoding/json
			return true, s.messages(&tb)
		case kind == Completions && key.is("prompt"):
			tb.reset()
			return true, s.prompt(&tb)
		}
		return false, nil
	})
	if err != nil {
		return Request{}, err
	}
	req.Tenant = tenant
	req.Text, req.WindowBytes, req.PromptBytes, req.pooled = tb.buf, tb.windowBytes(), tb.prompt, pooled
	return req, nil
}

// ClaimBodyTenant believes the body's claim of a tenant when the caller
// gave none (an unauthenticated router): prompt_cache_key, else a
// cache_salt the client chose, which thus keeps separating that client's
// blocks from others' as it meant to (through the router's derived salt,
// never verbatim). A prompt_cache_key must be a valid tenant id; a
// cache_salt may be any string, as vLLM takes any, since it is only ever
// hashed.
func (r *Request) ClaimBodyTenant() error {
	if r.Tenant != "" {
		return nil
	}
	if err := ValidTenant(r.PromptCacheKey); err != nil {
		return &fieldError{field: "prompt_cache_key", msg: err.Error()}
	}
	r.Tenant = r.PromptCacheKey
	if r.Tenant == "" {
		r.Tenant = r.ClientSalt
	}
	return nil
}

// fieldError is a well-formed body with a field of the wrong type.
type fieldError struct{ field, msg string }

func (e *fieldError) Error() string { return fmt.Sprintf("%s: %s", e.field, e.msg) }

// Param names the offending field, for the OpenAI error's "param".
func Param(err error) string {
	var fe *fieldError
	if errors.As(err, &fe) {
		return fe.field
	}
	return ""
}

func (s *scanner) optString(field string) (string, error) {
	switch s.peek() {
	case 'n':
		return "", s.literal("null")
	case '"':
		v, err := s.str()
		if err != nil || !v.escaped {
			return string(v.raw), err
		}
		return string(appendDecoded(nil, v.raw)), nil
	}
	return "", s.wrongType(1, field, "must be a string")
}

// wrongType skips a value of the wrong type at depth: a syntax error in it
// is reported first, then the field's.
func (s *scanner) wrongType(depth int, field, msg string) error {
	if _, err := s.skip(depth); err != nil {
		return err
	}
	return &fieldError{field: field, msg: msg}
}

// messages reads the chat messages, appending each one's text.
func (s *scanner) messages(tb *textBuilder) error {
	if s.peek() != '[' {
		return s.wrongType(1, "messages", "must be an array")
	}
	return s.array(func() error {
		if s.peek() != '{' {
			return s.wrongType(2, "messages", "each message must be an object")
		}
		var role, name, toolCallID, content jsonString
		var parts, toolCalls, refusal []byte
		var contentSize int
		err := s.object(func(key jsonString) error {
			var err error
			switch {
			case key.is("role"):
				role, err = s.strOrSkip(3)
			case key.is("name"):
				name, err = s.strOrSkip(3)
			case key.is("tool_call_id"):
				toolCallID, err = s.strOrSkip(3)
			case key.is("content"):
				// A string content, most of a large body, is kept as
				// found; an array of parts is read for its size now and
				// for its text only while the routing text wants more.
				content, parts = jsonString{}, nil // a repeated key replaces the earlier one
				if s.peek() == '"' {
					content, err = s.str()
					contentSize = content.size
				} else {
					start := s.pos
					contentSize, err = s.content(3, &textBuilder{}) // keeps nothing
					parts = s.data[start:s.pos]
				}
			case key.is("tool_calls"):
				toolCalls, err = s.skip(3)
			case key.is("refusal"):
				refusal, err = s.skip(3)
			default:
				_, err = s.skip(3)
			}
			return err
		})
		tb.prompt += contentSize
		if err != nil || tb.full() {
			return err
		}
		tb.addString(role)
		tb.addByte(sepRole)
		tb.addString(name)
		tb.addString(toolCallID)
		tb.addString(content)
		emitContent(parts, tb)
		emitContent(refusal, tb)
		emitToolCalls(toolCalls, tb)
		tb.addByte(sepMessage)
		return nil
	})
}

// strOrSkip reads a string, or skips any other value as an empty string.
func (s *scanner) strOrSkip(depth int) (jsonString, error) {
	if s.peek() == '"' {
		return s.str()
	}
	_, err := s.skip(depth)
	return jsonString{}, err
}

// emitContent appends the text of a message content or refusal that was
// validated already.
func emitContent(raw []byte, tb *textBuilder) {
	if len(raw) > 0 && !tb.full() {
		_, _ = (&scanner{data: raw}).content(0, tb)
	}
}

// content reads a message content (a string, an array of parts, or any
// other value, which has no text) at depth, appends its text to tb and
// returns the size of its text: the strings, and the text of the parts.
// A part without text adds its type and its media's identifying string.
func (s *scanner) content(depth int, tb *textBuilder) (int, error) {
	switch s.peek() {
	case '"':
		v, err := s.str()
		tb.addString(v)
		return v.size, err
	case '[':
	default:
		_, err := s.skip(depth)
		return 0, err
	}
	size := 0
	err := s.array(func() error {
		if s.peek() != '{' {
			v, err := s.skip(depth + 1)
			tb.addString(jsonString{raw: v})
			return err
		}
		var typ, text, media jsonString
		err := s.object(func(key jsonString) error {
			var err error
			switch {
			case key.is("type"):
				typ, err = s.strOrSkip(depth + 2)
			case key.is("text"), key.is("refusal"):
				text, err = s.strOrSkip(depth + 2)
			case s.peek() == '{':
				// image_url, input_audio, file, video_url…: their
				// identifying string (url, data, file_id, file_data).
				err = s.object(func(k jsonString) error {
					if media.raw == nil && (k.is("url") || k.is("data") || k.is("file_id") || k.is("file_data")) {
						var err error
						media, err = s.strOrSkip(depth + 3)
						return err
					}
					_, err := s.skip(depth + 3)
					return err
				})
			default:
				_, err = s.skip(depth + 2)
			}
			return err
		})
		if text.raw != nil {
			tb.addString(text)
			size += text.size
		} else {
			tb.addByte(sepPart)
			tb.addString(typ)
			tb.addByte(':')
			tb.addString(media)
		}
		return err
	})
	return size, err
}

// emitToolCalls appends each call's function name and arguments.
func emitToolCalls(raw []byte, tb *textBuilder) {
	if len(raw) == 0 || tb.full() {
		return
	}
	s := &scanner{data: raw}
	if s.peek() != '[' {
		return
	}
	_ = s.array(func() error {
		var name, args jsonString
		if s.peek() != '{' {
			_, err := s.skip(1)
			return err
		}
		err := s.object(func(key jsonString) error {
			if !key.is("function") || s.peek() != '{' {
				_, err := s.skip(2)
				return err
			}
			return s.object(func(k jsonString) error {
				var err error
				switch {
				case k.is("name"):
					name, err = s.strOrSkip(3)
				case k.is("arguments"):
					args, err = s.strOrSkip(3)
				default:
					_, err = s.skip(3)
				}
				return err
			})
		})
		tb.addByte(sepPart)
		tb.addString(name)
		tb.addByte('(')
		tb.addString(args)
		tb.addByte(')')
		return err
	})
}

// prompt reads a completions prompt: a string, an array of strings, an
// array of token ids, or an array of arrays of token ids.
func (s *scanner) prompt(tb *textBuilder) error {
	text := func() error {
		v, err := s.str()
		tb.addString(v)
		tb.prompt += v.size
		return err
	}
	switch s.peek() {
	case '"':
		return text()
	case '[':
		return s.array(func() error {
			switch s.peek() {
			case '"':
				err := text()
				tb.addByte(sepMessage)
				return err
			case '[':
				err := s.array(func() error { return s.tokenID(tb) })
				tb.addByte(sepMessage)
				return err
			default:
				return s.tokenID(tb)
			}
		})
	}
	return s.wrongType(1, "prompt", "must be a string, an array of strings or an array of token ids")
}

func (s *scanner) tokenID(tb *textBuilder) error {
	if c := s.peek(); c != '-' && (c < '0' || c > '9') {
		return s.wrongType(3, "prompt", "token ids must be integers") // such as [{}]
	}
	start := s.pos
	if err := s.number(); err != nil {
		return err
	}
	if _, err := strconv.ParseInt(string(s.data[start:s.pos]), 10, 64); err != nil {
		return &fieldError{field: "prompt", msg: "token ids must be integers"}
	}
	tb.add(s.data[start:s.pos])
	tb.addByte(',')
	return nil
}

// textBuilder gathers routing text: the window, up to a number of
// characters (runes; each invalid UTF-8 byte counts as one), then up to
// lookahead more bytes.
type textBuilder struct {
	buf       []byte
	runes     int // characters in the window so far
	window    int // characters in the window
	winEnd    int // byte length of the window, once complete
	lookahead int // bytes kept past the window
	prompt    int // size of the prompt text, kept or not
}

func (tb *textBuilder) reset() {
	*tb = textBuilder{buf: tb.buf[:0], window: tb.window, lookahead: tb.lookahead}
}

func (tb *textBuilder) windowDone() bool { return tb.runes >= tb.window }

func (tb *textBuilder) full() bool {
	return tb.windowDone() && len(tb.buf) >= tb.winEnd+tb.lookahead
}

func (tb *textBuilder) windowBytes() int {
	if !tb.windowDone() {
		return len(tb.buf)
	}
	return tb.winEnd
}

func (tb *textBuilder) addByte(b byte) { tb.add([]byte{b}) }

// addString adds a string's text. Escaped text is decoded a chunk at a
// time and only until the builder is full, so that the work is bounded by
// what is kept, however long the string.
func (tb *textBuilder) addString(v jsonString) {
	raw := v.raw
	if !v.escaped {
		tb.add(raw)
		return
	}
	var chunk [256]byte
	dec := chunk[:0]
	for len(raw) > 0 && !tb.full() {
		i := bytes.IndexByte(raw, '\\')
		if i < 0 {
			i = len(raw)
		}
		if i > len(chunk)-utf8.UTFMax-len(dec) {
			// A long run without escapes goes in as it is.
			tb.add(dec)
			dec = dec[:0]
			tb.add(raw[:i])
		} else {
			dec = append(dec, raw[:i]...)
		}
		raw = raw[i:]
		if len(raw) == 0 {
			break
		}
		r, w := escape(raw)
		if w == 0 { // not from str
			break
		}
		dec = utf8.AppendRune(dec, r)
		raw = raw[w:]
		if len(dec) > len(chunk)-utf8.UTFMax {
			tb.add(dec)
			dec = dec[:0]
		}
	}
	tb.add(dec)
}

func (tb *textBuilder) add(b []byte) {
	if !tb.windowDone() {
		n := tb.countWindow(b)
		tb.buf = appendInPieces(tb.buf, b[:n])
		b = b[n:]
		if tb.windowDone() {
			tb.winEnd = len(tb.buf)
		}
	}
	if room := tb.winEnd + tb.lookahead - len(tb.buf); tb.windowDone() && room > 0 && len(b) > 0 {
		tb.buf = appendInPieces(tb.buf, b[:min(len(b), room)])
	}
}

// copyPiece is under the 2 KiB from which Go's amd64 memmove copies with
// REP MOVSQ, which on recent Intel Xeons runs several times slower than its
// vector loop when source and destination are aligned differently, as text
// inside a body mostly is.
const copyPiece = 2<<10 - 1

// appendInPieces appends src to dst in pieces of at most copyPiece bytes.
func appendInPieces(dst, src []byte) []byte {
	for len(src) > copyPiece {
		dst = append(dst, src[:copyPiece]...)
		src = src[copyPiece:]
	}
	return append(dst, src...)
}

// countWindow counts the characters at the start of b into the window until
// it is full or b ends, and returns how many bytes they take, for the
// caller to copy at once rather than a character at a time.
func (tb *textBuilder) countWindow(b []byte) int {
	n := 0
	for n < len(b) && !tb.windowDone() {
		if b[n] < utf8.RuneSelf {
			// ASCII fast path: one character per byte.
			k := asciiPrefix(b[n:min(len(b), n+tb.window-tb.runes)])
			n += k
			tb.runes += k
		} else {
			_, w := utf8.DecodeRune(b[n:])
			n += w
			tb.runes++
		}
	}
	return n
}

// asciiPrefix is the length of b's leading run of ASCII bytes: 32-byte
// blocks first, with one branch for four words, then words and bytes.
func asciiPrefix(b []byte) int {
	n := 0
	for ; n+32 <= len(b); n += 32 {
		w := b[n : n+32 : n+32] // one bounds check for the four loads
		if (binary.LittleEndian.Uint64(w)|binary.LittleEndian.Uint64(w[8:])|
			binary.LittleEndian.Uint64(w[16:])|binary.LittleEndian.Uint64(w[24:]))&highs != 0 {
			break
		}
	}
	for n+8 <= len(b) && binary.LittleEndian.Uint64(b[n:])&highs == 0 {
		n += 8
	}
	for n < len(b) && b[n] < utf8.RuneSelf {
		n++
	}
	return n
}

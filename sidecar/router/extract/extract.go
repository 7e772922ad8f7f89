// Package extract reads what routing needs from a request body: the routing
// text (the window of the prompt and a lookahead past it), the model, the
// tenant and whether the response streams. It works on raw bytes and never
// holds more of the prompt than the window and lookahead.
package extract

import (
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
	// Lookahead is how many more bytes of text to keep past the window.
	// Bytes, not characters: it only feeds block hashing, and counting
	// characters over tens of kilobytes would double the extraction time.
	Lookahead int
}

// Request is what the router needs from a body.
type Request struct {
	Model        string
	Tenant       string
	Stream       bool
	HasCacheSalt bool
	// Text is the window followed by the lookahead; WindowBytes is the
	// length of the window part.
	Text        []byte
	WindowBytes int
	owned       bool // Text came from the pool
}

var textBuffers sync.Pool

func getBuffer(size int) []byte {
	if b, ok := textBuffers.Get().(*[]byte); ok && cap(*b) >= size {
		return (*b)[:0]
	}
	return make([]byte, 0, size)
}

// Release returns the routing text's memory for reuse; the request's Text
// must not be used afterwards. Calling it is optional.
func (r *Request) Release() {
	if r.Text != nil && r.owned {
		b := r.Text[:0]
		textBuffers.Put(&b)
	}
	r.Text, r.owned = nil, false
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

// Invocations extracts from the native invoke API, whose body is opaque: the
// routing text is its first bytes.
func Invocations(body []byte, tenant string, lim Limits) (Request, error) {
	if err := ValidTenant(tenant); err != nil {
		return Request{}, err
	}
	n := min(len(body), lim.Window+lim.Lookahead)
	return Request{Tenant: tenant, Text: body[:n:n], WindowBytes: min(n, lim.Window)}, nil
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

// OpenAI extracts from a chat or completions body. headerTenant (already
// taken from the request headers) wins over the body's prompt_cache_key.
// The text of the messages is gathered in message order, each message's
// fields in a fixed order, so JSON whitespace and key order do not matter.
func OpenAI(kind Kind, body []byte, headerTenant string, lim Limits) (Request, error) {
	if err := ValidTenant(headerTenant); err != nil {
		return Request{}, err
	}
	var req Request
	tb := textBuilder{window: lim.Window, lookahead: lim.Lookahead}
	// Pooled: the text is needed only until the decision is made.
	tb.buf = getBuffer(min(len(body), 4*lim.Window+lim.Lookahead))
	s := &scanner{data: body}
	var cacheKey string
	if s.peek() != '{' {
		return Request{}, s.fail("the body must be a JSON object")
	}
	err := s.object(0, func(key []byte, esc bool) error {
		switch {
		case keyIs(key, esc, "model"):
			v, err := s.optString("model")
			req.Model = v
			return err
		case keyIs(key, esc, "stream"):
			switch s.peek() {
			case 't':
				req.Stream = true
				return s.literal("true")
			case 'f':
				req.Stream = false
				return s.literal("false")
			case 'n':
				return s.literal("null")
			}
			return &fieldError{field: "stream", msg: "must be a boolean"}
		case keyIs(key, esc, "prompt_cache_key"):
			v, err := s.optString("prompt_cache_key")
			cacheKey = v
			return err
		case keyIs(key, esc, "cache_salt"):
			if s.peek() == 'n' {
				return s.literal("null")
			}
			_, err := s.optString("cache_salt")
			req.HasCacheSalt = true
			return err
		case kind == Chat && keyIs(key, esc, "messages"):
			tb.reset() // a repeated key replaces the earlier one, as in encoding/json
			return s.messages(&tb)
		case kind == Completions && keyIs(key, esc, "prompt"):
			tb.reset()
			return s.prompt(&tb)
		}
		_, err := s.skip(1)
		return err
	})
	if err != nil {
		return Request{}, err
	}
	if s.peek() != 0 {
		return Request{}, s.fail("trailing data after the JSON object")
	}
	req.Tenant = headerTenant
	if req.Tenant == "" {
		if err := ValidTenant(cacheKey); err != nil {
			return Request{}, &fieldError{field: "prompt_cache_key", msg: err.Error()}
		}
		req.Tenant = cacheKey
	}
	req.Text, req.WindowBytes, req.owned = tb.buf, tb.windowBytes(), true
	return req, nil
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
		raw, esc, err := s.str()
		if err != nil || !esc {
			return string(raw), err
		}
		return string(unescape(nil, raw)), nil
	}
	if _, err := s.skip(1); err != nil {
		return "", err
	}
	return "", &fieldError{field: field, msg: "must be a string"}
}

// messages reads the chat messages, appending each one's text.
func (s *scanner) messages(tb *textBuilder) error {
	if s.peek() != '[' {
		_, err := s.skip(1)
		if err != nil {
			return err
		}
		return &fieldError{field: "messages", msg: "must be an array"}
	}
	return s.array(1, func() error {
		if s.peek() != '{' {
			_, err := s.skip(2)
			if err != nil {
				return err
			}
			return &fieldError{field: "messages", msg: "each message must be an object"}
		}
		var role, name, content, toolCalls, toolCallID, refusal []byte
		var roleEsc, nameEsc, idEsc, contentEsc, contentIsString bool
		err := s.object(2, func(key []byte, esc bool) error {
			var err error
			switch {
			case keyIs(key, esc, "role"):
				role, roleEsc, err = s.strOrSkip()
			case keyIs(key, esc, "name"):
				name, nameEsc, err = s.strOrSkip()
			case keyIs(key, esc, "tool_call_id"):
				toolCallID, idEsc, err = s.strOrSkip()
			case keyIs(key, esc, "content"):
				// A string content is kept as found rather than scanned
				// again: it is most of a large body.
				if s.peek() == '"' {
					content, contentEsc, err = s.str()
					contentIsString = true
				} else {
					content, err = s.skip(3)
				}
			case keyIs(key, esc, "tool_calls"):
				toolCalls, err = s.skip(3)
			case keyIs(key, esc, "refusal"):
				refusal, err = s.skip(3)
			default:
				_, err = s.skip(3)
			}
			return err
		})
		if err != nil || tb.full() {
			return err
		}
		tb.addRaw(role, roleEsc)
		tb.addByte(sepRole)
		tb.addRaw(name, nameEsc)
		tb.addRaw(toolCallID, idEsc)
		if contentIsString {
			tb.addRaw(content, contentEsc)
		} else {
			emitContent(content, tb)
		}
		emitContent(refusal, tb)
		emitToolCalls(toolCalls, tb)
		tb.addByte(sepMessage)
		return nil
	})
}

// strOrSkip returns a string's raw contents, or nothing for other values.
func (s *scanner) strOrSkip() ([]byte, bool, error) {
	if s.peek() == '"' {
		return s.str()
	}
	_, err := s.skip(3)
	return nil, false, err
}

// emitContent appends the text of a message content (string, array of
// parts, or null). The value was validated when it was skipped.
func emitContent(raw []byte, tb *textBuilder) {
	if len(raw) == 0 || tb.full() {
		return
	}
	s := &scanner{data: raw}
	switch s.peek() {
	case '"':
		v, esc, _ := s.str()
		tb.addRaw(v, esc)
	case '[':
		_ = s.array(0, func() error {
			if s.peek() != '{' {
				v, err := s.skip(1)
				tb.addRaw(v, false)
				return err
			}
			var typ, text, media []byte
			var typEsc, textEsc, mediaEsc bool
			err := s.object(1, func(key []byte, esc bool) error {
				var err error
				switch {
				case keyIs(key, esc, "type"):
					typ, typEsc, err = s.strOrSkip()
				case keyIs(key, esc, "text"), keyIs(key, esc, "refusal"):
					text, textEsc, err = s.strOrSkip()
				case s.peek() == '{':
					// image_url, input_audio, file, video_url…: their
					// identifying string (url, data, file_id, file_data).
					err = s.object(2, func(k []byte, e bool) error {
						if media == nil && (keyIs(k, e, "url") || keyIs(k, e, "data") || keyIs(k, e, "file_id") || keyIs(k, e, "file_data")) {
							var err error
							media, mediaEsc, err = s.strOrSkip()
							return err
						}
						_, err := s.skip(3)
						return err
					})
				default:
					_, err = s.skip(2)
				}
				return err
			})
			if text != nil {
				tb.addRaw(text, textEsc)
			} else {
				tb.addByte(sepPart)
				tb.addRaw(typ, typEsc)
				tb.addByte(':')
				tb.addRaw(media, mediaEsc)
			}
			return err
		})
	}
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
	_ = s.array(0, func() error {
		var name, args []byte
		var nameEsc, argsEsc bool
		if s.peek() != '{' {
			_, err := s.skip(1)
			return err
		}
		err := s.object(1, func(key []byte, esc bool) error {
			if !keyIs(key, esc, "function") || s.peek() != '{' {
				_, err := s.skip(2)
				return err
			}
			return s.object(2, func(k []byte, e bool) error {
				var err error
				switch {
				case keyIs(k, e, "name"):
					name, nameEsc, err = s.strOrSkip()
				case keyIs(k, e, "arguments"):
					args, argsEsc, err = s.strOrSkip()
				default:
					_, err = s.skip(3)
				}
				return err
			})
		})
		tb.addByte(sepPart)
		tb.addRaw(name, nameEsc)
		tb.addByte('(')
		tb.addRaw(args, argsEsc)
		tb.addByte(')')
		return err
	})
}

// prompt reads a completions prompt: a string, an array of strings, an
// array of token ids, or an array of arrays of token ids.
func (s *scanner) prompt(tb *textBuilder) error {
	switch s.peek() {
	case '"':
		v, esc, err := s.str()
		tb.addRaw(v, esc)
		return err
	case '[':
		return s.array(1, func() error {
			switch c := s.peek(); {
			case c == '"':
				v, esc, err := s.str()
				tb.addRaw(v, esc)
				tb.addByte(sepMessage)
				return err
			case c == '[':
				err := s.array(2, func() error { return s.tokenID(tb) })
				tb.addByte(sepMessage)
				return err
			default:
				return s.tokenID(tb)
			}
		})
	}
	if _, err := s.skip(1); err != nil {
		return err
	}
	return &fieldError{field: "prompt", msg: "must be a string, an array of strings or an array of token ids"}
}

func (s *scanner) tokenID(tb *textBuilder) error {
	s.ws()
	start := s.pos
	if err := s.number(); err != nil {
		return err
	}
	if _, err := strconv.ParseInt(string(s.data[start:s.pos]), 10, 64); err != nil {
		return &fieldError{field: "prompt", msg: "token ids must be integers"}
	}
	tb.addRaw(s.data[start:s.pos], false)
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

// addRaw adds a raw JSON string's contents, decoding escapes if any.
func (tb *textBuilder) addRaw(raw []byte, escaped bool) {
	if len(raw) == 0 || tb.full() {
		return
	}
	if escaped {
		// Decoding can only shrink; cap the work at what still fits (a
		// character takes at most 12 raw bytes, as a surrogate pair).
		room := (tb.window-tb.runes)*12 + tb.lookahead*6
		if len(raw) > room {
			raw = raw[:room]
			for len(raw) > 0 && !validEscapedPrefix(raw) {
				raw = raw[:len(raw)-1]
			}
		}
		raw = unescape(nil, raw)
	}
	tb.add(raw)
}

// validEscapedPrefix reports whether raw does not end inside an escape.
func validEscapedPrefix(raw []byte) bool {
	for i := max(0, len(raw)-12); i < len(raw); i++ {
		if raw[i] == '\\' {
			need := 2
			if i+1 < len(raw) && raw[i+1] == 'u' {
				need = 6
				// a high surrogate wants its low half too
				if i+6 <= len(raw) && hex4(raw[i+2:i+6])&0xfc00 == 0xd800 {
					need = 12
				}
			}
			if i+need > len(raw) {
				return false
			}
			i += need - 1
		}
	}
	return true
}

func (tb *textBuilder) add(b []byte) {
	for len(b) > 0 && !tb.windowDone() {
		// ASCII fast path: one character per byte.
		n := asciiPrefix(b[:min(len(b), tb.window-tb.runes)])
		if n == 0 {
			_, n = utf8.DecodeRune(b)
			tb.runes++
		} else {
			tb.runes += n
		}
		tb.buf = append(tb.buf, b[:n]...)
		b = b[n:]
		if tb.windowDone() {
			tb.winEnd = len(tb.buf)
		}
	}
	if room := tb.winEnd + tb.lookahead - len(tb.buf); tb.windowDone() && room > 0 && len(b) > 0 {
		tb.buf = append(tb.buf, b[:min(len(b), room)]...)
	}
}

// asciiPrefix is the length of b's leading run of ASCII bytes, tested eight
// bytes at a time: the lookahead can be tens of kilobytes of text.
func asciiPrefix(b []byte) int {
	n := 0
	for n+8 <= len(b) && binary.LittleEndian.Uint64(b[n:])&0x8080808080808080 == 0 {
		n += 8
	}
	for n < len(b) && b[n] < utf8.RuneSelf {
		n++
	}
	return n
}

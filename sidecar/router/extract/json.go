package extract

import (
	"bytes"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner is a small validating JSON reader over a byte slice. It exists
// because the routing decision must read a 64 KiB body in a few
// microseconds: encoding/json would allocate the whole document, whereas
// this only skips what the router does not need (strings are skipped with
// bytes.IndexByte) and decodes the few strings it keeps.
//
// It checks structure, literals and escapes, but not control characters or
// UTF-8 inside strings: the backend parses the body anyway and reports
// those, and the router must only route consistently.
type scanner struct {
	data []byte
	pos  int
}

// SyntaxError is malformed JSON; Offset is a byte position in the body.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at byte %d: %s", e.Offset, e.Msg)
}

func (s *scanner) fail(msg string) error { return &SyntaxError{Offset: s.pos, Msg: msg} }

func (s *scanner) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.pos >= len(s.data) {
		return 0
	}
	return s.data[s.pos]
}

func (s *scanner) expect(c byte) error {
	if s.peek() != c {
		if s.pos >= len(s.data) {
			return s.fail(fmt.Sprintf("unexpected end, want %q", c))
		}
		return s.fail(fmt.Sprintf("unexpected %q, want %q", s.data[s.pos], c))
	}
	s.pos++
	return nil
}

// str reads a string and returns its raw contents (between the quotes) and
// whether it holds escapes.
func (s *scanner) str() ([]byte, bool, error) {
	if err := s.expect('"'); err != nil {
		return nil, false, err
	}
	start, escaped := s.pos, false
	for {
		q := bytes.IndexByte(s.data[s.pos:], '"')
		if q < 0 {
			s.pos = len(s.data)
			return nil, false, s.fail("unterminated string")
		}
		b := bytes.IndexByte(s.data[s.pos:s.pos+q], '\\')
		if b < 0 {
			s.pos += q + 1
			return s.data[start : s.pos-1], escaped, nil
		}
		escaped = true
		s.pos += b + 1
		if s.pos >= len(s.data) {
			return nil, false, s.fail("unterminated escape")
		}
		switch s.data[s.pos] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			s.pos++
		case 'u':
			if s.pos+5 > len(s.data) || !isHex4(s.data[s.pos+1:s.pos+5]) {
				return nil, false, s.fail("bad \\u escape")
			}
			s.pos += 5
		default:
			return nil, false, s.fail("bad escape")
		}
	}
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if hexVal(c) < 0 {
			return false
		}
	}
	return true
}

func hexVal(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// skip reads and discards one value, returning its raw bytes.
func (s *scanner) skip(depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, s.fail("nested too deeply")
	}
	c := s.peek()
	start := s.pos
	var err error
	switch {
	case c == '"':
		_, _, err = s.str()
	case c == '{':
		err = s.object(depth, func(_ []byte, _ bool) error { _, err := s.skip(depth + 1); return err })
	case c == '[':
		err = s.array(depth, func() error { _, err := s.skip(depth + 1); return err })
	case c == 't':
		err = s.literal("true")
	case c == 'f':
		err = s.literal("false")
	case c == 'n':
		err = s.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		err = s.number()
	case c == 0:
		err = s.fail("unexpected end, want a value")
	default:
		err = s.fail(fmt.Sprintf("unexpected %q, want a value", c))
	}
	return s.data[start:s.pos], err
}

// maxDepth bounds nesting so hostile bodies cannot exhaust the stack.
const maxDepth = 128

func (s *scanner) literal(lit string) error {
	if !bytes.HasPrefix(s.data[s.pos:], []byte(lit)) {
		return s.fail("bad literal")
	}
	s.pos += len(lit)
	return nil
}

func (s *scanner) number() error {
	start := s.pos
	if s.pos < len(s.data) && s.data[s.pos] == '-' {
		s.pos++
	}
	digits := func() int {
		n := 0
		for s.pos < len(s.data) && '0' <= s.data[s.pos] && s.data[s.pos] <= '9' {
			s.pos++
			n++
		}
		return n
	}
	if s.pos < len(s.data) && s.data[s.pos] == '0' {
		s.pos++
	} else if digits() == 0 {
		return s.fail("bad number")
	}
	if s.pos < len(s.data) && s.data[s.pos] == '.' {
		s.pos++
		if digits() == 0 {
			return s.fail("bad number")
		}
	}
	if s.pos < len(s.data) && (s.data[s.pos] == 'e' || s.data[s.pos] == 'E') {
		s.pos++
		if s.pos < len(s.data) && (s.data[s.pos] == '+' || s.data[s.pos] == '-') {
			s.pos++
		}
		if digits() == 0 {
			return s.fail("bad number")
		}
	}
	if s.pos == start {
		return s.fail("bad number")
	}
	return nil
}

// object reads {…}, calling member for each key with the scanner positioned
// at the value, which member must consume.
func (s *scanner) object(depth int, member func(key []byte, escaped bool) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.pos++
		return nil
	}
	for {
		key, esc, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := member(key, esc); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		default:
			return s.fail("want ',' or '}' in object")
		}
	}
}

// array reads […], calling elem with the scanner at each element.
func (s *scanner) array(depth int, elem func() error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.peek() == ']' {
		s.pos++
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return nil
		default:
			return s.fail("want ',' or ']' in array")
		}
	}
}

// keyIs compares a raw key with a plain name; escaped keys are decoded.
func keyIs(raw []byte, escaped bool, name string) bool {
	if !escaped {
		return string(raw) == name
	}
	return string(unescape(nil, raw)) == name
}

// unescape appends the decoded contents of a valid raw JSON string.
// Unpaired surrogates become U+FFFD, as encoding/json does.
func unescape(dst, raw []byte) []byte {
	for len(raw) > 0 {
		i := bytes.IndexByte(raw, '\\')
		if i < 0 {
			return append(dst, raw...)
		}
		dst = append(dst, raw[:i]...)
		raw = raw[i:]
		switch c := raw[1]; c {
		case 'u':
			r := rune(hex4(raw[2:6]))
			raw = raw[6:]
			if utf16.IsSurrogate(r) {
				r2 := rune(utf8.RuneError)
				if len(raw) >= 6 && raw[0] == '\\' && raw[1] == 'u' {
					r2 = rune(hex4(raw[2:6]))
				}
				if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
					raw = raw[6:]
					r = d
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
			continue
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		default: // '"', '\\', '/'
			dst = append(dst, c)
		}
		raw = raw[2:]
	}
	return dst
}

func hex4(b []byte) int {
	return hexVal(b[0])<<12 | hexVal(b[1])<<8 | hexVal(b[2])<<4 | hexVal(b[3])
}

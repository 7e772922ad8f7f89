package extract

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner is a validating JSON reader over a byte slice that builds no
// tree: it skips what routing does not need, in time linear in its length
// whatever its escapes, and decodes only the text it keeps. encoding/json
// would allocate the whole document on every request.
//
// It checks structure, literals and escapes, but not control characters or
// UTF-8 inside strings: the backend parses the body anyway and reports
// those, and the router must only route consistently.
type scanner struct {
	data []byte
	pos  int
	// keyStart is where the current member's key began (SaltedBody cuts
	// members out whole).
	keyStart int
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

// jsonString is a string as found in the body.
type jsonString struct {
	raw     []byte // between the quotes, escapes undecoded
	size    int    // length in bytes once decoded
	escaped bool
}

// is compares the string with a plain name, decoding escapes if any.
func (v jsonString) is(name string) bool {
	if v.size != len(name) {
		return false
	}
	if !v.escaped {
		return string(v.raw) == name
	}
	var buf [32]byte // keys the router looks for are short
	return string(appendDecoded(buf[:0], v.raw)) == name
}

// str reads a string in one pass, validating its escapes and counting its
// decoded size. q is the next quote at or after pos, searched again only
// once an escaped quote has been passed, and the search for a backslash
// stops at q: searching for the quote after every escape would make
// escape-heavy strings cost their length squared.
func (s *scanner) str() (jsonString, error) {
	if err := s.expect('"'); err != nil {
		return jsonString{}, err
	}
	data := s.data
	// The size stays in a local, not a jsonString field, so that it lives
	// in a register.
	start, pos, q := s.pos, s.pos, -1
	size := 0
	for {
		if q < pos {
			var plain int
			q, plain = nextQuote(data, pos)
			if q < 0 {
				s.pos = len(data)
				return jsonString{}, s.fail("unterminated string")
			}
			pos += plain
			size += plain
		}
		if data[pos] != '\\' { // escapes often follow one another
			i := -1
			if pos+8 <= q { // the first word here, saving a call between escapes
				x := binary.LittleEndian.Uint64(data[pos:]) ^ ('\\' * ones)
				if m := (x - ones) &^ x & highs; m != 0 {
					i = bits.TrailingZeros64(m) >> 3
				}
			}
			if i < 0 {
				i = indexBackslash(data[pos:q])
			}
			if i < 0 {
				s.pos = q + 1
				size += q - pos
				// Every escape decodes to fewer bytes than it takes, so
				// the string has one exactly when it shrinks.
				return jsonString{raw: data[start:q], size: size, escaped: size < q-start}, nil
			}
			size += i
			pos += i
		}
		// An escape; it cannot run past q, which is not part of any.
		if e := data[pos+1]; e != 'u' {
			if simpleEscapes[e] == 0 {
				s.pos = pos
				return jsonString{}, s.fail("bad escape")
			}
			size++
			pos += 2
			continue
		}
		// A run of \uXXXX outside the surrogates, the bulk of text
		// escaped as ASCII, is sized here; the rest by escapeSize. The quote
		// at q is no hex digit, so an escape that ends by q is in the
		// string.
		for pos+6 <= q && data[pos] == '\\' && data[pos+1] == 'u' {
			a, b, c, d := hexDigits[data[pos+2]], hexDigits[data[pos+3]], hexDigits[data[pos+4]], hexDigits[data[pos+5]]
			r := a<<12 | b<<8 | c<<4 | d
			if a|b|c|d > 0xf || r&0xf800 == 0xd800 {
				break
			}
			pos += 6
			switch {
			case r < 0x80:
				size++
			case r < 0x800:
				size += 2
			default:
				size += 3
			}
		}
		if pos >= q || data[pos] != '\\' {
			continue
		}
		n, w := escapeSize(data[pos:])
		if w == 0 {
			s.pos = pos
			return jsonString{}, s.fail("bad \\u escape")
		}
		size += n
		pos += w
	}
}

// quoteBlock is the size of the blocks in which nextQuote looks for a quote
// and then for a backslash: a block is still in L1 cache when searched the
// second time, where a whole long string would be read twice from L2 or L3.
const quoteBlock = 4 << 10

// nextQuote returns the position of the first quote at or after pos (-1 if
// none) and how many bytes from pos it found to hold neither a quote nor a
// backslash. After a block with a backslash the rest is searched at once,
// so no byte is searched for the quote more than twice.
func nextQuote(data []byte, pos int) (q, plain int) {
	start := pos
	for pos+quoteBlock < len(data) {
		block := data[pos : pos+quoteBlock]
		if i := bytes.IndexByte(block, '"'); i >= 0 {
			return pos + i, pos - start
		}
		if bytes.IndexByte(block, '\\') >= 0 {
			break
		}
		pos += quoteBlock
	}
	i := bytes.IndexByte(data[pos:], '"')
	if i < 0 {
		return -1, 0
	}
	return pos + i, pos - start
}

// Bytes repeated in a word, and their high bits, to find a byte in a word.
const ones, highs = 0x0101010101010101, 0x8080808080808080

// indexBackslash is bytes.IndexByte(b, '\\'), faster for the few bytes
// between escapes: it tests the first words itself, as the call's setup
// costs more than they do.
func indexBackslash(b []byte) int {
	i := 0
	for ; i+8 <= len(b) && i < 32; i += 8 {
		// A zero byte of x is a backslash; the lowest high bit of m
		// marks the first (borrows only mark bytes above a zero).
		x := binary.LittleEndian.Uint64(b[i:]) ^ ('\\' * ones)
		if m := (x - ones) &^ x & highs; m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	if i < 32 {
		for ; i < len(b); i++ {
			if b[i] == '\\' {
				return i
			}
		}
		return -1
	}
	if j := bytes.IndexByte(b[i:], '\\'); j >= 0 {
		return i + j
	}
	return -1
}

// escapeSize returns the decoded size and the length of the escape at the
// start of raw (raw[0] is a backslash), or a length of 0 if it is invalid.
// It is escape without building the rune, for the scanner's hot loop.
func escapeSize(raw []byte) (size, width int) {
	if len(raw) < 2 {
		return 0, 0
	}
	if raw[1] != 'u' {
		if simpleEscapes[raw[1]] == 0 {
			return 0, 0
		}
		return 1, 2
	}
	r := u4(raw)
	switch {
	case r < 0:
		return 0, 0
	case r < 0x80:
		return 1, 6
	case r < 0x800:
		return 2, 6
	case r&0xfc00 == 0xd800 && len(raw) >= 12:
		if r2 := u4(raw[6:]); r2&0xfc00 == 0xdc00 { // r2 < 0 is not a low half
			return 4, 12
		}
	}
	return 3, 6 // the rest of the BMP, or U+FFFD for half a surrogate pair
}

// simpleEscapes maps the byte after a backslash to what it stands for, 0
// for none and for u.
var simpleEscapes = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// escape decodes the escape at the start of raw (raw[0] is a backslash):
// the character and the length of the escape, 0 if it is invalid. A \u
// escape of the high half of a surrogate pair takes the low half with it
// when that follows; an unpaired half is U+FFFD, as in encoding/json.
func escape(raw []byte) (rune, int) {
	if len(raw) < 2 {
		return 0, 0
	}
	if raw[1] != 'u' {
		c := simpleEscapes[raw[1]]
		if c == 0 {
			return 0, 0
		}
		return rune(c), 2
	}
	r := u4(raw)
	if r < 0 {
		return 0, 0
	}
	if utf16.IsSurrogate(r) {
		if d := utf16.DecodeRune(r, u4(raw[6:])); d != utf8.RuneError {
			return d, 12
		}
		return utf8.RuneError, 6
	}
	return r, 6
}

// u4 decodes \uXXXX at the start of b, or returns -1.
func u4(b []byte) rune {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return -1
	}
	h := hexDigits[b[2]]<<12 | hexDigits[b[3]]<<8 | hexDigits[b[4]]<<4 | hexDigits[b[5]]
	if hexDigits[b[2]]|hexDigits[b[3]]|hexDigits[b[4]]|hexDigits[b[5]] > 0xf {
		return -1
	}
	return rune(h)
}

// hexDigits maps a byte to its value as a hex digit, or to 0x10 (more than
// a digit) if it is none.
var hexDigits = func() (t [256]int32) {
	for i := range t {
		t[i] = 0x10
	}
	for i := range 10 {
		t['0'+i] = int32(i)
	}
	for i := range 6 {
		t['a'+i], t['A'+i] = int32(10+i), int32(10+i)
	}
	return t
}()

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
		_, err = s.str()
	case c == '{':
		err = s.object(func(jsonString) error { _, err := s.skip(depth + 1); return err })
	case c == '[':
		err = s.array(func() error { _, err := s.skip(depth + 1); return err })
	case c == 't':
		err = s.literal("true")
	case c == 'f':
		err = s.literal("false")
	case c == 'n':
		err = s.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		err = s.number()
	case c == 'N' || c == 'I':
		err = s.fail(errNonStandardNumber)
	case c == 0:
		err = s.fail("unexpected end, want a value")
	default:
		err = s.fail(fmt.Sprintf("unexpected %q, want a value", c))
	}
	return s.data[start:s.pos], err
}

// errNonStandardNumber tells the client why the router refuses NaN and
// Infinity, which Python's json, and so vLLM, would read.
const errNonStandardNumber = "NaN and Infinity are not JSON numbers"

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
	} else if s.pos < len(s.data) && s.data[s.pos] == 'I' {
		return s.fail(errNonStandardNumber)
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
	return nil
}

// object reads {…}, calling member for each key with the scanner positioned
// at the value, which member must consume.
func (s *scanner) object(member func(key jsonString) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.pos++
		return nil
	}
	for {
		s.ws()
		s.keyStart = s.pos
		key, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := member(key); err != nil {
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
func (s *scanner) array(elem func() error) error {
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

// appendDecoded appends the decoded contents of a string's raw bytes, which
// str validated.
func appendDecoded(dst, raw []byte) []byte {
	for len(raw) > 0 {
		i := bytes.IndexByte(raw, '\\')
		if i < 0 {
			return append(dst, raw...)
		}
		dst = append(dst, raw[:i]...)
		r, w := escape(raw[i:])
		if w == 0 { // not from str; keep the rest as it is
			return append(dst, raw[i:]...)
		}
		dst = utf8.AppendRune(dst, r)
		raw = raw[i+w:]
	}
	return dst
}

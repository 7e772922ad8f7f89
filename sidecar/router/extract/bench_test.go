package extract

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// routerLimits are the router's defaults: a 4096-character window and the
// policy's 32 KiB lookahead.
var routerLimits = Limits{Window: 4096, Lookahead: 32 << 10}

// textKind is a kind of prompt text, named after how it appears in a body.
type textKind string

const (
	kindASCII       textKind = "ascii"       // words, no escapes
	kindUTF8        textKind = "utf8"        // CJK as raw UTF-8, no escapes
	kindNewlines    textKind = "newlines"    // short lines: a \n every 8 bytes on average
	kindBMP         textKind = "bmp"         // CJK as \uXXXX (Python's json.dumps default)
	kindPairs       textKind = "pairs"       // emoji as \uD83D\uDE00 surrogate pairs
	kindBackslashes textKind = "backslashes" // one long run of \\
)

var escapedKinds = []textKind{kindNewlines, kindBMP, kindPairs, kindBackslashes}

// promptText returns text of a kind whose JSON form (escaped as Python's
// json.dumps does, or raw UTF-8 for ascii and utf8) takes at least n bytes.
func promptText(kind textKind, n int) string {
	r := rand.New(rand.NewPCG(uint64(n), 7))
	var sb strings.Builder
	for size := 0; size < n; {
		var c rune
		switch kind {
		case kindASCII:
			c = ' '
			if r.IntN(6) != 0 {
				c = rune('a' + r.IntN(26))
			}
		case kindUTF8, kindBMP:
			c = rune(0x4e00 + r.IntN(0x5000))
		case kindNewlines:
			c = '\n'
			if r.IntN(8) != 0 {
				c = rune('a' + r.IntN(26))
			}
		case kindPairs:
			c = rune(0x1f600 + r.IntN(0x50))
		case kindBackslashes:
			c = '\\'
		}
		sb.WriteRune(c)
		if kind == kindASCII || kind == kindUTF8 {
			size += utf8.RuneLen(c)
		} else {
			size += len(quoteASCII(string(c)))
		}
	}
	return sb.String()
}

// quoteASCII returns the contents of a JSON string for s with every
// non-ASCII character escaped, as Python's json.dumps writes it.
func quoteASCII(s string) string {
	var sb strings.Builder
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			sb.WriteByte('\\')
			sb.WriteRune(c)
		case c == '\n':
			sb.WriteString(`\n`)
		case c < 0x20:
			fmt.Fprintf(&sb, `\u%04x`, c)
		case c < utf8.RuneSelf:
			sb.WriteRune(c)
		case c > 0xffff:
			hi, lo := utf16.EncodeRune(c)
			fmt.Fprintf(&sb, `\u%04x\u%04x`, hi, lo)
		default:
			fmt.Fprintf(&sb, `\u%04x`, c)
		}
	}
	return sb.String()
}

// quoteRaw returns the contents of a JSON string for s with non-ASCII text
// left as UTF-8.
func quoteRaw(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

// chatWith returns a chat body whose system message has the given JSON
// string contents, followed by a short user question.
func chatWith(contents string) []byte {
	return []byte(`{"model":"m","messages":[{"role":"system","content":"` + contents +
		`"},{"role":"user","content":"What does it say?"}],"stream":true}`)
}

// kindBody is a chat body of about n bytes of a kind's text.
func kindBody(kind textKind, n int) []byte {
	t := promptText(kind, n)
	if kind == kindASCII || kind == kindUTF8 {
		return chatWith(quoteRaw(t))
	}
	return chatWith(quoteASCII(t))
}

var benchSizes = []struct {
	name string
	n    int
}{{"64KiB", 64 << 10}, {"1MiB", 1 << 20}, {"16MiB", 16 << 20}}

// BenchmarkOpenAI extracts from chat bodies of each kind of text and size,
// with the router's limits. The escaped kinds cost the scanner one step
// per escape; the others are searched for quotes a word at a time.
func BenchmarkOpenAI(b *testing.B) {
	for _, kind := range append([]textKind{kindASCII, kindUTF8}, escapedKinds...) {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("%s/%s", kind, size.name), func(b *testing.B) {
				body := kindBody(kind, size.n)
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					r, err := OpenAI(Chat, body, "", routerLimits)
					if err != nil {
						b.Fatal(err)
					}
					r.Release()
				}
			})
		}
	}
}

// BenchmarkSaltedBody puts the router's salt into a 64 KiB chat body: as
// it comes (one piece inserted) and with a client cache_salt to take out
// (the top-level members are read again, skipping the text).
func BenchmarkSaltedBody(b *testing.B) {
	plain := kindBody(kindASCII, 64<<10)
	withSalt := append([]byte(`{"cache_salt":"client",`), plain[1:]...)
	for _, tc := range []struct {
		name   string
		body   []byte
		fields bool
	}{{"no client salt", plain, false}, {"client salt", withSalt, true}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.body)))
			b.ReportAllocs()
			for range b.N {
				if _, err := SaltedBody(tc.body, "QIl7XCOpZjX36WKVKfJohVpCyEwPSrqzbEJhbT9b4JM", tc.fields); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package extract

import (
	"bytes"
	"encoding/json"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestEscapesDecodeAsEncodingJSON decodes strings with every kind of escape,
// including broken surrogate pairs, and compares the routing text and the
// prompt size with what encoding/json makes of the same string.
func TestEscapesDecodeAsEncodingJSON(t *testing.T) {
	for _, raw := range []string{
		`plain`,
		`\n\t\r\b\f\/\\\"`,
		`\u0041\u00e9\u4e2d\uFFFF\u0000`,
		`\ud83d\ude00`,                // a pair
		`\uD83D\uDE00x`,               // upper case
		`\ud83d`,                      // a lone high half at the end
		`\ud83dx`,                     // a lone high half before text
		`\ude00\ud83d`,                // halves in the wrong order
		`\ud83d\ud83d\ude00`,          // a lone high half, then a pair
		`\ud83d\u0041`,                // a high half, then a BMP character
		`\ud83d\n`,                    // a high half, then a simple escape
		`a\\\\\\\\\\\\\\\\\\\\\\\\b`,  // a run of backslashes
		`\\u0041`,                     // an escaped backslash, then "u0041"
		"caf\xc3\xa9 \\u00e9",         // raw UTF-8 beside an escape
		strings.Repeat(`\u4e2d`, 500), // more than one decoding chunk
		strings.Repeat(`x\n`, 300),
		strings.Repeat("y", 1000) + `\n` + strings.Repeat("z", 100), // a long run without escapes
	} {
		t.Run(raw[:min(len(raw), 24)], func(t *testing.T) {
			var want string
			if err := json.Unmarshal([]byte(`"`+raw+`"`), &want); err != nil {
				t.Fatal(err)
			}
			r, err := OpenAI(Completions, []byte(`{"prompt":"`+raw+`"}`), "", Limits{Window: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			if string(r.Text) != want || r.PromptBytes != len(want) {
				t.Fatalf("text %q (%d bytes counted), want %q (%d)", r.Text, r.PromptBytes, want, len(want))
			}
			// Keys are compared decoded.
			v, err := (&scanner{data: []byte(`"` + raw + `"`)}).str()
			if err != nil || v.size != len(want) || !v.is(want) || v.is(want+"x") || (len(want) > 0 && v.is(want[1:])) {
				t.Fatalf("key %q: %+v %v, want %q", raw, v, err, want)
			}
		})
	}
}

// TestEscapesAtBlockEdges puts an escape, a bad escape or the closing quote
// of a long string at and around the edges of nextQuote's blocks, where
// the search switches from blocks to the rest of the body, and compares
// the result with encoding/json: the same acceptance, routing text and
// prompt size.
func TestEscapesAtBlockEdges(t *testing.T) {
	for _, at := range []int{0, 1, quoteBlock - 2, quoteBlock - 1, quoteBlock, quoteBlock + 1, 2*quoteBlock - 1, 2 * quoteBlock, 3*quoteBlock + 5} {
		for _, esc := range []string{`\n`, `\"`, `\\`, `\u00e9`, `\ud83d\ude00`, `\x`, `\u12`, ``} {
			raw := strings.Repeat("a", at) + esc + strings.Repeat("b", 2*quoteBlock-at%quoteBlock)
			// After the string, a body long enough that the block search
			// runs past the string's end, holding a quote and a backslash.
			body := []byte(`{"prompt":"` + raw + `","x":"` + strings.Repeat(`c\t`, quoteBlock) + `"}`)
			r, err := OpenAI(Completions, body, "", Limits{Window: 1 << 20})
			if valid := json.Valid(body); valid != (err == nil) {
				t.Fatalf("escape %s at %d: valid %v, error %v", esc, at, valid, err)
			}
			if err != nil {
				continue
			}
			var want string
			if err := json.Unmarshal([]byte(`"`+raw+`"`), &want); err != nil {
				t.Fatal(err)
			}
			if string(r.Text) != want || r.PromptBytes != len(want) {
				t.Fatalf("escape %s at %d: %d bytes of text (%d counted), want %d", esc, at, len(r.Text), r.PromptBytes, len(want))
			}
		}
	}
}

// TestBadEscapes are refused wherever they are, even past the window.
func TestBadEscapes(t *testing.T) {
	for _, raw := range []string{`\x`, `\u12`, `\u12G4`, `\ud83d\u12`, `\`, `\u`, `\'`} {
		body := `{"prompt":"` + strings.Repeat("a", 100) + raw + `"}`
		if _, err := OpenAI(Completions, []byte(body), "", Limits{Window: 4}); err == nil {
			t.Errorf("%s accepted", raw)
		}
		if json.Valid([]byte(body)) {
			t.Fatalf("%s is valid JSON", raw)
		}
	}
}

// TestEscapingDoesNotChangeTheKey sends the same text escaped (as Python's
// json.dumps does) and as raw UTF-8, with limits that cut the text inside
// escapes and surrogate pairs: the routing text and the prompt size must
// be the same.
func TestEscapingDoesNotChangeTheKey(t *testing.T) {
	for _, kind := range escapedKinds {
		text := promptText(kind, 8<<10) + "ok"
		escaped, raw := chatWith(quoteASCII(text)), chatWith(quoteRaw(text))
		for _, l := range []Limits{{Window: 1}, {Window: 7, Lookahead: 5}, {Window: 100, Lookahead: 333}, {Window: 4096, Lookahead: 32 << 10}} {
			a, err := OpenAI(Chat, escaped, "", l)
			if err != nil {
				t.Fatalf("%s: %v", kind, err)
			}
			b, err := OpenAI(Chat, raw, "", l)
			if err != nil {
				t.Fatalf("%s: %v", kind, err)
			}
			if !bytes.Equal(a.Text, b.Text) || a.WindowBytes != b.WindowBytes || a.PromptBytes != b.PromptBytes {
				t.Errorf("%s %+v: escaped %q (%d, %d bytes), raw %q (%d, %d bytes)", kind, l,
					a.Text[:min(len(a.Text), 40)], a.WindowBytes, a.PromptBytes, b.Text[:min(len(b.Text), 40)], b.WindowBytes, b.PromptBytes)
			}
			if want := len(text) + len("What does it say?"); a.PromptBytes != want {
				t.Errorf("%s: prompt %d bytes, want %d", kind, a.PromptBytes, want)
			}
		}
	}
}

// TestBackslashRunAtTheWindowEdge: a run of escaped backslashes longer than
// the routing text wants once made the scanner cut an escape in two and
// panic.
func TestBackslashRunAtTheWindowEdge(t *testing.T) {
	for n := 1; n < 120; n++ {
		for _, lead := range []string{"", "a", "ab", "é"} {
			body := `{"prompt":"` + lead + strings.Repeat(`\\`, n) + `"}`
			r, err := OpenAI(Completions, []byte(body), "", Limits{Window: 4, Lookahead: 3})
			if err != nil {
				t.Fatal(err)
			}
			text := lead + strings.Repeat(`\`, n)
			window := string([]rune(text)[:min(4, len([]rune(text)))])
			want := text[:len(window)+min(3, len(text)-len(window))]
			if string(r.Text) != want || r.PromptBytes != len(text) {
				t.Fatalf("%q: text %q (%d bytes), want %q (%d)", body, r.Text, r.PromptBytes, want, len(text))
			}
		}
	}
}

// TestScanTimeIsLinear times extraction of 1 MiB and 4 MiB bodies of each
// kind of escaped text and fails if quadrupling the body more than
// quintuples the median time; a scanner that searches the rest of a string
// again after each escape takes sixteen times as long. The time is the
// thread's CPU time, interleaved, and each sample of the small body
// extracts it four times, so that both samples take about as long and
// suffer alike from a busy machine.
func TestScanTimeIsLinear(t *testing.T) {
	for _, kind := range escapedKinds {
		small, large := kindBody(kind, 1<<20), kindBody(kind, 4<<20)
		extract := func(body []byte, times int) func() {
			return func() {
				for range times {
					r, err := OpenAI(Chat, body, "", routerLimits)
					if err != nil {
						panic(err)
					}
					r.Release()
				}
			}
		}
		runtime.GC()
		extract(small, 1)() // warm up
		var ts, tl []time.Duration
		for range 11 {
			ts = append(ts, onCPU(extract(small, 4))/4)
			tl = append(tl, onCPU(extract(large, 1)))
		}
		slices.Sort(ts)
		slices.Sort(tl)
		ratio := float64(tl[len(tl)/2]) / float64(ts[len(ts)/2])
		t.Logf("%s: 1 MiB %v, 4 MiB %v: ×%.2f", kind, ts[len(ts)/2], tl[len(tl)/2], ratio)
		if ratio > 5 {
			t.Errorf("%s: 4 MiB took %.1f times as long as 1 MiB (medians %v and %v), want at most 5", kind, ratio, tl[len(tl)/2], ts[len(ts)/2])
		}
	}
}

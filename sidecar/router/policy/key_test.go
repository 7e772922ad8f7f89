package policy

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestTextKeysDecideAsTheirHashes runs the same requests through two
// policies, one given keys that hold their text (a decision in the router
// that made them) and one given the keys' block hashes (what the picker
// receives from another replica), and requires the same decisions. The
// traffic sits behind a system prompt longer than the window, so the walk
// reads the lookahead, which a text key hashes only then.
func TestTextKeysDecideAsTheirHashes(t *testing.T) {
	text, hashes := newPolicy(t, PrefixAware, 8, Tuning{}), newPolicy(t, PrefixAware, 8, Tuning{})
	r := rand.New(rand.NewPCG(3, 9))
	system := randomText(r, 6000)
	var open []*Choice
	lookahead := 0
	for i := range 3000 {
		var prompt string
		switch i % 3 {
		case 0:
			prompt = system + randomText(r, 50+r.IntN(3000))
		case 1:
			prompt = system[:r.IntN(4000)] + randomText(r, r.IntN(200))
		default:
			prompt = strings.Repeat("doc ", 1+r.IntN(40)) + randomText(r, r.IntN(9000))
		}
		req := Request{Text: []byte(prompt), WindowBytes: min(len(prompt), 4096), Tenant: []string{"", "t"}[i%2]}
		k := text.Key(req)
		wire := Key{Model: k.Model, Hashes: k.BlockHashes(), WindowBlocks: k.WindowBlocks, TextBytes: k.TextBytes, PromptBytes: k.PromptBytes}
		// 128-byte blocks (prefixLength/32): the window's, then the rest's.
		want := max(1, (req.WindowBytes+127)/128) + (len(prompt)-req.WindowBytes+127)/128
		if got := len(wire.Hashes); got != want {
			t.Fatalf("request %d: %d hashes for %d bytes, want %d", i, got, len(prompt), want)
		}
		a, err := text.Pick(k)
		if err != nil {
			t.Fatal(err)
		}
		b, err := hashes.Pick(wire)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(a.Order(0), b.Order(0)) || a.Decision != b.Decision || charged(a) != charged(b) {
			t.Fatalf("request %d: text key %v %+v, hashes %v %+v", i, a.Order(0), a.Decision, b.Order(0), b.Decision)
		}
		if k.WindowHash(0) != wire.WindowHash(0) {
			t.Fatalf("request %d: window hashes differ", i)
		}
		if int(a.AnchorDepth) >= k.WindowBlocks {
			lookahead++
		}
		open = append(open, a, b)
		if len(open) > 40 {
			for _, c := range open[:20] {
				c.Done()
			}
			open = open[20:]
		}
	}
	if lookahead < 100 {
		t.Errorf("%d decisions anchored past the window, want the lookahead read often", lookahead)
	}
}

// charged is the prefill a choice charges its instance.
func charged(c *Choice) int64 {
	_, prefill, _ := c.Charge()
	return prefill
}

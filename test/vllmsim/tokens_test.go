package vllmsim

import (
	"slices"
	"strings"
	"testing"
)

func TestTokenizerCounts(t *testing.T) {
	tok := tokenizer{charsPerToken: 4}
	tests := []struct {
		text string
		want int
	}{
		{"", 1}, {"a", 2}, {"abcd", 2}, {"abcde", 3}, {strings.Repeat("x", 4000), 1001},
	}
	for _, tt := range tests {
		if got := len(tok.completion(tt.text)); got != tt.want {
			t.Errorf("completion(%d chars) = %d tokens, want %d", len(tt.text), got, tt.want)
		}
	}
	// begin, header, 3 content tokens, end of turn, assistant header
	if got := len(tok.chat([]chatMessage{{"user", "0123456789"}})); got != 7 {
		t.Errorf("chat tokens = %d, want 7", got)
	}
}

func TestTokenizerSharedPrefix(t *testing.T) {
	tok := tokenizer{charsPerToken: 4}
	a := tok.completion("the same long system prompt, then question one")
	b := tok.completion("the same long system prompt, then question two")
	common := 0
	for common < len(a) && a[common] == b[common] {
		common++
	}
	if want := 1 + len("the same long system prompt, then question ")/4; common != want {
		t.Errorf("shared tokens = %d, want %d", common, want)
	}
	if slices.Equal(tok.chat([]chatMessage{{"user", "hi"}}), tok.chat([]chatMessage{{"system", "hi"}})) {
		t.Error("the role does not change the tokens")
	}
}

// TestNextTurnRetokenizesTheAnswer is what makes multi-turn prefix hits
// possible: the prompt of turn two starts with turn one's prompt followed by
// exactly the tokens generated for it.
func TestNextTurnRetokenizesTheAnswer(t *testing.T) {
	for _, cpt := range []int{1, 3, 4, 7} {
		tok := tokenizer{charsPerToken: cpt}
		turn1 := []chatMessage{{"system", "be brief"}, {"user", "hello, odd-length text"}}
		prompt := tok.chat(turn1)
		generated := slices.Clone(prompt)
		var answer strings.Builder
		for j := range 10 {
			id, text := tok.outputToken(42, j)
			generated = append(generated, id)
			answer.WriteString(text)
		}
		turn2 := tok.chat(append(turn1, chatMessage{"assistant", answer.String()}, chatMessage{"user", "more"}))
		if !slices.Equal(turn2[:len(generated)], generated) {
			t.Errorf("chars per token %d: turn two does not start with turn one plus its answer", cpt)
		}
	}
}

func TestChainSeedSeparatesAdaptersAndSalts(t *testing.T) {
	seeds := map[uint64]string{}
	for _, k := range [][2]string{{"", ""}, {"a", ""}, {"", "a"}, {"a", "a"}, {"ab", ""}, {"a", "b"}} {
		s := chainSeed(k[0], k[1])
		if prev, ok := seeds[s]; ok {
			t.Errorf("adapter/salt %q and %q share a seed", prev, k)
		}
		seeds[s] = k[0] + "/" + k[1]
	}
}

package workload

import (
	"slices"
	"testing"
	"time"
)

// TestMixedLengthVariesTenfold checks what the workload is for: its prompt
// lengths span more than ten times, short chats and long documents each
// make up a good part of the stream.
func TestMixedLengthVariesTenfold(t *testing.T) {
	w := MixedLength(MixedLengthConfig{Seed: 1, Chats: 100, DocRequests: 60, Documents: 20})
	var short, long []int
	for _, r := range w.Requests {
		if r.Session != "" {
			short = append(short, r.PromptChars())
		} else {
			long = append(long, r.PromptChars())
		}
	}
	if len(long) != 60 || len(short) < 100 {
		t.Fatalf("%d document requests and %d chat turns, want 60 and at least 100", len(long), len(short))
	}
	slices.Sort(short)
	slices.Sort(long)
	if med := long[len(long)/2] / short[len(short)/2]; med < 10 {
		t.Errorf("median document prompt only %d× the median chat prompt, want ≥ 10×", med)
	}
	if all := long[len(long)-1] / short[0]; all < 10 {
		t.Errorf("prompts span only %d×", all)
	}
}

// TestHotPrefixBursts checks that each burst arrives within its spread and
// that every request shares the one prefix.
func TestHotPrefixBursts(t *testing.T) {
	cfg := HotPrefixConfig{Seed: 1, Bursts: 3, BurstSize: 10, Interval: time.Second, Spread: 50 * time.Millisecond, PrefixTokens: 300}
	w := HotPrefix(cfg)
	if len(w.Requests) != 30 {
		t.Fatalf("%d requests, want 30", len(w.Requests))
	}
	for i, r := range w.Requests {
		burst := time.Duration(i/10) * cfg.Interval
		if r.Arrival < burst || r.Arrival >= burst+cfg.Spread {
			t.Errorf("request %d arrives at %v, outside burst %d", i, r.Arrival, i/10)
		}
		if r.Messages[0].Content != w.Requests[0].Messages[0].Content || len(r.Messages[0].Content) != 300*CharsPerToken {
			t.Errorf("request %d does not start with the shared prefix", i)
		}
	}
}

package vllmsim

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPrefillsShareTheEngine submits four uncached 8,000-token prompts at
// the same instant: chunked prefill serves them in order through the 8,192
// token step budget, so each waits for those ahead of it, as in vLLM.
func TestPrefillsShareTheEngine(t *testing.T) {
	cfg, err := Config{TimeScale: 0.001}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(cfg, newMetrics(cfg))
	defer e.shutdown()

	wake := make(chan struct{}, 1)
	var seqs []*seq
	for _, c := range "abcd" {
		seqs = append(seqs, e.newSeq("", "", e.tok.completion(strings.Repeat(string(c), 4*7999)), 1, wake, false))
	}
	if err := e.submit(seqs...); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for {
		ps := e.progress(seqs)
		if !slices.ContainsFunc(ps, func(p progress) bool { return p.state != seqFinished }) {
			break
		}
		select {
		case <-wake:
		case <-deadline:
			t.Fatal("requests did not finish")
		}
	}

	var ttfts []float64
	for _, p := range e.progress(seqs) {
		ttfts = append(ttfts, p.firstToken-p.arrival)
	}
	// Steps of 8,192 tokens: a and 192 of b; the rest of b and 384 of c;
	// the rest of c and 576 of d; the rest of d. Each prefill-only step also
	// costs the 5 ms overhead.
	step := 8192/25000.0 + 0.005
	want := []float64{step, 2 * step, 3 * step, 3*step + 7424/25000.0 + 0.005}
	for i := range want {
		if math.Abs(ttfts[i]-want[i]) > 1e-9 {
			t.Errorf("ttfts %v, want %v", ttfts, want)
			break
		}
	}
}

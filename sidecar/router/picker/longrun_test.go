package picker

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLongRunMemory runs a leader for 256 instances behind the signed pick
// API with 4 non-leader replicas picking unpaced (pick, then first token,
// then done), each pick a conversation never seen before, so the prefix
// index fills, ages and keeps turning over as in a long production run.
// It fails if a finished request stays in the ledger, or if the leader's
// heap outgrows what the README bounds it by: the ledger's policy and the
// leader's own (its fallback) at their MemoryBytes, plus a fixed allowance
// for the rest of the process. By default it runs 20,000 picks (seconds);
// PICKER_LONG_RUN=N runs N and logs the process's RSS at the end, the
// figure the README reports.
func TestLongRunMemory(t *testing.T) {
	total := 20_000
	if v := os.Getenv("PICKER_LONG_RUN"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("PICKER_LONG_RUN=%q: want a positive number of picks", v)
		}
		total = n
	}
	const replicas, per = 4, 4
	keys := testKeys(t, testSecret)
	cfg := testConfig(keys, 256, 1<<20)
	leader, srv := newLeader(t, keys, cfg)
	ps := make([]*Picker, replicas)
	for i := range ps {
		ps[i] = newReplica(t, fmt.Sprintf("router-%d", i+1), keys, cfg)
		ps[i].Follow(strings.TrimPrefix(srv.URL, "http://"))
	}
	// 4 KiB routing texts: 64 block hashes each, distinct from the first
	// block on, so every pick adds entries.
	doc := strings.Repeat("a long shared document. ", 200)[:4<<10]
	start := time.Now()
	callers(replicas*per, int64(total), func(c int, i int64) bool {
		p := ps[c%replicas]
		tk, err := p.Pick(context.Background(), key(p, fmt.Sprintf("conversation %d: %s", i, doc)), Sender{})
		if err != nil {
			t.Error(err)
			return false
		}
		tk.Prefilled()
		tk.Done()
		return true
	})
	elapsed := time.Since(start)
	// The last done events are on their way (each replica's sender
	// delivers what queued while it was busy).
	l := leader.leading()
	deadline := time.Now().Add(10 * time.Second)
	for l.open() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := l.open(); n > 0 {
		t.Errorf("%d finished requests still held by the ledger", n)
	}
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	ledgerBytes, ownBytes := l.policy.MemoryBytes(), leader.opts.Own.MemoryBytes()
	t.Logf("%d picks in %s (%.0f/s), fallbacks %v; ledger policy: %d index entries, %d bytes; leader's own policy: %d entries, %d bytes; heap in use %d bytes (live %d); process RSS %s",
		total, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), sumFallbacks(t, ps),
		l.policy.IndexEntries(), ledgerBytes, leader.opts.Own.IndexEntries(), ownBytes, m.HeapInuse, m.HeapAlloc, rss(t))
	// The replicas' own policies live in this process too; with the
	// leader's two they are the heap's bounded part.
	bound := uint64(ledgerBytes+ownBytes) + 64<<20
	for _, p := range ps {
		bound += uint64(p.opts.Own.MemoryBytes())
	}
	if m.HeapInuse > bound {
		t.Errorf("heap in use %d bytes, over the policies' bound plus 64 MiB (%d)", m.HeapInuse, bound)
	}
}

func sumFallbacks(t *testing.T, ps []*Picker) float64 {
	var n float64
	for _, p := range ps {
		n += picks(t, p.opts.Metrics, "fallback")
	}
	return n
}

// rss is the process's resident set and its peak, from /proc (Linux).
func rss(t *testing.T) string {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	defer func() { _ = f.Close() }()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), ":"); ok && (k == "VmRSS" || k == "VmHWM") {
			out = append(out, k+" "+strings.TrimSpace(v))
		}
	}
	return strings.Join(out, ", ")
}

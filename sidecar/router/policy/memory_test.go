// The race detector multiplies the heap and the time of 262,144 picks: the
// figure measured here is only meaningful without it.

//go:build !race

package policy

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// TestMemoryAtCapacity fills the prefix index of a 256-instance policy
// past its capacity and logs the heap it holds next to MemoryBytes, the
// bound the README derives; it fails if the index outgrows its capacity or
// the heap its estimate by more than half.
func TestMemoryAtCapacity(t *testing.T) {
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	p := New(Tuning{})
	cfg := Config{Strategy: PrefixAware, Model: "m", HashSeed: 1, PrefixLength: 4096, ConcurrencyThreshold: 1 << 20, Instances: instancesOf(256)}
	if err := p.Update(cfg); err != nil {
		t.Fatal(err)
	}
	capacity := DefaultTuning().IndexEntries
	doc := strings.Repeat("a long shared document. ", 700)[:16<<10]
	for i := 0; p.IndexEntries() < capacity && i < 4*capacity; i++ {
		text := fmt.Sprintf("conversation %d: %s", i, doc)
		c, err := p.Pick(p.Key(Request{Model: "m", Text: []byte(text), WindowBytes: len(text)}))
		if err != nil {
			t.Fatal(err)
		}
		c.Done()
	}
	held := heap() - before
	runtime.KeepAlive(p)
	t.Logf("index %d entries (capacity %d); heap held %d bytes, MemoryBytes %d (index %d B/entry by heap, sketch %d bytes)",
		p.IndexEntries(), capacity, held, p.MemoryBytes(), (held-uint64(p.pop.Bytes()))/uint64(p.IndexEntries()), p.pop.Bytes())
	if p.IndexEntries() > capacity {
		t.Fatalf("index holds %d entries, capacity %d", p.IndexEntries(), capacity)
	}
	if held > uint64(p.MemoryBytes())*3/2 {
		t.Fatalf("heap held %d bytes, over 1.5 x MemoryBytes (%d)", held, p.MemoryBytes())
	}
}

package picker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkPickCall times one decision as a replica sees it, for a 16 KiB
// routing text (window and lookahead: 256 block hashes): in process on the
// leader, and over the signed pick API on loopback from a non-leader, with
// its events riding on the next call. It reports p50 and p99 per pick.
func BenchmarkPickCall(b *testing.B) {
	keys := testKeys(b, testSecret)
	cfg := testConfig(keys, 8, 1<<20)
	for _, remote := range []bool{false, true} {
		name := map[bool]string{false: "leader", true: "non-leader"}[remote]
		b.Run(name, func(b *testing.B) {
			leader := newReplica(b, "router-0", keys, cfg)
			if err := leader.Lead(); err != nil {
				b.Fatal(err)
			}
			p := leader
			if remote {
				srv := serve(b, leader)
				p = newReplica(b, "router-1", keys, cfg)
				p.Follow(strings.TrimPrefix(srv.URL, "http://"))
			}
			ctx := context.Background()
			texts := make([]string, 64)
			for i := range texts {
				texts[i] = fmt.Sprintf("conversation %d: %s", i, strings.Repeat("a long shared document. ", 700))[:16<<10]
			}
			samples := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				tk, err := p.Pick(ctx, key(p, texts[i%len(texts)]))
				if err != nil {
					b.Fatal(err)
				}
				samples = append(samples, time.Since(start))
				tk.Done()
			}
			b.StopTimer()
			if remote && picks(b, p.opts.Metrics, "picker") != float64(b.N) {
				b.Fatalf("%v of %d picks by the picker", picks(b, p.opts.Metrics, "picker"), b.N)
			}
			slices.Sort(samples)
			b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(float64(samples[len(samples)*99/100].Nanoseconds())/1e3, "p99-µs")
			b.ReportMetric(float64(len(key(p, texts[0]).Hashes)), "hashes")
		})
	}
}

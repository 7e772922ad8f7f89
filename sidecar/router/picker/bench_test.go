package picker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warmroute/warmroute/sidecar/router/flow"
	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// BenchmarkPickCall times one decision as a replica sees it, for a 16 KiB
// routing text (window and lookahead: 256 block hashes): in process on the
// leader, and over the signed pick API on loopback from a non-leader, with
// its events riding on the next call. It reports p50 and p99 per pick.
// The flow variants run with flow control on, with room on every
// instance and no rate limit: what flow control costs a request it does
// not hold.
func BenchmarkPickCall(b *testing.B) {
	keys := testKeys(b, testSecret)
	cfg := testConfig(keys, 8, 1<<20)
	on := flow.Config{Default: flow.Limits{Weight: 1, MaxQueued: 100}, QueueTimeout: time.Minute, MaxQueued: 1000}
	for _, v := range []struct {
		name   string
		remote bool
		flow   flow.Config
	}{{"leader", false, flow.Config{}}, {"leader-flow", false, on}, {"non-leader", true, flow.Config{}}, {"non-leader-flow", true, on}} {
		remote := v.remote
		b.Run(v.name, func(b *testing.B) {
			leader := newReplica(b, "router-0", keys, cfg)
			leader.SetFlow(v.flow)
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
				tk, err := p.Pick(ctx, key(p, texts[i%len(texts)]), Sender{})
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
			b.ReportMetric(float64(len(key(p, texts[0]).BlockHashes())), "hashes")
		})
	}
}

// BenchmarkPickAPIFleet256 loads the picker alone at its real interface: a
// leader for 256 instances serving the signed pick API on loopback, and 4
// non-leader replicas with 4 callers each calling pick then done, at
// offered rates stepped up to unpaced (closed loop). A caller that falls
// behind the schedule sends at once, so past saturation the step is closed
// loop. Each step reports the rate served (picks/s) and the pick call's p50
// and p99 as the callers saw them, and logs the highest rate so far whose
// p99 stays within 1 ms. Client and picker share the machine's cores.
func BenchmarkPickAPIFleet256(b *testing.B) {
	const replicas, per = 4, 4
	keys := testKeys(b, testSecret)
	cfg := testConfig(keys, 256, 1<<20)
	var best, bestP99 float64
	for _, offered := range []float64{500, 1000, 2000, 4000, 8000, 0} {
		name := map[bool]string{true: fmt.Sprintf("offered=%.0f", offered), false: "offered=unpaced"}[offered > 0]
		b.Run(name, func(b *testing.B) {
			_, srv := newLeader(b, keys, cfg)
			ps := make([]*Picker, replicas)
			for i := range ps {
				ps[i] = newReplica(b, fmt.Sprintf("router-%d", i+1), keys, cfg)
				ps[i].Follow(strings.TrimPrefix(srv.URL, "http://"))
			}
			// 4,096 conversations of 16 KiB (256 block hashes each): 1M
			// hashes, four times the index's default capacity, so the
			// index runs full and ageing as in production.
			ks := make([]policy.Key, 4096)
			for i := range ks {
				text := fmt.Sprintf("conversation %d: %s", i, strings.Repeat("a long shared document. ", 700))[:16<<10]
				ks[i] = key(ps[0], text)
			}
			lat := make([][]time.Duration, replicas*per)
			b.ResetTimer()
			start := time.Now()
			callers(len(lat), int64(b.N), func(c int, i int64) bool {
				if offered > 0 {
					time.Sleep(time.Until(start.Add(time.Duration(float64(i) / offered * 1e9))))
				}
				t0 := time.Now()
				tk, err := ps[c%replicas].Pick(context.Background(), ks[i%int64(len(ks))], Sender{})
				if err != nil {
					b.Error(err)
					return false
				}
				lat[c] = append(lat[c], time.Since(t0))
				tk.Done()
				return true
			})
			elapsed := time.Since(start)
			b.StopTimer()
			var fell float64
			for _, p := range ps {
				fell += picks(b, p.opts.Metrics, "fallback")
			}
			all := slices.Concat(lat...)
			slices.Sort(all)
			rate := float64(len(all)) / elapsed.Seconds()
			p99 := float64(all[len(all)*99/100].Nanoseconds()) / 1e3
			b.ReportMetric(rate, "picks/s")
			b.ReportMetric(float64(all[len(all)/2].Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(p99, "p99-µs")
			b.ReportMetric(fell/float64(len(all)), "fallback-frac")
			// A round of a few picks (the benchmark's first, b.N = 1) has
			// no p99 worth the name.
			if b.N >= 1000 && p99 <= 1000 && rate > best {
				best, bestP99 = rate, p99
			}
			b.Logf("highest rate so far with pick p99 <= 1 ms: %.0f picks/s (p99 %.0f µs)", best, bestP99)
		})
	}
}

package policy

import (
	"runtime"
	"strings"
	"sync"
	"testing"
)

// TestConcurrentPicksKeepTheThreshold: picks made at the same moment by
// many goroutines (a burst of requests, each handled on its own) must not
// all read an instance's count as under the threshold and then all charge
// it. Each round fills a fleet exactly to its capacity under the threshold
// with one hot key, from goroutines released together, so any instance
// over the threshold is a decision that read a count another had already
// taken.
func TestConcurrentPicksKeepTheThreshold(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		runtime.GOMAXPROCS(2)
	}
	const instances, threshold, rounds = 4, 3, 300
	req := textReq(strings.Repeat("burst of one hot prefix ", 200))
	for round := range rounds {
		p := newPolicy(t, PrefixAware, instances, Tuning{ShareSlack: -1, ReplicaLoad: 1e9})
		cfg := p.table.Load().Cfg
		cfg.ConcurrencyThreshold = threshold
		if err := p.Update(cfg); err != nil {
			t.Fatal(err)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range instances * threshold {
			wg.Go(func() {
				<-start
				if _, err := p.Pick(p.Key(req)); err != nil {
					t.Error(err)
				}
			})
		}
		close(start)
		wg.Wait()
		for _, in := range p.Instances() {
			if n := p.InFlight(in.ID); n > threshold {
				t.Fatalf("round %d: %s has %d in flight, over the threshold %d, with the fleet filled exactly to it", round, in.ID, n, threshold)
			}
		}
	}
}

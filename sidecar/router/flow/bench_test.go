package flow

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// benchTenants is an endpoint of 8 tenants.
func benchTenants(rpm, tpm int64) Config {
	cfg := Config{QueueTimeout: 30 * time.Second, MaxQueued: 100000, Default: Limits{Weight: 1, MaxQueued: 10000},
		Tenants: map[string]Limits{}}
	for i := range 8 {
		cfg.Tenants[fmt.Sprintf("tenant-%d", i)] = Limits{Weight: 1 + i, Priority: i % 3, MaxQueued: 10000,
			RequestsPerMinute: rpm, TokensPerMinute: tpm}
	}
	return cfg
}

// BenchmarkAdmitUnlimited is the cost flow control adds to every request
// of a tenant without rate limits, metrics on: from all CPUs at once.
func BenchmarkAdmitUnlimited(b *testing.B) { benchmarkAdmit(b, benchTenants(0, 0)) }

// BenchmarkAdmitLimited is the same with request and token limits no
// request reaches: two buckets under the tenant's lock and a clock read.
func BenchmarkAdmitLimited(b *testing.B) {
	benchmarkAdmit(b, benchTenants(10_000_000, 10_000_000_000))
}

func benchmarkAdmit(b *testing.B, cfg Config) {
	c := New(cfg, time.Now)
	c.Instrument(NewMetrics(prometheus.NewRegistry()))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			t, lim := c.Admit(tenantNames[i%8], 1000)
			if lim != nil {
				b.Fatal(lim)
			}
			t.Settle(900)
		}
	})
}

var tenantNames = []string{"tenant-0", "tenant-1", "tenant-2", "tenant-3", "tenant-4", "tenant-5", "tenant-6", "tenant-7"}

// BenchmarkQueueCycle is one request queued and one released, the core
// Wait and Freed run under the controller's lock, with 1000 queued over 8
// tenants and 3 priorities.
func BenchmarkQueueCycle(b *testing.B) {
	clk := newSimClock()
	c := New(benchTenants(0, 0), clk.time)
	c.Instrument(NewMetrics(prometheus.NewRegistry()))
	arrive := func(i int) {
		w, _, err := c.arriveLocked(Queued{Tenant: tenantNames[i%8], Priority: i % 3, Tokens: int64(100 + i%900), Epoch: c.Epoch()})
		if w == nil {
			b.Fatal(err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range 1000 {
		arrive(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		clk.advance(time.Millisecond)
		arrive(i)
		if c.releaseLocked(1, clk.now, nil) != 1 {
			b.Fatal("nothing released")
		}
	}
}

package workload

import (
	"context"
	"fmt"
	"net/http"

	"github.com/warmroute/warmroute/test/vllmsim"
)

// FleetStats are the simulators' (or vLLM servers') own counters, by base
// URL. Take one snapshot before a run and one after; Since gives the run's
// share, whose HitRate is the token-weighted prefix-cache hit rate.
type FleetStats map[string]vllmsim.Stats

// ScrapeFleet reads /metrics of every server at urls.
func ScrapeFleet(ctx context.Context, client *http.Client, urls []string) (FleetStats, error) {
	if client == nil {
		client = http.DefaultClient
	}
	out := make(FleetStats, len(urls))
	for _, u := range urls {
		st, err := vllmsim.ScrapeStats(ctx, client, u)
		if err != nil {
			return nil, fmt.Errorf("fleet stats: %w", err)
		}
		out[u] = st
	}
	return out, nil
}

// FleetStatsOf reads the counters of in-process simulators directly.
func FleetStatsOf(servers ...*vllmsim.Server) FleetStats {
	out := make(FleetStats, len(servers))
	for _, s := range servers {
		out[s.URL()] = s.Stats()
	}
	return out
}

// Since returns the counters accumulated after before (gauges are taken
// from f as they are).
func (f FleetStats) Since(before FleetStats) FleetStats {
	out := make(FleetStats, len(f))
	for u, a := range f {
		b := before[u]
		a.Requests -= b.Requests
		a.PromptTokens -= b.PromptTokens
		a.GenerationTokens -= b.GenerationTokens
		a.PrefixCacheQueries -= b.PrefixCacheQueries
		a.PrefixCacheHits -= b.PrefixCacheHits
		out[u] = a
	}
	return out
}

// Total sums the counters over the fleet.
func (f FleetStats) Total() vllmsim.Stats {
	var t vllmsim.Stats
	for _, s := range f {
		t.Requests += s.Requests
		t.PromptTokens += s.PromptTokens
		t.GenerationTokens += s.GenerationTokens
		t.PrefixCacheQueries += s.PrefixCacheQueries
		t.PrefixCacheHits += s.PrefixCacheHits
		t.Running += s.Running
		t.Waiting += s.Waiting
	}
	return t
}

// HitRate is the fleet's token-weighted prefix-cache hit rate: hit tokens
// over queried prompt tokens, summed over the instances.
func (f FleetStats) HitRate() float64 { return f.Total().HitRate() }

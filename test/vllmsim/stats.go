package vllmsim

import (
	"context"
	"fmt"
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"

	"github.com/warmroute/warmroute/test/promscrape"
)

// Stats is a snapshot of the numbers a benchmark reads from an instance.
// Token counts are cumulative since start.
type Stats struct {
	// Requests is the number of requests finished successfully.
	Requests int64
	// PromptTokens and GenerationTokens count finished requests' tokens.
	PromptTokens, GenerationTokens int64
	// PrefixCacheQueries and PrefixCacheHits are prompt tokens looked up in
	// the prefix cache and found there, counted at admission.
	PrefixCacheQueries, PrefixCacheHits int64
	// Running and Waiting are the requests in the batch and in the queue.
	Running, Waiting int
	// KVCacheUsage is the fraction of KV blocks held by running requests.
	KVCacheUsage float64
	// MaxInFlight is the most requests ever running or waiting at once
	// since start: the high-water mark of Running + Waiting. vLLM has no
	// such metric, so it is not on /metrics and ScrapeStats leaves it 0.
	MaxInFlight int
}

// HitRate is the token-weighted prefix-cache hit rate, 0 before any query.
func (s Stats) HitRate() float64 {
	if s.PrefixCacheQueries == 0 {
		return 0
	}
	return float64(s.PrefixCacheHits) / float64(s.PrefixCacheQueries)
}

// Stats returns the server's current numbers without a scrape.
func (s *Server) Stats() Stats {
	e := s.engine
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.counters
	return Stats{
		Requests: c.requests, PromptTokens: c.promptTokens, GenerationTokens: c.generationTokens,
		PrefixCacheQueries: c.queries, PrefixCacheHits: c.hits,
		Running: len(e.running), Waiting: len(e.waiting),
		KVCacheUsage: float64(e.pool.inUse()) / float64(e.pool.capacity),
		MaxInFlight:  e.maxInFlight,
	}
}

// ScrapeStats reads Stats from the /metrics endpoint of a simulator, or of
// a vLLM server, at baseURL.
func ScrapeStats(ctx context.Context, client *http.Client, baseURL string) (Stats, error) {
	families, err := promscrape.Families(ctx, client, baseURL+"/metrics")
	if err != nil {
		return Stats{}, err
	}
	return statsOf(families), nil
}

// ParseStats reads Stats from Prometheus text exposition.
func ParseStats(r io.Reader) (Stats, error) {
	families, err := promscrape.Parse(r)
	if err != nil {
		return Stats{}, fmt.Errorf("parse metrics: %w", err)
	}
	return statsOf(families), nil
}

// statsOf sums each metric over its series.
func statsOf(families map[string]*dto.MetricFamily) Stats {
	sum := func(name string) float64 { return promscrape.Sum(families[name], nil) }
	return Stats{
		Requests:           int64(sum(MetricRequestSuccess)),
		PromptTokens:       int64(sum(MetricPromptTokens)),
		GenerationTokens:   int64(sum(MetricGenerationTokens)),
		PrefixCacheQueries: int64(sum(MetricPrefixCacheQueries)),
		PrefixCacheHits:    int64(sum(MetricPrefixCacheHits)),
		Running:            int(sum(MetricRequestsRunning)),
		Waiting:            int(sum(MetricRequestsWaiting)),
		KVCacheUsage:       sum(MetricKVCacheUsage),
	}
}

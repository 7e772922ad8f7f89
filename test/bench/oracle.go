package bench

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/warmroute/warmroute/sidecar/router/extract"
	"github.com/warmroute/warmroute/test/vllmsim"
	"github.com/warmroute/warmroute/test/workload"
)

// Oracle is the pooled reference: the hit rate of one cache with the
// capacity of the whole fleet, the best any placement could reach with the
// same block model.
type Oracle struct {
	HitRate                float64
	HitTokens, QueryTokens int64
	CacheTokens            int
}

// oracleTimeScale makes the oracle's simulator run steps back to back: it
// only needs the cache's verdicts, not the timing.
const oracleTimeScale = 1e-9

// oracle replays w, one request at a time in arrival order, into a single
// simulator whose cache holds what the whole fleet holds. It is the same
// block model as the fleet's (16-token chained blocks, LRU, tail-first
// eviction, generated tokens cached too), driven through the simulator's
// handler in process without a network. One request at a time means no
// blocks are pinned by concurrent requests, which only helps the oracle.
func (c *Config) oracle(ctx context.Context, w workload.Workload) (Oracle, error) {
	cfg := c.simConfig(0, oracleTimeScale)
	cfg.CacheTokens = c.CacheTokens * c.Instances
	sim, err := vllmsim.New(cfg)
	if err != nil {
		return Oracle{}, err
	}
	defer func() { _ = sim.Close() }()
	for i, r := range w.Requests {
		if err := ctx.Err(); err != nil {
			return Oracle{}, err
		}
		body, err := workload.Body(r, workload.Options{Model: c.Model})
		if err != nil {
			return Oracle{}, err
		}
		if r.Tenant != "" {
			// What the router does for a tenant: a salt of its own keeps its
			// blocks apart (the router's is an HMAC of the tenant; any
			// one-to-one salt caches the same).
			pieces, err := extract.SaltedBody(body, r.Tenant, false)
			if err != nil {
				return Oracle{}, err
			}
			body = bytes.Join(pieces, nil)
		}
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
		rec := httptest.NewRecorder()
		sim.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			return Oracle{}, fmt.Errorf("request %d: status %d: %s", i, rec.Code, rec.Body.Bytes())
		}
	}
	st := sim.Stats()
	return Oracle{HitRate: st.HitRate(), HitTokens: st.PrefixCacheHits, QueryTokens: st.PrefixCacheQueries, CacheTokens: cfg.CacheTokens}, nil
}

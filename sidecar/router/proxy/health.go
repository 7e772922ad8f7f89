package proxy

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// RunHealthChecks probes every instance's /health each interval until ctx
// ends: a failure ejects the instance (the same back-off as passive
// failures), a success readmits it. Active checks find a dead instance
// before a request has to, and bring an ejected one back as soon as it
// recovers instead of waiting out its back-off.
func (r *Router) RunHealthChecks(ctx context.Context) {
	if r.opts.HealthInterval <= 0 {
		return
	}
	client := &http.Client{Transport: r.upstream, Timeout: max(r.opts.HealthInterval/2, time.Second),
		// A redirect is not health: following one would probe whatever
		// the backend points at instead of the backend.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	ticker := time.NewTicker(r.opts.HealthInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		var wg sync.WaitGroup
		for _, in := range r.own.Instances() {
			wg.Go(func() {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+in.Address+"/health", nil)
				if err != nil {
					return
				}
				resp, err := client.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				switch {
				case ctx.Err() != nil:
				case err != nil || resp.StatusCode != http.StatusOK:
					r.failed(in.ID, "active", false)
				default:
					r.succeeded(in.ID, true)
				}
			})
		}
		wg.Wait()
	}
}

package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/router/policy"
	"github.com/warmroute/warmroute/test/promscrape"
	"github.com/warmroute/warmroute/test/vllmsim"
	"github.com/warmroute/warmroute/test/workload"
)

// The flow-control set (issue #53): tenants share one endpoint through the
// router binary, each client authenticated with its own API key
// (--api-keys-dir, the router's APIKeys mode), the routing document with
// and without flowControl.
//
//   - Noisy neighbour: tenant A sends five times its fair share while B
//     sends its usual traffic; B's TTFT alone, next to A without flow
//     control (the baseline) and next to A with it.
//   - Priority: a batch tenant (priority −100) saturates the fleet while an
//     interactive one (priority 100) sends its usual traffic.
//   - Rate limits: one tenant with requestsPerMinute and one with
//     tokensPerMinute, each sending twice its limit; admitted per minute.

// Names of the flow-control cases, as the report shows them.
const (
	FlowNoisyNeighbour = "noisy-neighbour"
	FlowPriority       = "priority"
)

// FlowSpec sizes the flow-control set.
type FlowSpec struct {
	// Instances is the fleet; each simulator runs at most Slots requests
	// at once (vLLM's --max-num-seqs) and the routing document's
	// concurrencyThreshold is Slots too, so the fleet is full exactly
	// when the router says so. With the simulator's 64 running requests,
	// whose decode steps cost the same at any batch size, no load fills
	// the engines before the router's threshold: a flooder would queue in
	// the router with flow control and run at full speed without it.
	Instances, Slots int
	// TimeScale is wall seconds per simulated second of the noisy-
	// neighbour and priority runs.
	TimeScale float64
	// Span is the simulated span of their arrivals.
	Span time.Duration
	// Runs is how many times each key row runs (the tenants alone, and
	// with flow control); the rows without flow control, whose backlog
	// takes minutes to drain, run once.
	Runs int
	// Every request is a tenant's SystemTokens-token system prompt, a
	// question of about QuestionTokens and on average MaxTokens generated
	// (workload.TenantTraffic).
	SystemTokens, QuestionTokens, MaxTokens int
	// QueueTimeout is the routing document's (wall time: the router has no
	// time scale).
	QueueTimeout time.Duration
	// RateLimitSpan is the rate-limit run's span of arrivals, wall time:
	// that run is at time scale 1, because a router's minute is a wall
	// minute. RequestsPerMinute and TokensPerMinute are its two tenants'
	// limits, each offered twice its limit. A span of 0 skips that run.
	RateLimitSpan                      time.Duration
	RequestsPerMinute, TokensPerMinute int64
}

// Capacity is the fleet's throughput in requests per simulated second:
// its slots over the time a request holds one (its prefill, uncached, and
// a decode step per generated token).
func (s FlowSpec) Capacity() float64 {
	hold := float64(s.MaxTokens)*vllmsim.DefaultDecodeStep.Seconds() +
		float64(s.SystemTokens+s.QuestionTokens)/vllmsim.DefaultPrefillTokensPerSec
	return float64(s.Instances*s.Slots) / hold
}

// Offered loads, as fractions of Capacity. B's share of the fleet is half
// (two tenants of equal weight): it sends 80 % of that, and A five times
// it. Interactive traffic keeps the fleet 70 % busy alone; batch offers
// twice what the fleet serves.
const (
	flowShareB      = 0.5 * 0.8
	flowShareA      = 0.5 * 5
	flowInteractive = 0.7
	flowBatch       = 2.0
)

// Flow is the flow-control set of the full benchmark: 4 instances of 4
// slots, 60 simulated seconds of arrivals at time scale 0.5, 3 runs of the
// key rows, and 3 wall minutes of rate limits.
func Flow() *FlowSpec {
	return &FlowSpec{
		Instances: 4, Slots: 4, TimeScale: 0.5, Span: time.Minute, Runs: 3,
		SystemTokens: 1000, QuestionTokens: 200, MaxTokens: 64,
		QueueTimeout:  30 * time.Second,
		RateLimitSpan: 3 * time.Minute, RequestsPerMinute: 120, TokensPerMinute: 60000,
	}
}

// ShortFlow is the flow-control set of the package's test: 2 instances of
// 2 slots, which about 4 requests per simulated second fill; a run of 20
// simulated seconds takes 4 s of wall time, 12 s for the backlog of a run
// without flow control. No rate-limit run: less than a minute of it would
// measure nothing.
func ShortFlow() *FlowSpec {
	return &FlowSpec{Instances: 2, Slots: 2, TimeScale: 0.2, Span: 20 * time.Second, Runs: 1,
		SystemTokens: 500, QuestionTokens: 100, MaxTokens: 32, QueueTimeout: 5 * time.Second}
}

// FlowReport is what the flow-control set measured.
type FlowReport struct {
	Spec FlowSpec
	// Started, Elapsed and the load averages at the start and the end.
	Started               time.Time
	Elapsed               time.Duration
	LoadBefore, LoadAfter string
	Runs                  []FlowRun
	RateLimits            []RateLimitRun
	// Command and Revision say what ran, for a report of this set alone.
	Command, Revision string
}

// FlowRun is one run of tenants' traffic through one router.
type FlowRun struct {
	Case string
	// Row names the configuration: flowAlone, flowAloneShare,
	// flowWithout, flowWith.
	Row       string
	Instances int
	Tenants   []TenantOutcome
	// Shed and RateLimited are the router's
	// warmroute_router_flow_shed_total and _rate_limited_total by
	// "tenant reason" (limit for the latter).
	Shed, RateLimited map[string]int64
	// Waited is how many of each tenant's requests waited in the router's
	// queue (warmroute_router_flow_queue_wait_seconds' count).
	Waited map[string]int64
	Wall   time.Duration
}

// Rows of a case.
const (
	flowAlone      = "alone"
	flowAloneShare = "alone on its share"
	flowWithout    = "without flow control"
	flowWith       = "with flow control"
)

// TenantOutcome is what one tenant's client saw in a run.
type TenantOutcome struct {
	Tenant   string
	Requests int
	// Summary covers the answered requests (TTFT in simulated seconds).
	Summary workload.Summary
	// Outcomes counts requests by outcome: "200", "429
	// tenant_queue_full", "503 queue_timeout", "no response", ….
	Outcomes map[string]int
}

// tenant returns the outcome of tenant name in the run.
func (r FlowRun) tenant(name string) (TenantOutcome, bool) {
	for _, t := range r.Tenants {
		if t.Tenant == name {
			return t, true
		}
	}
	return TenantOutcome{}, false
}

// RateLimitRun is one rate-limited tenant: what it was admitted each wall
// minute against its limit.
type RateLimitRun struct {
	Tenant string
	// Limit is "requests" or "tokens"; PerMinute its value.
	Limit     string
	PerMinute int64
	// Offered and Admitted per minute from the start, by send time, in the
	// limit's unit: tokens are prompt tokens (the simulator's count) plus
	// the tokens generated, which the simulator's usage reports and which
	// are exactly max_tokens.
	Offered, Admitted []int64
	Outcomes          map[string]int
	// Router is the router's own count: admitted tokens
	// (warmroute_router_flow_admitted_tokens_total) or refused requests
	// (rate_limited_total) over the run.
	RouterAdmittedTokens, RouterLimited int64
}

// Tenants of the set, which are also their API keys' Secret data keys.
const (
	tenantA           = "team-a"
	tenantB           = "team-b"
	tenantInteractive = "interactive"
	tenantBatch       = "batch"
	tenantRPM         = "rpm-limited"
	tenantTPM         = "tpm-limited"
)

// apiKey is tenant's key in the bench's Secret directory.
func apiKey(tenant string) string { return "sk-bench-" + tenant + "-0123456789abcdef" }

// flowTenant is one tenant's client in a run.
type flowTenant struct {
	name      string
	w         workload.Workload
	streaming bool
}

// flowRow is one configuration of a case.
type flowRow struct {
	cse, row  string
	instances int
	flow      *routingv1alpha1.FlowControl
	timeScale float64
	tenants   []flowTenant
}

// noisyNeighbourFlow: equal weights; A may queue a fleet's worth of
// requests, B far more than it ever has waiting.
func (s FlowSpec) noisyNeighbourFlow() *routingv1alpha1.FlowControl {
	return &routingv1alpha1.FlowControl{
		Default: routingv1alpha1.TenantLimits{Weight: 1, MaxQueued: 20},
		Tenants: map[string]routingv1alpha1.TenantLimits{
			tenantA: {Weight: 1, MaxQueued: s.Instances * s.Slots},
			tenantB: {Weight: 1, MaxQueued: routingv1alpha1.DefaultTenantQueued},
		},
		QueueTimeoutMillis: s.QueueTimeout.Milliseconds(), MaxQueued: routingv1alpha1.DefaultMaxQueued,
	}
}

// priorityFlow: interactive first; batch may queue up to the bound, and
// waits at most the queue timeout.
func (s FlowSpec) priorityFlow() *routingv1alpha1.FlowControl {
	return &routingv1alpha1.FlowControl{
		Default: routingv1alpha1.TenantLimits{Weight: 1, MaxQueued: 20},
		Tenants: map[string]routingv1alpha1.TenantLimits{
			tenantInteractive: {Weight: 1, Priority: 100, MaxQueued: routingv1alpha1.DefaultTenantQueued},
			tenantBatch:       {Weight: 1, Priority: -100, MaxQueued: routingv1alpha1.DefaultMaxQueued},
		},
		QueueTimeoutMillis: s.QueueTimeout.Milliseconds(), MaxQueued: 2 * routingv1alpha1.DefaultMaxQueued,
	}
}

func (s FlowSpec) rateLimitFlow() *routingv1alpha1.FlowControl {
	return &routingv1alpha1.FlowControl{
		Default: routingv1alpha1.TenantLimits{Weight: 1, MaxQueued: 20},
		Tenants: map[string]routingv1alpha1.TenantLimits{
			tenantRPM: {Weight: 1, RequestsPerMinute: s.RequestsPerMinute, MaxQueued: routingv1alpha1.DefaultTenantQueued},
			tenantTPM: {Weight: 1, TokensPerMinute: s.TokensPerMinute, MaxQueued: routingv1alpha1.DefaultTenantQueued},
		},
		QueueTimeoutMillis: s.QueueTimeout.Milliseconds(), MaxQueued: routingv1alpha1.DefaultMaxQueued,
	}
}

// traffic is tenant's stream at rate requests per simulated second.
func (s FlowSpec) traffic(seed uint64, tenant string, rate float64, span time.Duration, maxTokens int) workload.Workload {
	return workload.TenantTraffic(workload.TenantTrafficConfig{Seed: seed, Tenant: tenant, Rate: rate, Duration: span,
		SystemTokens: s.SystemTokens, QuestionTokens: s.QuestionTokens, MaxTokens: maxTokens})
}

// rows are the noisy-neighbour and priority runs, key rows first.
func (s FlowSpec) rows(seed uint64) []flowRow {
	capacity := s.Capacity()
	b := flowTenant{name: tenantB, w: s.traffic(seed, tenantB, flowShareB*capacity, s.Span, s.MaxTokens), streaming: true}
	// The flooder's TTFT is not reported: it reads whole responses,
	// which spares the machine 64 stream chunks per request.
	a := flowTenant{name: tenantA, w: s.traffic(seed, tenantA, flowShareA*capacity, s.Span, s.MaxTokens)}
	chat := flowTenant{name: tenantInteractive, w: s.traffic(seed, tenantInteractive, flowInteractive*capacity, s.Span, s.MaxTokens), streaming: true}
	batch := flowTenant{name: tenantBatch, w: s.traffic(seed, tenantBatch, flowBatch*capacity, s.Span, s.MaxTokens)}
	nn, pr := s.noisyNeighbourFlow(), s.priorityFlow()
	row := func(cse, name string, instances int, flow *routingv1alpha1.FlowControl, tenants ...flowTenant) flowRow {
		return flowRow{cse: cse, row: name, instances: instances, flow: flow, timeScale: s.TimeScale, tenants: tenants}
	}
	return []flowRow{
		row(FlowNoisyNeighbour, flowAlone, s.Instances, nil, b),
		row(FlowNoisyNeighbour, flowAloneShare, s.Instances/2, nil, b),
		row(FlowNoisyNeighbour, flowWith, s.Instances, nn, a, b),
		row(FlowNoisyNeighbour, flowWithout, s.Instances, nil, a, b),
		row(FlowPriority, flowAlone, s.Instances, nil, chat),
		row(FlowPriority, flowWith, s.Instances, pr, chat, batch),
		row(FlowPriority, flowWithout, s.Instances, nil, chat, batch),
	}
}

// RunFlow runs the flow-control set alone (cfg.Flow), for a report of its
// own section (FlowReport.Markdown, SpliceSection).
func RunFlow(ctx context.Context, cfg Config) (*FlowReport, error) {
	if cfg.Flow == nil {
		return nil, fmt.Errorf("no flow-control set configured")
	}
	cfg.defaults()
	cleanup, err := cfg.prepare(ctx)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	return cfg.measureFlow(ctx)
}

// measureFlow runs the flow-control set, if configured.
func (c *Config) measureFlow(ctx context.Context) (*FlowReport, error) {
	spec := c.Flow
	if spec == nil {
		return nil, nil
	}
	rep := &FlowReport{Spec: *spec, Started: time.Now(), LoadBefore: DescribeMachine().LoadAverage, Command: c.Command, Revision: revision(ctx)}
	capacity := spec.Capacity()
	c.log("flow control: %d instances × %d slots, about %.1f requests/s (simulated); time scale %g", spec.Instances, spec.Slots, capacity, spec.TimeScale)
	for _, r := range spec.rows(c.Seed) {
		runs := spec.Runs
		if r.row == flowWithout {
			runs = 1
		}
		for i := range runs {
			run, err := c.runFlow(ctx, *spec, r, i)
			if err != nil {
				return nil, fmt.Errorf("%s %s, run %d: %w", r.cse, r.row, i+1, err)
			}
			c.logFlow(run)
			rep.Runs = append(rep.Runs, run)
		}
	}
	rl, err := c.runRateLimits(ctx, *spec)
	if err != nil {
		return nil, fmt.Errorf("rate limits: %w", err)
	}
	for _, r := range rl {
		c.log("  rate limit %s %d %s/min: admitted per minute %v of offered %v; router: admitted tokens %d, limited %d; %v",
			r.Tenant, r.PerMinute, r.Limit, r.Admitted, r.Offered, r.RouterAdmittedTokens, r.RouterLimited, r.Outcomes)
	}
	rep.RateLimits = rl
	rep.Elapsed = time.Since(rep.Started)
	rep.LoadAfter = DescribeMachine().LoadAverage
	return rep, nil
}

func (c *Config) logFlow(r FlowRun) {
	var parts []string
	for _, t := range r.Tenants {
		parts = append(parts, fmt.Sprintf("%s ttft p50 %s p90 %s %v", t.Tenant, secs(t.Summary.TTFT.P50), secs(t.Summary.TTFT.P90), t.Outcomes))
	}
	c.log("  %s %-22s %s; shed %v, rate-limited %v (%s)", r.Case, r.Row, strings.Join(parts, "; "), r.Shed, r.RateLimited, r.Wall.Round(time.Second))
}

// flowFleet starts instances simulators of spec's slots and a router in
// dir with one API key per tenant and flow (nil: off) in its document.
func (c *Config) flowFleet(ctx context.Context, spec FlowSpec, dir string, instances int, flow *routingv1alpha1.FlowControl, timeScale float64, tenants ...string) (*fleet, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	keys := filepath.Join(dir, "api-keys")
	if err := os.MkdirAll(keys, 0o700); err != nil {
		return nil, err
	}
	for _, t := range tenants {
		if err := os.WriteFile(filepath.Join(keys, t), []byte(apiKey(t)+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("write API key: %w", err)
		}
	}
	fc := *c
	fc.Instances, fc.ConcurrencyThreshold, fc.MaxRunning, fc.flowControl = instances, spec.Slots, spec.Slots, flow
	return fc.startFleet(ctx, dir, policy.PrefixAware, timeScale, c.router, "--api-keys-dir", keys)
}

// runFlow runs one row: each tenant's client at once, with its own key.
func (c *Config) runFlow(ctx context.Context, spec FlowSpec, r flowRow, i int) (FlowRun, error) {
	dir := filepath.Join(c.WorkDir, "flow", r.cse, strings.ReplaceAll(r.row, " ", "-"), fmt.Sprint(i))
	var names []string
	for _, t := range r.tenants {
		names = append(names, t.name)
	}
	f, err := c.flowFleet(ctx, spec, dir, r.instances, r.flow, r.timeScale, names...)
	if err != nil {
		return FlowRun{}, err
	}
	defer f.stop()
	start := time.Now()
	results, err := c.sendTenants(ctx, f.routerURL, r.timeScale, r.tenants)
	if err != nil {
		return FlowRun{}, err
	}
	run := FlowRun{Case: r.cse, Row: r.row, Instances: r.instances, Wall: time.Since(start)}
	ids := make([]string, r.instances)
	for j := range ids {
		ids[j] = instanceID(j)
	}
	for j, t := range r.tenants {
		run.Tenants = append(run.Tenants, TenantOutcome{Tenant: t.name, Requests: len(results[j]),
			Summary: workload.Summarize(results[j], ids, r.timeScale), Outcomes: outcomes(results[j])})
	}
	counts, err := scrapeFlow(ctx, f.metricsURL)
	if err != nil {
		return FlowRun{}, err
	}
	run.Shed, run.RateLimited, run.Waited = counts.shed, counts.limited, counts.waited
	return run, nil
}

// sendTenants runs each tenant's client at once, each with its own
// connections and API key, and returns their results in tenants' order.
func (c *Config) sendTenants(ctx context.Context, url string, timeScale float64, tenants []flowTenant) ([][]workload.Result, error) {
	results := make([][]workload.Result, len(tenants))
	errs := make([]error, len(tenants))
	var wg sync.WaitGroup
	for j, t := range tenants {
		wg.Go(func() {
			client := workload.NewClient()
			defer client.CloseIdleConnections()
			results[j], errs[j] = workload.Run(ctx, url, t.w.Requests, workload.Options{
				TimeScale: timeScale, Streaming: t.streaming, Model: c.Model, Client: client,
				Header: http.Header{"Authorization": {"Bearer " + apiKey(t.name)}},
			})
		})
	}
	wg.Wait()
	for j, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("tenant %s: %w", tenants[j].name, err)
		}
	}
	return results, nil
}

// outcomes counts results by what the client got.
func outcomes(results []workload.Result) map[string]int {
	out := map[string]int{}
	for _, r := range results {
		out[outcome(r)]++
	}
	return out
}

func outcome(r workload.Result) string {
	switch {
	case r.OK():
		return "200"
	case r.Status == 0:
		return "no response"
	case r.Status == http.StatusOK:
		return "200 cut short"
	case r.Code != "":
		return fmt.Sprintf("%d %s", r.Status, r.Code)
	}
	return fmt.Sprint(r.Status)
}

// flowCounts are the router's flow-control counters: shed and rate-limited
// requests by "tenant reason", admitted tokens and requests that waited in
// its queue by tenant.
type flowCounts struct{ shed, limited, tokens, waited map[string]int64 }

func scrapeFlow(ctx context.Context, metricsURL string) (flowCounts, error) {
	families, err := promscrape.Families(ctx, http.DefaultClient, metricsURL+"/metrics")
	if err != nil {
		return flowCounts{}, err
	}
	by := func(name string, labels ...string) map[string]int64 {
		out := map[string]int64{}
		fam := families[name]
		if fam == nil {
			return out
		}
		for _, m := range fam.GetMetric() {
			l := promscrape.Labels(m)
			var key []string
			for _, k := range labels {
				key = append(key, l[k])
			}
			if v := int64(promscrape.Value(m)); v != 0 {
				out[strings.Join(key, " ")] += v
			}
		}
		return out
	}
	return flowCounts{shed: by("warmroute_router_flow_shed_total", "tenant", "reason"),
		limited: by("warmroute_router_flow_rate_limited_total", "tenant", "limit"),
		tokens:  by("warmroute_router_flow_admitted_tokens_total", "tenant"),
		waited:  by("warmroute_router_flow_queue_wait_seconds", "tenant")}, nil
}

// runRateLimits sends each rate-limited tenant twice its limit for
// spec.RateLimitSpan at time scale 1 (a router's minute is a wall minute)
// on a fleet that never fills, and counts what was admitted each minute.
// Responses are read whole, whose body carries the simulator's usage for
// the router to settle tokens with.
func (c *Config) runRateLimits(ctx context.Context, spec FlowSpec) ([]RateLimitRun, error) {
	if spec.RateLimitSpan == 0 {
		return nil, nil
	}
	const maxTokens = 16 // short requests: the fleet never fills
	probe := spec.traffic(c.Seed, tenantTPM, 1, time.Minute, maxTokens)
	perRequest := float64(probe.PromptTokens())/float64(len(probe.Requests)) + maxTokens // the mean
	rpm := flowTenant{name: tenantRPM, w: spec.traffic(c.Seed, tenantRPM, 2*float64(spec.RequestsPerMinute)/60, spec.RateLimitSpan, maxTokens)}
	tpm := flowTenant{name: tenantTPM, w: spec.traffic(c.Seed, tenantTPM, 2*float64(spec.TokensPerMinute)/60/perRequest, spec.RateLimitSpan, maxTokens)}
	c.log("rate limits: %s %d requests/min offered %d, %s %d tokens/min offered %d requests of about %.0f tokens, over %s",
		tenantRPM, spec.RequestsPerMinute, len(rpm.w.Requests), tenantTPM, spec.TokensPerMinute, len(tpm.w.Requests), perRequest, spec.RateLimitSpan)
	f, err := c.flowFleet(ctx, spec, filepath.Join(c.WorkDir, "flow", "rate-limits"), spec.Instances, spec.rateLimitFlow(), 1, tenantRPM, tenantTPM)
	if err != nil {
		return nil, err
	}
	defer f.stop()
	results, err := c.sendTenants(ctx, f.routerURL, 1, []flowTenant{rpm, tpm})
	if err != nil {
		return nil, err
	}
	counts, err := scrapeFlow(ctx, f.metricsURL)
	if err != nil {
		return nil, err
	}
	minutes := int((spec.RateLimitSpan + time.Minute - 1) / time.Minute)
	// The simulator generates exactly max_tokens, which its usage reports.
	tokens := func(r workload.Result) int64 { return int64(r.PromptTokens + tpm.w.Requests[r.Index].MaxTokens) }
	out := []RateLimitRun{
		perMinute(tenantRPM, "requests", spec.RequestsPerMinute, results[0], minutes, func(workload.Result) int64 { return 1 }),
		perMinute(tenantTPM, "tokens", spec.TokensPerMinute, results[1], minutes, tokens),
	}
	for i := range out {
		out[i].RouterAdmittedTokens = counts.tokens[out[i].Tenant]
		out[i].RouterLimited = counts.limited[out[i].Tenant+" "+out[i].Limit]
	}
	return out, nil
}

// perMinute counts what results offered and were admitted in each minute
// by send time, in the unit amount gives a result. An offered request's
// tokens are known only when it was answered: a refused one counts its
// tenant's average.
func perMinute(tenant, limit string, perMin int64, results []workload.Result, minutes int, amount func(workload.Result) int64) RateLimitRun {
	r := RateLimitRun{Tenant: tenant, Limit: limit, PerMinute: perMin, Offered: make([]int64, minutes), Admitted: make([]int64, minutes), Outcomes: outcomes(results)}
	var sum, n int64
	for _, x := range results {
		if x.OK() {
			sum += amount(x)
			n++
		}
	}
	for _, x := range results {
		m := int(x.Sent / time.Minute)
		if m >= minutes {
			continue
		}
		if x.OK() {
			r.Admitted[m] += amount(x)
			r.Offered[m] += amount(x)
		} else if n > 0 {
			r.Offered[m] += sum / n
		}
	}
	return r
}

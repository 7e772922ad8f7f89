// Package bench is warmroute's benchmark: it replays workloads through the
// real router binary in front of simulated vLLM instances, once per routing
// strategy and for a SageMaker-style baseline, through router replicas and
// through the Endpoint Picker Protocol (gateways playing Envoy in front of
// the router's ext_proc service), computes the pooled-cache
// oracle offline from the same request streams, measures remapping on scale
// and the router's own costs, and renders docs/benchmarks.md with plots.
//
// `make bench` runs the full suite (cmd/bench); the package's test runs a
// small one so that the harness cannot rot.
package bench

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/router/policy"
	"github.com/warmroute/warmroute/test/promscrape"
	"github.com/warmroute/warmroute/test/vllmsim"
	"github.com/warmroute/warmroute/test/workload"
)

// Config is one benchmark run.
type Config struct {
	// Instances is the fleet size N [7].
	Instances int
	// CacheTokens is each simulated instance's KV cache, fixed across
	// strategies and workloads.
	CacheTokens int
	// MaxModelLen bounds prompt plus completion (the Mooncake trace has
	// prompts of 191k tokens).
	MaxModelLen int
	// Model is the served model name.
	Model string
	// PrefixLength and ConcurrencyThreshold are the routing document's.
	PrefixLength, ConcurrencyThreshold int
	// MaxRunning is each simulator's running batch (vLLM's
	// --max-num-seqs); 0 takes the simulator's default.
	MaxRunning int
	// flowControl is the routing document's (nil: off); the flow-control
	// set sets it per run.
	flowControl *routingv1alpha1.FlowControl
	// Seed seeds the workloads and the routers' hash.
	Seed uint64
	// Strategies run for every workload, in order.
	Strategies []policy.Strategy
	// Workloads to replay.
	Workloads []WorkloadSpec
	// RouterBinary is the router to run; built into WorkDir if empty.
	RouterBinary string
	// Baseline is a git revision whose router is run beside this one in
	// the same run (PREFIX_AWARE, one and two replicas, proxy overhead,
	// decision benchmark), for before/after figures; "" skips it.
	Baseline string
	// router and baseline are the binaries in use and what they accept.
	router      routerBinary
	baseline    *routerBinary
	baselineSrc string
	// WorkDir holds the router binary, routing documents and logs; a
	// temporary directory if empty.
	WorkDir string
	// RemapGroups is the number of distinct synthetic prefix groups
	// placed for the remap measurement. 100,000 by default: the target
	// (within 0.5 points of 1/8) is about as wide as the sampling error of
	// 20,000 keys (pure HRW moved 12.03-12.50 % over three seeds), and the
	// share balancing moves fewer keys between survivors as shares grow
	// (0.58-0.79 % at 20,000, 0.24-0.26 % at 100,000), as in a router that
	// has seen real traffic. It takes about 5 s.
	RemapGroups int
	// DecisionSamples is the number of routing decisions timed per body
	// size; ProxySamples the number of requests timed direct and through
	// the router.
	DecisionSamples, ProxySamples int
	// Replicas configures the runs through several router replicas.
	Replicas ReplicaConfig
	// ScaleEvents is the workload replayed while the fleet scales out and
	// in (scale.go); nil skips it.
	ScaleEvents *WorkloadSpec
	// FromZero is the activation of an endpoint at zero instances
	// (fromzero.go); nil skips it.
	FromZero *FromZeroSpec
	// Flow is the flow-control set (flow.go); nil skips it.
	Flow *FlowSpec
	// EPPGateways are the counts of gateways run per workload through
	// the Endpoint Picker Protocol, one router serving it (see EPPRun);
	// empty runs none.
	EPPGateways []int
	// EPPRuns is how many times each workload runs through each count of
	// gateways [1]; the targets compare the median of these runs with the
	// median of the standalone runs.
	EPPRuns int
	// SkipExtras runs only the workloads × strategies and the replica
	// counts: no hot-prefix, restart, remap, decision, proxy or upload
	// measurements (quick experiments; the report leaves them out).
	SkipExtras bool
	// Command is how this configuration is run, for the report.
	Command string
	// Log reports progress; nil is silent.
	Log func(format string, args ...any)
}

// WorkloadSpec is one workload and how fast to replay it.
type WorkloadSpec struct {
	Name        string
	Description string
	Build       func() (workload.Workload, error)
	// TimeScale is wall seconds per simulated second for the simulators
	// and the arrival times.
	TimeScale float64
}

// RunResult is one workload × strategy.
type RunResult struct {
	Workload string
	Strategy policy.Strategy
	Summary  workload.Summary
	// HitRate is the token-weighted prefix-cache hit rate from the
	// simulators' counters; HitTokens and QueryTokens its parts.
	HitRate                float64
	HitTokens, QueryTokens int64
	// Spills counts requests the router did not send to their preferred
	// instance (its warmroute_router_spills_total).
	Spills    int64
	SpillRate float64
	// SpillReasons counts spills by the router's reason label
	// (concurrency_threshold, all_busy, unhealthy).
	SpillReasons map[string]int64
	Wall         time.Duration
	// RouterCPU is the CPU time (user + system) the router processes used
	// over the run, start-up included, summed over replicas.
	RouterCPU time.Duration
}

// CPUPerRequest is the routers' CPU time per request of the run.
func (r RunResult) CPUPerRequest() time.Duration {
	if r.Summary.Requests == 0 {
		return 0
	}
	return r.RouterCPU / time.Duration(r.Summary.Requests)
}

// Report is everything a benchmark measured.
type Report struct {
	Config  Config
	Machine Machine
	// Revision is the checkout's commit (git describe --always --dirty):
	// the router is built from the working tree.
	Revision string
	Started  time.Time
	Elapsed  time.Duration
	Runs     []RunResult
	Oracles  map[string]Oracle
	Workload map[string]WorkloadFacts
	Remap    []Remap
	Decision []DecisionLatency
	Proxy    ProxyOverhead
	Uploads  UploadMemory
	// Fleet is the decision's cost by fleet size and the picker's rate
	// under load (nil when not measured).
	Fleet *FleetScale
	// Replicas are the runs through several router replicas, Restart the
	// run in which one of them restarts (nil when not run).
	Replicas []ReplicaRun
	// EPP are the runs through the Endpoint Picker Protocol.
	EPP []EPPRun
	// BaselineRevision is Config.Baseline resolved; Before and
	// BeforeReplicas are its PREFIX_AWARE runs, BeforeProxy its proxy
	// overhead, DecisionBench the decision benchmark of both revisions.
	BaselineRevision string
	Before           []RunResult
	BeforeReplicas   []ReplicaRun
	BeforeProxy      *ProxyOverhead
	DecisionBench    []DecisionBench
	Restart          *RestartResult
	// ScaleEvents are the scale-event runs, one per scale-in rule.
	ScaleEvents []ScaleEventRun
	// FromZero are the activations from zero instances.
	FromZero []FromZeroRun
	// Flow is what the flow-control set measured (nil when not run).
	Flow *FlowReport
}

// WorkloadFacts describe a generated workload.
type WorkloadFacts struct {
	Name, Description string
	Requests          int
	Sessions          int
	PromptTokens      int
	Duration          time.Duration // simulated span of arrivals
	TimeScale         float64
}

// Run executes the benchmark.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	rep := &Report{Config: cfg, Machine: DescribeMachine(), Started: time.Now(),
		Oracles: map[string]Oracle{}, Workload: map[string]WorkloadFacts{}}
	cleanup, err := cfg.prepare(ctx)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	rep.Revision = revision(ctx)
	if cfg.Baseline != "" {
		cfg.log("building the router of the baseline revision %s", cfg.Baseline)
		b, cleanup, err := cfg.buildBaseline(ctx)
		if err != nil {
			return nil, err
		}
		defer cleanup()
		cfg.baseline = &b
		rep.BaselineRevision = b.revision
	}
	for _, spec := range cfg.Workloads {
		w, err := spec.Build()
		if err != nil {
			return nil, fmt.Errorf("workload %s: %w", spec.Name, err)
		}
		rep.Workload[spec.Name] = describe(spec, w)
		cfg.log("%s: %d requests, %d prompt tokens, %.0f s simulated", spec.Name, len(w.Requests), w.PromptTokens(), w.Duration().Seconds())
		for _, s := range cfg.Strategies {
			r, err := cfg.runOne(ctx, spec, w, s, cfg.router)
			if err != nil {
				return nil, fmt.Errorf("%s × %s: %w", spec.Name, s, err)
			}
			cfg.logRun(string(s), r)
			rep.Runs = append(rep.Runs, r)
		}
		if b := cfg.baseline; b != nil {
			r, err := cfg.runOne(ctx, spec, w, policy.PrefixAware, *b)
			if err != nil {
				return nil, fmt.Errorf("%s × %s at %s: %w", spec.Name, policy.PrefixAware, b.revision, err)
			}
			cfg.logRun(string(policy.PrefixAware)+" @"+b.revision, r)
			rep.Before = append(rep.Before, r)
		}
		if err := cfg.measureReplicas(ctx, rep, spec, w); err != nil {
			return nil, err
		}
		if err := cfg.measureEPP(ctx, rep, spec, w); err != nil {
			return nil, err
		}
		o, err := cfg.oracle(ctx, w)
		if err != nil {
			return nil, fmt.Errorf("%s oracle: %w", spec.Name, err)
		}
		cfg.log("  %-26s hit %5.1f%%", "pooled oracle", 100*o.HitRate)
		rep.Oracles[spec.Name] = o
		if cfg.SkipExtras {
			continue
		}
		remap, err := cfg.workloadRemap(w)
		if err != nil {
			return nil, fmt.Errorf("%s remap: %w", spec.Name, err)
		}
		rep.Remap = append(rep.Remap, remap...)
	}
	if err := cfg.measureScaleEvents(ctx, rep); err != nil {
		return nil, err
	}
	if err := cfg.measureFromZero(ctx, rep); err != nil {
		return nil, err
	}
	if rep.Flow, err = cfg.measureFlow(ctx); err != nil {
		return nil, fmt.Errorf("flow control: %w", err)
	}
	if cfg.SkipExtras {
		rep.Elapsed = time.Since(rep.Started)
		return rep, nil
	}
	if err := cfg.measureHotPrefix(ctx, rep); err != nil {
		return nil, err
	}
	cfg.log("remap on scale")
	rep.Remap = append(cfg.measureRemap(), rep.Remap...)
	cfg.log("decision latency")
	rep.Decision = cfg.measureDecisions()
	cfg.log("proxy overhead")
	bins := []routerBinary{cfg.router}
	if b := cfg.baseline; b != nil {
		bins = append(bins, *b)
	}
	proxies, err := cfg.measureProxy(ctx, bins...)
	if err != nil {
		return nil, fmt.Errorf("proxy overhead: %w", err)
	}
	rep.Proxy = proxies[0]
	if len(proxies) > 1 {
		rep.BeforeProxy = &proxies[1]
	}
	if b := cfg.baseline; b != nil {
		cfg.log("decision benchmark at %s and now", b.revision)
		if rep.DecisionBench, err = cfg.compareDecisionBench(ctx, *b); err != nil {
			return nil, err
		}
	}
	cfg.log("decision by fleet size, and the picker under load")
	if rep.Fleet, err = cfg.measureFleetScale(ctx); err != nil {
		return nil, fmt.Errorf("fleet scale: %w", err)
	}
	cfg.log("router memory under large uploads")
	if rep.Uploads, err = cfg.measureUploads(ctx); err != nil {
		return nil, fmt.Errorf("upload memory: %w", err)
	}
	rep.Elapsed = time.Since(rep.Started)
	return rep, nil
}

// prepare makes the work directory (a temporary one, which cleanup
// removes, when WorkDir is empty) and builds and probes the router.
func (c *Config) prepare(ctx context.Context) (cleanup func(), err error) {
	cleanup = func() {}
	if c.WorkDir == "" {
		dir, err := os.MkdirTemp("", "warmroute-bench-")
		if err != nil {
			return cleanup, err
		}
		cleanup = func() { _ = os.RemoveAll(dir) }
		c.WorkDir = dir
	}
	if c.RouterBinary == "" {
		c.log("building the router")
		bin, err := BuildRouter(ctx, c.WorkDir)
		if err != nil {
			cleanup()
			return func() {}, err
		}
		c.RouterBinary = bin
	}
	if c.router, err = probeRouter(ctx, c.RouterBinary, ""); err != nil {
		cleanup()
		return func() {}, err
	}
	return cleanup, nil
}

func (c *Config) logRun(label string, r RunResult) {
	c.log("  %-26s hit %5.1f%%  engine ttft p50 %.3fs p90 %.3fs (client %.3fs %.3fs)  share max/avg %.3f  spills %.1f%%  failures %d  router cpu %s/request  (%s)",
		label, 100*r.HitRate, r.Summary.EngineTTFT.P50, r.Summary.EngineTTFT.P90, r.Summary.TTFT.P50, r.Summary.TTFT.P90, r.Summary.ShareMaxAvg, 100*r.SpillRate, r.Summary.Failures, micros(r.CPUPerRequest()), r.Wall.Round(time.Second))
}

// revision describes the checkout, or "unknown" outside git.
func revision(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "git", "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func (c *Config) defaults() {
	c.Instances = cmp.Or(c.Instances, 7)
	c.CacheTokens = cmp.Or(c.CacheTokens, 1<<18)
	c.MaxModelLen = cmp.Or(c.MaxModelLen, 196608)
	c.Model = cmp.Or(c.Model, "meta-llama/Llama-3.1-70B-Instruct")
	c.PrefixLength = cmp.Or(c.PrefixLength, 4096)
	c.ConcurrencyThreshold = cmp.Or(c.ConcurrencyThreshold, 10)
	c.Seed = cmp.Or(c.Seed, 1)
	c.RemapGroups = cmp.Or(c.RemapGroups, 100000)
	c.DecisionSamples = cmp.Or(c.DecisionSamples, 5000)
	c.ProxySamples = cmp.Or(c.ProxySamples, 2000)
	c.Replicas.defaults()
	if c.Strategies == nil {
		c.Strategies = []policy.Strategy{policy.Random, policy.LeastOutstandingRequests, Baseline, policy.PrefixAware}
	}
}

func (c *Config) log(format string, args ...any) {
	if c.Log != nil {
		c.Log(format, args...)
	}
}

func describe(spec WorkloadSpec, w workload.Workload) WorkloadFacts {
	sessions := map[string]bool{}
	for _, r := range w.Requests {
		if r.Session != "" {
			sessions[r.Session] = true
		}
	}
	return WorkloadFacts{
		Name: spec.Name, Description: spec.Description, Requests: len(w.Requests), Sessions: len(sessions),
		PromptTokens: w.PromptTokens(), Duration: w.Duration(), TimeScale: spec.TimeScale,
	}
}

// runOne replays w through a fresh fleet routed by strategy.
func (c *Config) runOne(ctx context.Context, spec WorkloadSpec, w workload.Workload, strategy policy.Strategy, bin routerBinary) (RunResult, error) {
	dir := filepath.Join(c.WorkDir, spec.Name, string(strategy)+bin.suffix())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return RunResult{}, err
	}
	f, err := c.startFleet(ctx, dir, strategy, spec.TimeScale, bin)
	if err != nil {
		return RunResult{}, err
	}
	defer f.stop()
	before := workload.FleetStatsOf(f.sims...)
	client := workload.NewClient()
	// Idle keep-alive connections would otherwise hold the router's
	// graceful shutdown until its timeout.
	defer client.CloseIdleConnections()
	start := time.Now()
	results, err := workload.Run(ctx, f.routerURL, w.Requests, workload.Options{
		TimeScale: spec.TimeScale, Streaming: true, Model: c.Model, Client: client,
	})
	if err != nil {
		return RunResult{}, err
	}
	r, err := c.result(ctx, spec, strategy, f.sims, before, results, time.Since(start), f.metricsURL)
	if err != nil {
		return r, err
	}
	r.RouterCPU, err = routerCPU(f.router.Pid())
	return r, err
}

// result measures a finished run: the client's summary, the hit rate from
// the simulators' counters since before, and the spills counted by the
// routers at metricsURLs (summed over router replicas).
func (c *Config) result(ctx context.Context, spec WorkloadSpec, strategy policy.Strategy, sims []*vllmsim.Server,
	before workload.FleetStats, results []workload.Result, wall time.Duration, metricsURLs ...string) (RunResult, error) {
	delta := workload.FleetStatsOf(sims...).Since(before).Total()
	ids := make([]string, c.Instances)
	for i := range ids {
		ids[i] = instanceID(i)
	}
	r := RunResult{
		Workload: spec.Name, Strategy: strategy,
		Summary: workload.Summarize(results, ids, spec.TimeScale),
		HitRate: delta.HitRate(), HitTokens: delta.PrefixCacheHits, QueryTokens: delta.PrefixCacheQueries,
		Wall: wall, SpillReasons: map[string]int64{},
	}
	for _, u := range metricsURLs {
		reasons, err := scrapeCounter(ctx, u+"/metrics", "warmroute_router_spills_total", "reason")
		if err != nil {
			return RunResult{}, err
		}
		for reason, n := range reasons {
			r.SpillReasons[reason] += int64(n)
			r.Spills += int64(n)
		}
	}
	if len(results) > 0 {
		r.SpillRate = float64(r.Spills) / float64(len(results))
	}
	return r, nil
}

// scrapeCounter sums a counter family by the value of one label.
func scrapeCounter(ctx context.Context, url, name, label string) (map[string]float64, error) {
	families, err := promscrape.Families(ctx, http.DefaultClient, url)
	if err != nil {
		return nil, err
	}
	return promscrape.ByLabel(families[name], label), nil
}

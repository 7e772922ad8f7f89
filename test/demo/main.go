// Command demo is `make demo`: it starts the local cluster, the operator and
// a simulated vLLM fleet, applies the support-bot sample LLMEndpoint (4
// instances), puts a router in front, and drives the same built-in workload
// through each routing strategy in turn, printing what the fleet saw.
//
// It then keeps the cluster up for kubectl until Ctrl-C or `make demo-down`
// (or exits at once with --exit).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/test/harness"
	"github.com/warmroute/warmroute/test/localcluster"
	"github.com/warmroute/warmroute/test/vllmsim"
	"github.com/warmroute/warmroute/test/workload"
)

const (
	sample   = "serving_v1alpha1_llmendpoint_support_bot.yaml"
	endpoint = "support-bot"
	// poll is how often the demo looks at the cluster while it waits.
	poll = 200 * time.Millisecond
)

func main() {
	exit := flag.Bool("exit", false, "stop everything after the report instead of keeping the cluster up")
	scale := flag.Float64("time-scale", 0.05, "simulated vLLM runs this many wall seconds per simulated second")
	size := flag.Float64("size", 1, "workload size multiplier")
	flag.Parse()
	if err := run(*exit, *scale, *size); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) {
	fmt.Printf("==> "+format+"\n", args...)
}

func run(exit bool, timeScale, size float64) error {
	root, err := localcluster.RepoRoot()
	if err != nil {
		return err
	}
	workDir := filepath.Join(root, "tmp", "demo")
	if _, err := os.Stat(filepath.Join(workDir, "cluster", "state.json")); err == nil {
		return fmt.Errorf("a demo is already running (state in %s); stop it with `make demo-down`", workDir)
	}
	_ = os.RemoveAll(workDir)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	start := time.Now()
	env, err := harness.Start(ctx, harness.Options{
		RepoRoot: root, WorkDir: workDir, PodCIDR: "127.1.0.1/16", Nodes: 2, GPUsPerNode: 8,
		// Each instance holds 256k tokens of KV cache: enough for its
		// share of the workload's prefixes (the fleet holds about all of
		// them), not for all of them.
		Sim:      vllmsim.Config{TimeScale: timeScale, CacheTokens: 256 * 1024},
		Progress: func(s string) { step("%s", s) },
	})
	if err != nil {
		return err
	}
	defer func() {
		step("stopping the router, the operator and the local cluster")
		env.Stop()
	}()
	step("local cluster, operator and pod agent up in %s", time.Since(start).Round(time.Second))

	step("kubectl apply -f config/samples/%s", sample)
	if _, err := env.ApplyManifest(ctx, filepath.Join(root, "config", "samples", sample)); err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, poll, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		doc, err := env.RoutingDocument(ctx, endpoint)
		return err == nil && len(doc.Instances) == 4 && len(env.Agent.Backends()) == 4, nil
	}); err != nil {
		return fmt.Errorf("4 vLLM instances did not become ready: %w", err)
	}
	step("4 vLLM pods Running on loopback IPs, each served by a simulated vLLM:")
	addrs := env.Agent.Addresses()
	names := sortedKeys(addrs)
	for _, n := range names {
		fmt.Printf("      %-40s %s\n", n, addrs[n])
	}
	router, err := env.StartRouter(ctx, endpoint)
	if err != nil {
		return err
	}
	if err := router.WaitReady(ctx, 30*time.Second); err != nil {
		return err
	}
	step("router listening on %s (metrics on %s)", router.URL, router.MetricsURL)

	workloads := demoWorkloads(size)
	var rows []row
	for _, strategy := range []servingv1alpha1.RoutingStrategy{
		servingv1alpha1.RoutingStrategyRandom,
		servingv1alpha1.RoutingStrategyLeastOutstandingRequests,
		servingv1alpha1.RoutingStrategyPrefixAware,
	} {
		if err := setStrategy(ctx, env, router, strategy); err != nil {
			return err
		}
		for _, w := range workloads {
			// Each run starts like the benchmark's: cold vLLM caches and a
			// router with no history (its share counters span thousands of
			// requests, longer than one of these short runs).
			resetCaches(env)
			if err := router.Restart(ctx); err != nil {
				return err
			}
			if err := router.WaitReady(ctx, 30*time.Second); err != nil {
				return err
			}
			before := fleetStats(env)
			spillsBefore, _ := harness.Metric(router, "warmroute_router_spills_total", nil)
			step("%s: %s, %d requests", strategy, w.Name, len(w.Requests))
			results, err := workload.Run(ctx, router.URL, w.Requests, workload.Options{
				TimeScale: timeScale, Streaming: true, Model: "support-llama", TenantInHeader: true,
			})
			if err != nil {
				return err
			}
			spills, _ := harness.Metric(router, "warmroute_router_spills_total", nil)
			stats := fleetStats(env).Since(before)
			rows = append(rows, row{
				strategy: string(strategy), workload: w.Name,
				summary: workload.Summarize(results, sortedKeys(env.Agent.Addresses()), timeScale),
				hitRate: stats.HitRate(), spills: spills - spillsBefore,
			})
		}
	}
	printReport(rows)
	// The kubectl built with the control plane, so that the commands work
	// on a machine with nothing but Go.
	kubectl := env.Kubectl()
	if kubectl == "" {
		kubectl = "kubectl"
	}
	fmt.Printf("\nThe cluster is yours:\n  export KUBECONFIG=%s\n  alias kubectl=%s\n  kubectl get llmendpoints,deployments,pods -o wide\n  kubectl get configmap %s -o jsonpath='{.data.routing\\.json}'\n",
		env.Cluster.KubeconfigPath, kubectl, harness.RoutingConfigMapName(endpoint))
	fmt.Printf("  curl -s %s/v1/chat/completions -H 'Content-Type: application/json' -d '{\"model\":\"support-llama\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'\n", router.URL)
	fmt.Printf("  router metrics: %s/metrics\n", router.MetricsURL)
	if exit {
		return nil
	}
	fmt.Println("Stop with Ctrl-C or `make demo-down` (from another shell); both leave nothing running.")
	<-ctx.Done()
	return nil
}

// demoWorkloads is the built-in mix: users asking about 120 long shared
// contexts (Amazon's long-context case), a support bot whose long system
// prompt starts every conversation, a RAG document set, and multi-turn
// chats; small enough for about a minute per strategy. Arrival rates keep
// the fleet moderately loaded (a few requests in flight per instance), the
// same offered load for every strategy.
func demoWorkloads(size float64) []workload.Workload {
	n := func(v int) int { return max(1, int(float64(v)*size)) }
	return []workload.Workload{
		workload.LongContext(workload.LongContextConfig{Seed: 7, Requests: n(480), Contexts: 120, ContextTokens: 8000, Rate: 6}),
		workload.SupportBot(workload.SupportBotConfig{Seed: 7, Users: n(48), Turns: 4, SystemTokens: 3000, Rate: 2, ThinkTime: 2 * time.Second}),
		workload.RAG(workload.RAGConfig{Seed: 7, Requests: n(480), Documents: 300, DocTokens: 2500, Rate: 5}),
		workload.ShareGPT(workload.ShareGPTConfig{Seed: 7, Sessions: n(60), Rate: 2, ThinkTime: 2 * time.Second}),
	}
}

type row struct {
	strategy, workload string
	summary            workload.Summary
	hitRate            float64
	spills             float64
}

func printReport(rows []row) {
	fmt.Println()
	fmt.Println("Prefix-cache hit rate is token-weighted, from the simulated vLLM servers' own counters;")
	fmt.Println("TTFT is the engine's time to first token (what vLLM reports, queueing included), in simulated")
	fmt.Println("seconds; share is successful requests per instance (max/avg in brackets); spills count")
	fmt.Println("requests the load guard sent past their preferred instance.")
	fmt.Println()
	fmt.Printf("%-27s %-12s %8s %8s %9s %9s %-22s %7s\n", "strategy", "workload", "requests", "hit rate", "TTFT p50", "TTFT p90", "share per instance", "spills")
	fmt.Println(strings.Repeat("-", 108))
	for _, r := range rows {
		shares := make([]string, 0, len(r.summary.Share))
		for _, k := range sortedKeys(r.summary.Share) {
			shares = append(shares, fmt.Sprintf("%d", r.summary.Share[k]))
		}
		fmt.Printf("%-27s %-12s %8d %7.1f%% %8.3fs %8.3fs %-22s %7.0f\n", r.strategy, r.workload,
			r.summary.Requests-r.summary.Failures, 100*r.hitRate, r.summary.EngineTTFT.P50, r.summary.EngineTTFT.P90,
			strings.Join(shares, "/")+fmt.Sprintf(" (%.2f)", r.summary.ShareMaxAvg), r.spills)
	}
}

func setStrategy(ctx context.Context, env *harness.Env, router *harness.Router, s servingv1alpha1.RoutingStrategy) error {
	var ep servingv1alpha1.LLMEndpoint
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: endpoint}, &ep); err != nil {
		return err
	}
	patch := client.MergeFrom(ep.DeepCopy())
	ep.Spec.Routing.Strategy = s
	if err := env.Client.Patch(ctx, &ep, patch); err != nil {
		return err
	}
	step("kubectl patch llmendpoint %s: spec.routing.strategy=%s", endpoint, s)
	return wait.PollUntilContextTimeout(ctx, poll, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		doc, err := env.RoutingDocument(ctx, endpoint)
		if err != nil || doc.Strategy != routingv1alpha1.Strategy(s) {
			return false, nil
		}
		gen, err := harness.Metric(router, "warmroute_router_config_generation", nil)
		return err == nil && gen >= float64(doc.Generation), nil
	})
}

// resetCaches empties every simulated vLLM server's prefix cache (vLLM's
// POST /reset_prefix_cache), so each run starts cold and the strategies are
// compared on the same footing.
func resetCaches(env *harness.Env) {
	live := env.Agent.Backends()
	for name, s := range env.Sims.All() {
		if _, ok := live[name]; ok {
			s.ResetPrefixCache()
		}
	}
}

func fleetStats(env *harness.Env) workload.FleetStats {
	live := env.Agent.Backends()
	var servers []*vllmsim.Server
	for name, s := range env.Sims.All() {
		if _, ok := live[name]; ok {
			servers = append(servers, s)
		}
	}
	return workload.FleetStatsOf(servers...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

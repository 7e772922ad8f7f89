// Command bench runs warmroute's benchmark and writes docs/benchmarks.md
// with its plots; see package bench.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/warmroute/warmroute/test/bench"
)

func main() {
	out := flag.String("out", "docs", "directory for benchmarks.md and img/")
	trace := flag.String("trace", "../shared/traces/mooncake_synthetic_trace.jsonl", "Mooncake trace (JSONL); empty skips that workload")
	seed := flag.Uint64("seed", 1, "seed of the generated workloads and the routers' hash")
	short := flag.Bool("short", false, "run the small configuration of the package's test")
	workloads := flag.String("workloads", "", "comma-separated workload names to run (default all; hot-prefix, the threshold workload, is run as one when named; scale-events runs the scale-event workload and the activation from zero, from-zero that activation alone)")
	baseline := flag.String("baseline", "", "git revision whose router also runs, for before/after figures in the same run (empty: none)")
	command := flag.String("command", "", "how this run was started, for the report (default: this command line)")
	strategies := flag.String("strategies", "", "comma-separated strategies to run per workload (default all; \"none\" runs none)")
	replicas := flag.String("replicas", "", "comma-separated router replica counts to run per workload (default 1,2,3; \"none\" runs none)")
	epp := flag.String("epp", "", "comma-separated counts of gateways to run per workload through the Endpoint Picker Protocol (go-control-plane's ext_proc client in front of one router's --epp-listen; default 1; \"none\" runs none)")
	eppRuns := flag.Int("epp-runs", 1, "runs of each workload through each count of gateways of -epp (the targets compare their median with the standalone router's)")
	extras := flag.Bool("extras", true, "also run the hot-prefix, restart, remap, decision, proxy and upload measurements (false: only workloads × strategies and replicas, for quick experiments)")
	flow := flag.String("flow", "off", "the flow-control set (noisy neighbour, priority, rate limits; about 17 min): \"off\"; \"also\" after the selected workloads, in the full report; \"only\" alone, rewriting just the Flow control section of the -out report")
	timeScale := flag.Float64("time-scale", 0, "run every selected workload at this time scale instead of its own (0: keep each workload's; for measuring how much host delays move a result)")
	flag.Parse()

	cfg := bench.Full(*trace, *seed)
	if *short {
		cfg = bench.Short(*seed)
	}
	if *trace != "" && !*short && *flow != "only" {
		if _, err := os.Stat(*trace); err != nil {
			fmt.Fprintf(os.Stderr, "bench: the Mooncake trace is missing (%v); pass -trace= to skip it\n", err)
			os.Exit(2)
		}
	}
	keep := map[string]bool{}
	for _, w := range strings.Split(*workloads, ",") {
		keep[strings.TrimSpace(w)] = true
	}
	if *workloads != "" {
		var ws []bench.WorkloadSpec
		for _, w := range cfg.Workloads {
			if keep[w.Name] {
				ws = append(ws, w)
			}
		}
		// The threshold workload normally runs only among the extras; named
		// here, it runs like any other, for a quick look at the threshold.
		if hot := cfg.Replicas.HotPrefix; hot != nil && keep[hot.Name] {
			ws = append(ws, *hot)
		}
		cfg.Workloads = ws
	}
	if *timeScale < 0 || *timeScale > 1 {
		fmt.Fprintf(os.Stderr, "bench: -time-scale %v is outside (0, 1]\n", *timeScale)
		os.Exit(2)
	}
	if *timeScale > 0 {
		for i := range cfg.Workloads {
			cfg.Workloads[i].TimeScale = *timeScale
		}
	}
	// The scale events are the scale-event workload and the activation
	// from zero (the third scale-event target), which also runs
	// alone as from-zero. Named, they run even without the extras.
	scaleEvents, fromZero := cfg.ScaleEvents, cfg.FromZero
	runScaleEvents := keep[bench.NameScaleEvents]
	runFromZero := runScaleEvents || keep[bench.NameFromZero]
	if *workloads != "" {
		cfg.ScaleEvents, cfg.FromZero = nil, nil
	}
	if err := cfg.Select(*strategies, *replicas, *epp, *extras); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if runScaleEvents {
		cfg.ScaleEvents = scaleEvents
	}
	if runFromZero {
		cfg.FromZero = fromZero
	}
	switch *flow {
	case "off":
	case "also", "only":
		cfg.Flow = bench.Flow()
		if *short {
			cfg.Flow = bench.ShortFlow()
		}
	default:
		fmt.Fprintf(os.Stderr, "bench: -flow %q is not off, also or only\n", *flow)
		os.Exit(2)
	}
	cfg.EPPRuns = *eppRuns
	cfg.Baseline = *baseline
	cfg.Command = *command
	if cfg.Command == "" {
		cfg.Command = strings.TrimSpace("go run ./test/bench/cmd/bench " + strings.Join(os.Args[1:], " "))
	}
	start := time.Now()
	cfg.Log = func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *flow == "only" {
		if err := runFlowOnly(ctx, cfg, *out); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "rewrote the flow-control section of %s/benchmarks.md in %s\n", *out, time.Since(start).Round(time.Second))
		return
	}
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	if err := rep.Write(*out); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "wrote %s/benchmarks.md in %s\n", *out, time.Since(start).Round(time.Second))
}

// runFlowOnly runs the flow-control set alone and rewrites its section of
// dir/benchmarks.md, leaving the rest of the report as the last full run
// wrote it.
func runFlowOnly(ctx context.Context, cfg bench.Config, dir string) error {
	path := filepath.Join(dir, "benchmarks.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("-flow only rewrites a section of an existing report: %w", err)
	}
	rep, err := bench.RunFlow(ctx, cfg)
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(bench.SpliceSection(string(doc), rep.Markdown())), 0o644)
}

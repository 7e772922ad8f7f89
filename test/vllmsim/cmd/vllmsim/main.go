// Command vllmsim serves one simulated vLLM instance; see package
// github.com/warmroute/warmroute/test/vllmsim for the model.
//
//	vllmsim --listen 127.1.0.5:8000 --instance-id pod-3 --time-scale 0.01
//
// Or as a stand-in for `vllm serve`, with the command line of the pinned
// vLLM release (vllmsim.PinnedRelease), which it parses as vLLM does: an
// argument that release would refuse exits with status 2 and argparse's
// message, as vLLM would.
//
//	vllmsim serve meta-llama/Llama-3.1-8B-Instruct --port=8000 --shutdown-timeout=30
//
// On SIGTERM (or SIGINT) it stops as vLLM does: at once, aborting the
// requests in flight, unless --shutdown-timeout gives them time to finish.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/warmroute/warmroute/test/vllmsim"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		args, err := serveArgs(os.Args[2:])
		var usage *vllmsim.UsageError
		if errors.As(err, &usage) {
			fmt.Fprintln(os.Stderr, usage)
			os.Exit(2) // argparse's status
		}
		if err == nil {
			err = run(args)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "vllmsim:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "vllmsim:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	var (
		cfg          vllmsim.Config
		decodeMs     float64
		overheadMs   float64
		loraFail     string
		loraModules  listFlag
		loraDelay    time.Duration
		shutdownSecs float64
		loadDelay    time.Duration
	)
	fs := flag.NewFlagSet("vllmsim", flag.ContinueOnError)
	fs.StringVar(&cfg.Listen, "listen", vllmsim.DefaultListen, "address to listen on")
	fs.StringVar(&cfg.Model, "model", vllmsim.DefaultModel, "served base model name")
	fs.StringVar(&cfg.InstanceID, "instance-id", "", "identity reported in the X-Vllmsim-Instance header (default: the listen address)")
	fs.IntVar(&cfg.CacheTokens, "cache-tokens", vllmsim.DefaultCacheTokens, "KV-cache capacity in tokens")
	fs.IntVar(&cfg.BlockSize, "block-size", vllmsim.DefaultBlockSize, "tokens per KV block")
	fs.IntVar(&cfg.MaxModelLen, "max-model-len", vllmsim.DefaultMaxModelLen, "maximum prompt plus completion tokens")
	fs.IntVar(&cfg.CharsPerToken, "chars-per-token", vllmsim.DefaultCharsPerToken, "bytes of text per simulated token")
	fs.Float64Var(&cfg.PrefillTokensPerSec, "prefill-tokens-per-sec", vllmsim.DefaultPrefillTokensPerSec, "prefill throughput, simulated tokens per second")
	fs.Float64Var(&decodeMs, "decode-ms-per-token", float64(vllmsim.DefaultDecodeStep)/float64(time.Millisecond), "duration of a decoding engine step (inter-token latency), simulated milliseconds")
	fs.Float64Var(&overheadMs, "step-overhead-ms", float64(vllmsim.DefaultStepOverhead)/float64(time.Millisecond), "fixed cost of a prefill-only engine step, simulated milliseconds")
	fs.IntVar(&cfg.MaxRunning, "max-running", vllmsim.DefaultMaxRunning, "maximum running requests (vLLM --max-num-seqs); the rest wait")
	fs.IntVar(&cfg.MaxBatchedTokens, "max-batched-tokens", vllmsim.DefaultMaxBatchedTokens, "token budget per engine step (vLLM --max-num-batched-tokens)")
	fs.IntVar(&cfg.DefaultMaxTokens, "default-max-tokens", vllmsim.DefaultMaxTokens, "completion length when a request sets no max_tokens")
	fs.Float64Var(&cfg.TimeScale, "time-scale", 1, "wall-clock seconds per simulated second (0.01 runs 100x faster)")
	fs.IntVar(&cfg.MaxLoRAs, "max-loras", 0, "maximum resident LoRA adapters; 0 means unlimited")
	fs.Var(&loraModules, "lora-modules", "adapter loaded at start, as name=path; repeatable")
	fs.StringVar(&loraFail, "lora-fail", "", "comma-separated adapter names whose load fails")
	fs.DurationVar(&loraDelay, "lora-load-delay", 0, "simulated time an adapter load takes")
	fs.StringVar(&cfg.APIKey, "api-key", "", "vLLM's --api-key: requests under /v1 then need Authorization: Bearer <key>")
	fs.Float64Var(&shutdownSecs, "shutdown-timeout", 0, "seconds SIGTERM waits for running requests (new ones get 503); 0 aborts them at once, as vLLM does")
	fs.DurationVar(&loadDelay, "model-load-delay", envDuration(modelLoadDelayEnv), "wall-clock time the model takes to load, during which nothing listens, as with vLLM (default from $"+modelLoadDelayEnv+", which a `vllm serve` command line keeps)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.APIKey == "" {
		// As vLLM: the flag wins, else the environment.
		cfg.APIKey = os.Getenv("VLLM_API_KEY")
	}
	cfg.DecodeStep = time.Duration(decodeMs * float64(time.Millisecond))
	cfg.StepOverhead = time.Duration(overheadMs * float64(time.Millisecond))
	cfg.LoRALoadDelay = loraDelay
	cfg.ShutdownTimeout = time.Duration(shutdownSecs * float64(time.Second))
	if loraFail != "" {
		cfg.LoRAFail = strings.Split(loraFail, ",")
	}
	if len(loraModules) > 0 {
		cfg.LoRAModules = make(map[string]string)
		for _, m := range loraModules {
			name, path, ok := strings.Cut(m, "=")
			if !ok || name == "" || path == "" {
				return fmt.Errorf("--lora-modules %q: want name=path", m)
			}
			cfg.LoRAModules[name] = path
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if loadDelay > 0 {
		// vLLM builds its engine (weights onto the GPUs) before its HTTP
		// server binds: while loading, connections are refused.
		fmt.Fprintf(os.Stderr, "vllmsim: loading the model for %s\n", loadDelay)
		select {
		case <-time.After(loadDelay):
		case <-ctx.Done():
			return nil
		}
	}
	srv, err := vllmsim.Start(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "vllmsim: serving %s on %s as %s\n", srv.Config().Model, srv.URL(), srv.InstanceID())
	<-ctx.Done()
	t := srv.Terminate()
	fmt.Fprintf(os.Stderr, "vllmsim: stopped: %d requests in flight, %d aborted, %d refused while draining\n", t.InFlight, t.Aborted, t.Refused)
	return nil
}

// serveArgs turns a `vllm serve` command line into the simulator's own
// flags: the served name (else the model), address, adapter limit,
// shutdown timeout and API key; the rest of vLLM's options are checked and
// otherwise ignored.
func serveArgs(args []string) ([]string, error) {
	parsed, err := vllmsim.PinnedServeCLI().Parse(args)
	if err != nil {
		return nil, err
	}
	model := parsed.Model
	if names := parsed.Values("--served-model-name"); len(names) > 0 {
		model = names[0]
	}
	host, _ := parsed.Value("--host")
	port, ok := parsed.Value("--port")
	if !ok {
		port = "8000"
	}
	out := []string{"--listen", net.JoinHostPort(host, port)}
	if model != "" {
		out = append(out, "--model", model)
	}
	for vllmFlag, simFlag := range map[string]string{"--max-loras": "--max-loras", "--shutdown-timeout": "--shutdown-timeout"} {
		if v, ok := parsed.Value(vllmFlag); ok {
			out = append(out, simFlag, v)
		}
	}
	if keys := parsed.Values("--api-key"); len(keys) > 0 {
		out = append(out, "--api-key", keys[0])
	}
	return out, nil
}

// modelLoadDelayEnv sets --model-load-delay where the command line is
// vLLM's (the simulator standing in for the vLLM image in a cluster).
const modelLoadDelayEnv = "VLLMSIM_MODEL_LOAD_DELAY"

// envDuration is the duration in the environment variable (0 when unset
// or malformed; a malformed one is reported at start).
func envDuration(name string) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vllmsim: ignoring $%s=%q: %v\n", name, v, err)
	}
	return d
}

// listFlag collects a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// Command router is warmroute's prefix-aware HTTP router: it reads the
// routing document the operator writes, and forwards each inference request
// to the vLLM instance whose KV cache most likely holds its prefix.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/router/config"
	"github.com/warmroute/warmroute/sidecar/router/picker"
	"github.com/warmroute/warmroute/sidecar/router/policy"
	"github.com/warmroute/warmroute/sidecar/router/proxy"
)

type flags struct {
	configDir, configFile, configMap, kubeconfig string
	listen, metricsListen                        string
	maxHeaderBytes                               int
	strategyOverride                             string
	readHeaderTimeout, idleTimeout, shutdown     time.Duration
	drainDelay                                   time.Duration
	verbosity                                    int
	// opts are the router's options the flags set directly.
	opts    proxy.Options
	picker  pickerFlags
	tenancy tenancyFlags
	epp     eppFlags
}

// poll is how often mounted files are re-read besides fsnotify.
const poll = time.Second

func parseFlags(args []string) (*flags, error) {
	f := &flags{}
	o := &f.opts
	fs := flag.NewFlagSet("router", flag.ContinueOnError)
	d := policy.DefaultTuning()
	fs.StringVar(&f.configDir, "config-dir", "", "mounted routing ConfigMap directory (not a subPath mount) containing "+routingv1alpha1.ConfigMapKey)
	fs.StringVar(&f.configFile, "config-file", "", "routing document file, instead of --config-dir")
	fs.StringVar(&f.configMap, "configmap", "", "namespace/name of the routing ConfigMap, read through the Kubernetes API as well (changes apply in about a second)")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig for --configmap (default: in-cluster)")
	fs.StringVar(&f.listen, "listen", ":8080", "traffic address (\"\": no proxy, picker only: needs --epp-listen)")
	fs.StringVar(&f.metricsListen, "metrics-listen", ":9090", "address for /metrics, /healthz and /readyz")
	fs.Int64Var(&o.MaxBodyBytes, "max-body-bytes", proxy.DefaultMaxBodyBytes, "largest request body accepted (413 above, refused before reading when Content-Length says so)")
	fs.Int64Var(&o.MaxBufferedBytes, "max-buffered-bytes", 0, "request body bytes held at once across all requests; past it new requests get 503 with Retry-After (0: half the container memory limit, or 1 GiB without one)")
	fs.IntVar(&f.maxHeaderBytes, "max-header-bytes", 64<<10, "largest request header block, on the traffic and metrics listeners (431 above)")
	fs.DurationVar(&o.BodyReadTimeout, "body-read-timeout", proxy.DefaultBodyReadTimeout, "time a client has to send its whole request body (408 after)")
	fs.DurationVar(&o.StreamIdleTimeout, "stream-idle-timeout", proxy.DefaultStreamIdleTimeout, "longest silence between chunks of a backend's response; the backend is then cut off and ejected")
	fs.DurationVar(&o.ResponseHeaderTimeout, "response-header-timeout", proxy.DefaultResponseHeaderTimeout,
		"longest wait for a backend's response headers on a request that is not streamed, which come with the whole completion (a stream waits --stream-idle-timeout); past it the client gets 504 and the backend is ejected")
	fs.BoolVar(&o.AllowLoopbackBackends, "allow-loopback-backends", false, "accept loopback instance addresses in the routing document (local clusters and tests; in a pod loopback is the router itself)")
	fs.DurationVar(&o.HealthInterval, "health-interval", 5*time.Second, "period of active /health checks (0 disables)")
	fs.DurationVar(&o.HoldTimeout, "hold-timeout", proxy.DefaultHoldTimeout, "how long a request that finds no instance (none yet, all starting, all ejected) is held for one before 504 (0: answer 503 at once)")
	fs.IntVar(&o.MaxHeld, "max-held", proxy.DefaultMaxHeld, "requests held at once for an instance; past it 503 with Retry-After (held bodies take at most half of --max-buffered-bytes)")
	fs.IntVar(&o.MaxAttempts, "max-attempts", proxy.DefaultMaxAttempts, "instances tried when connections fail before anything was sent")
	fs.DurationVar(&f.readHeaderTimeout, "read-header-timeout", 10*time.Second, "time a client has to send request headers")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", 120*time.Second, "keep-alive idle timeout for client connections, on the traffic and metrics listeners")
	fs.DurationVar(&f.shutdown, "shutdown-timeout", 60*time.Second, "how long in-flight requests may finish after SIGTERM")
	fs.DurationVar(&f.drainDelay, "drain-delay", 5*time.Second, "after SIGTERM, how long to keep serving (not ready, connections closed after each response) before closing the listener, while endpoints stop sending traffic")
	fs.IntVar(&o.Tuning.IndexEntries, "index-entries", d.IndexEntries, "PREFIX_AWARE: bound of the prefix index, about 48 bytes per entry (the router's memory)")
	fs.Float64Var(&o.Tuning.BytesPerToken, "bytes-per-token", d.BytesPerToken, "prompt text bytes per token of the served model's tokenizer, for the token load (4 suits English; 1-2 CJK text)")
	warm := true
	fs.BoolVar(&warm, "warm", true, "PREFIX_AWARE: when keys change owner (an instance joins, or drains before it leaves), serve each where it is cached and send its next owner a one-token copy first, so it moves warm (false: keys move cold)")
	fs.BoolVar(&warm, "warm-joining", true, "deprecated spelling of --warm")
	fs.IntVar(&f.verbosity, "v", 0, "log verbosity (1: config and retries, 2: every request, never prompt text)")
	if benchmarkFlags != nil {
		benchmarkFlags(fs, f)
	}
	f.picker.register(fs, o)
	f.tenancy.register(fs)
	f.epp.register(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o.Tuning.NoWarm = !warm
	if (f.configDir == "") == (f.configFile == "") && f.configMap == "" {
		return nil, errors.New("give one of --config-dir or --config-file (and/or --configmap)")
	}
	if f.configDir != "" && f.configFile != "" {
		return nil, errors.New("--config-dir and --config-file are exclusive")
	}
	if f.listen == "" && f.epp.listen == "" {
		return nil, errors.New("--listen and --epp-listen are both empty: serve the proxy, the Endpoint Picker Protocol, or both")
	}
	if o.StrategyOverride = policy.Strategy(f.strategyOverride); o.StrategyOverride != "" {
		if err := policy.ValidStrategy(o.StrategyOverride, true); err != nil {
			return nil, fmt.Errorf("--strategy-override: %w", err)
		}
		// Only the override may name a benchmark strategy, never the
		// routing document.
		o.Tuning.BenchmarkStrategies = true
	}
	for _, err := range []error{f.picker.validate(o), f.tenancy.validate(), f.epp.validate()} {
		if err != nil {
			return nil, err
		}
	}
	return f, nil
}

// benchmarkFlags registers the flags of benchmark builds (the
// benchstrategies tag, see strategy_override.go); nil in the product.
var benchmarkFlags func(*flag.FlagSet, *flags)

func main() {
	f, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	log := funcr.NewJSON(func(obj string) { fmt.Fprintln(os.Stderr, obj) }, funcr.Options{Verbosity: f.verbosity, LogTimestamp: true})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, f, log); err != nil {
		log.Error(err, "router failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, f *flags, log logr.Logger) error {
	o := f.opts
	var source string
	o.MaxBufferedBytes, source = bufferBudget(o.MaxBufferedBytes, cgroupRoot)
	log.Info("request buffer budget", "bytes", o.MaxBufferedBytes, "source", source)
	if o.MaxBufferedBytes < o.MaxBodyBytes {
		log.Info("warning: --max-buffered-bytes is below --max-body-bytes; the largest bodies will always be refused", "budget", o.MaxBufferedBytes, "maxBodyBytes", o.MaxBodyBytes)
	}
	var wg sync.WaitGroup
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer func() { stopWatch(); wg.Wait() }()
	var err error
	if o.Salts, o.Auth, err = startTenancy(watchCtx, &wg, f.tenancy, poll, log); err != nil {
		return err
	}
	o.UpstreamAPIKey = upstreamAPIKey(o.Auth, log)
	var client kubernetes.Interface
	if f.configMap != "" || f.picker.lease != "" {
		if client, err = kubeClient(f.kubeconfig); err != nil {
			return err
		}
	}
	if f.picker.lease != "" {
		o.OnHold, o.OnForward = leaseHooks(client, f.picker, log)
	}
	if f.picker.keyFile != "" {
		if o.Keys, err = picker.LoadKeys(f.picker.keyFile); err != nil {
			return err
		}
	}
	o.Log = log
	r := proxy.New(o)
	m := r.Metrics()
	loader := &config.Loader{Apply: r.Apply, Log: log.WithName("config"),
		Observe: func(res string) { m.ConfigReloads.WithLabelValues(res).Inc() }}

	path := f.configFile
	if f.configDir != "" {
		path = filepath.Join(f.configDir, routingv1alpha1.ConfigMapKey)
	}
	if path != "" {
		wg.Go(func() {
			if err := config.WatchFile(watchCtx, path, poll, loader); err != nil {
				log.Error(err, "routing document watch stopped", "path", path)
			}
		})
	}
	if f.configMap != "" {
		ns, name, err := config.ParseConfigMapRef(f.configMap)
		if err != nil {
			return err
		}
		wg.Go(func() {
			if err := config.WatchConfigMap(watchCtx, client, ns, name, loader); err != nil {
				log.Error(err, "routing ConfigMap watch stopped", "configmap", f.configMap)
			}
		})
	}
	wg.Go(func() { r.RunHealthChecks(watchCtx) })

	admin := http.NewServeMux()
	admin.Handle("GET /metrics", m.Handler())
	r.HealthRoutes(admin)
	conns := newUnusedConns()
	var servers []*http.Server
	// Picker only (a Gateway's InferencePool sends requests to the
	// instances itself): no proxy listener. The traffic server goes first:
	// shutdownServers reports its drain.
	if f.listen != "" {
		servers = append(servers, listenerServer(f.listen, f, r.Handler(), conns, log))
	}
	servers = append(servers, listenerServer(f.metricsListen, f, admin, conns, log))
	if f.picker.listen != "" {
		// The pick API's listener has limits of its own (picker.Server):
		// its peers are sibling replicas, whose calls are small and fast.
		servers = append(servers, r.Picker().Server(f.picker.listen, proxy.StdLogger(log.WithName("pick").WithName("http"))))
	}

	errc := make(chan error, len(servers)+1) // and the EPP server
	for _, srv := range servers {
		ln, err := net.Listen("tcp", srv.Addr)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", srv.Addr, err)
		}
		log.Info("listening", "address", ln.Addr().String())
		go func() {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serve %s: %w", srv.Addr, err)
			}
		}()
	}
	stopEPP, err := serveEPP(watchCtx, f, r, log, errc)
	if err != nil {
		return err
	}
	// Stand for picker once the pick listener is open: a leader must be
	// reachable by the time the Lease names it.
	electCtx, stopElection := context.WithCancel(context.Background())
	defer stopElection()
	if f.picker.lease != "" {
		e := f.picker.election(client, f.opts.Replica)
		wg.Go(func() {
			if err := r.Picker().Elect(electCtx, e); err != nil {
				log.Error(err, "picker election stopped; routing by the fallback")
			}
		})
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		return err
	}
	// Graceful shutdown: stop accepting, let in-flight requests (streams
	// included) finish, then exit. Clients and Services keep sending for a
	// moment after SIGTERM (until endpoints propagate): keep serving them
	// while draining (see Router.Drain) before closing the listener.
	r.Drain()
	log.Info("draining: not ready, closing connections after each response", "delay", f.drainDelay.String())
	time.Sleep(f.drainDelay)
	log.Info("shutting down; finishing in-flight requests", "timeout", f.shutdown.String())
	sctx, cancel := context.WithTimeout(context.Background(), f.shutdown)
	defer cancel()
	stopEPP(sctx)
	if err := shutdownServers(sctx, conns, log, servers...); err != nil {
		return fmt.Errorf("drain traffic server: %w", err)
	}
	return nil
}

func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return client, nil
}

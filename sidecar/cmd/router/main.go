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
	"github.com/warmroute/warmroute/sidecar/router/policy"
	"github.com/warmroute/warmroute/sidecar/router/proxy"
)

type flags struct {
	configDir, configFile, configMap, kubeconfig string
	listen, metricsListen                        string
	maxBodyBytes, maxBufferedBytes               int64
	maxHeaderBytes                               int
	bodyReadTimeout, streamIdleTimeout           time.Duration
	allowLoopbackBackends                        bool
	strategyOverride                             string
	poll, healthInterval, ejectBase, ejectMax    time.Duration
	readHeaderTimeout, idleTimeout, shutdown     time.Duration
	drainDelay                                   time.Duration
	maxAttempts, maxHeld                         int
	holdTimeout                                  time.Duration
	tuning                                       policy.Tuning
	verbosity                                    int
	picker                                       pickerFlags
	tenancy                                      tenancyFlags
	upstream                                     upstreamFlags
	epp                                          eppFlags
}

func parseFlags(args []string) (*flags, error) {
	f := &flags{}
	fs := flag.NewFlagSet("router", flag.ContinueOnError)
	d := policy.DefaultTuning()
	fs.StringVar(&f.configDir, "config-dir", "", "mounted routing ConfigMap directory (not a subPath mount) containing "+routingv1alpha1.ConfigMapKey)
	fs.StringVar(&f.configFile, "config-file", "", "routing document file, instead of --config-dir")
	fs.StringVar(&f.configMap, "configmap", "", "namespace/name of the routing ConfigMap, read through the Kubernetes API as well (changes apply in about a second)")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig for --configmap (default: in-cluster)")
	fs.StringVar(&f.listen, "listen", ":8080", "traffic address (\"\": no proxy, picker only: needs --epp-listen)")
	fs.StringVar(&f.metricsListen, "metrics-listen", ":9090", "address for /metrics, /healthz and /readyz")
	fs.Int64Var(&f.maxBodyBytes, "max-body-bytes", proxy.DefaultMaxBodyBytes, "largest request body accepted (413 above, refused before reading when Content-Length says so)")
	fs.Int64Var(&f.maxBufferedBytes, "max-buffered-bytes", 0, "request body bytes held at once across all requests; past it new requests get 503 with Retry-After (0: half the container memory limit, or 1 GiB without one)")
	fs.IntVar(&f.maxHeaderBytes, "max-header-bytes", 64<<10, "largest request header block, on the traffic and metrics listeners (431 above)")
	fs.DurationVar(&f.bodyReadTimeout, "body-read-timeout", proxy.DefaultBodyReadTimeout, "time a client has to send its whole request body (408 after)")
	fs.DurationVar(&f.streamIdleTimeout, "stream-idle-timeout", proxy.DefaultStreamIdleTimeout, "longest silence between chunks of a backend's response; the backend is then cut off and ejected")
	fs.BoolVar(&f.allowLoopbackBackends, "allow-loopback-backends", false, "accept loopback instance addresses in the routing document (local clusters and tests; in a pod loopback is the router itself)")
	fs.DurationVar(&f.poll, "poll-interval", time.Second, "how often the routing document file is re-read besides fsnotify")
	fs.DurationVar(&f.healthInterval, "health-interval", 5*time.Second, "period of active /health checks (0 disables)")
	fs.DurationVar(&f.ejectBase, "eject-base", proxy.DefaultEjectBase, "first ejection of a failing instance; doubles per consecutive failure")
	fs.DurationVar(&f.ejectMax, "eject-max", proxy.DefaultEjectMax, "longest ejection")
	fs.DurationVar(&f.holdTimeout, "hold-timeout", proxy.DefaultHoldTimeout, "how long a request that finds no instance (none yet, all starting, all ejected) is held for one before 504 (0: answer 503 at once)")
	fs.IntVar(&f.maxHeld, "max-held", proxy.DefaultMaxHeld, "requests held at once for an instance; past it 503 with Retry-After (held bodies take at most half of --max-buffered-bytes)")
	fs.IntVar(&f.maxAttempts, "max-attempts", proxy.DefaultMaxAttempts, "instances tried when connections fail before anything was sent")
	fs.DurationVar(&f.readHeaderTimeout, "read-header-timeout", 10*time.Second, "time a client has to send request headers")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", 120*time.Second, "keep-alive idle timeout for client connections, on the traffic and metrics listeners")
	fs.DurationVar(&f.shutdown, "shutdown-timeout", 60*time.Second, "how long in-flight requests may finish after SIGTERM")
	fs.DurationVar(&f.drainDelay, "drain-delay", 5*time.Second, "after SIGTERM, how long to keep serving (not ready, connections closed after each response) before closing the listener, while endpoints stop sending traffic")
	fs.IntVar(&f.tuning.IndexEntries, "index-entries", d.IndexEntries, "PREFIX_AWARE: bound of the prefix index, about 48 bytes per entry (the router's memory)")
	fs.Float64Var(&f.tuning.BytesPerToken, "bytes-per-token", d.BytesPerToken, "prompt text bytes per token of the served model's tokenizer, for the token load (4 suits English; 1-2 CJK text)")
	warm := true
	fs.BoolVar(&warm, "warm", true, "PREFIX_AWARE: when keys change owner (an instance joins, or drains before it leaves), serve each where it is cached and send its next owner a one-token copy first, so it moves warm (false: keys move cold)")
	fs.BoolVar(&warm, "warm-joining", true, "deprecated spelling of --warm")
	fs.IntVar(&f.verbosity, "v", 0, "log verbosity (1: config and retries, 2: every request, never prompt text)")
	if benchmarkFlags != nil {
		benchmarkFlags(fs, f)
	}
	f.picker.register(fs)
	f.tenancy.register(fs)
	f.upstream.register(fs)
	f.epp.register(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	f.tuning.NoWarm = !warm
	if (f.configDir == "") == (f.configFile == "") && f.configMap == "" {
		return nil, errors.New("give one of --config-dir or --config-file (and/or --configmap)")
	}
	if f.configDir != "" && f.configFile != "" {
		return nil, errors.New("--config-dir and --config-file are exclusive")
	}
	if f.listen == "" && f.epp.listen == "" {
		return nil, errors.New("--listen and --epp-listen are both empty: serve the proxy, the Endpoint Picker Protocol, or both")
	}
	if s := policy.Strategy(f.strategyOverride); s != "" {
		if err := policy.ValidStrategy(s, true); err != nil {
			return nil, fmt.Errorf("--strategy-override: %w", err)
		}
		// Only the override may name a benchmark strategy, never the
		// routing document.
		f.tuning.BenchmarkStrategies = true
	}
	if err := f.picker.validate(); err != nil {
		return nil, err
	}
	if err := f.tenancy.validate(); err != nil {
		return nil, err
	}
	if err := f.epp.validate(); err != nil {
		return nil, err
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
	budget, source := bufferBudget(f.maxBufferedBytes, cgroupRoot)
	log.Info("request buffer budget", "bytes", budget, "source", source)
	if budget < f.maxBodyBytes {
		log.Info("warning: --max-buffered-bytes is below --max-body-bytes; the largest bodies will always be refused", "budget", budget, "maxBodyBytes", f.maxBodyBytes)
	}
	var wg sync.WaitGroup
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer func() { stopWatch(); wg.Wait() }()
	salts, auth, err := startTenancy(watchCtx, &wg, f.tenancy, f.poll, log)
	if err != nil {
		return err
	}
	upstreamKey := upstreamAPIKey(auth, log)
	onHold, onForward, err := leaseHooks(f, log)
	if err != nil {
		return err
	}
	mode, keys, err := f.picker.routerOptions()
	if err != nil {
		return err
	}
	r := proxy.New(proxy.Options{
		Picker:                mode,
		Replica:               f.picker.podName,
		Keys:                  keys,
		PickTimeout:           f.picker.timeout,
		MaxBodyBytes:          f.maxBodyBytes,
		MaxBufferedBytes:      budget,
		BodyReadTimeout:       f.bodyReadTimeout,
		StreamIdleTimeout:     f.streamIdleTimeout,
		ResponseHeaderTimeout: f.upstream.responseHeaderTimeout,
		AllowLoopbackBackends: f.allowLoopbackBackends,
		MaxAttempts:           f.maxAttempts,
		EjectBase:             f.ejectBase,
		EjectMax:              f.ejectMax,
		HealthInterval:        f.healthInterval,
		HoldTimeout:           f.holdTimeout,
		MaxHeld:               f.maxHeld,
		OnHold:                onHold,
		OnForward:             onForward,
		StrategyOverride:      policy.Strategy(f.strategyOverride),
		Tuning:                f.tuning,
		Salts:                 salts,
		Auth:                  auth,
		UpstreamAPIKey:        upstreamKey,
		Log:                   log,
	})
	m := r.Metrics()
	loader := &config.Loader{Apply: r.Apply, Log: log.WithName("config"),
		Observe: func(res string) { m.ConfigReloads.WithLabelValues(res).Inc() }}

	if path := configPath(f); path != "" {
		wg.Go(func() {
			if err := config.WatchFile(watchCtx, path, f.poll, loader); err != nil {
				log.Error(err, "routing document watch stopped", "path", path)
			}
		})
	}
	if f.configMap != "" {
		ns, name, err := config.ParseConfigMapRef(f.configMap)
		if err != nil {
			return err
		}
		client, err := kubeClient(f.kubeconfig)
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
		traffic := listenerServer(f.listen, f, r.Handler(), log)
		traffic.ConnState = conns.track
		servers = append(servers, traffic)
	}
	adminSrv := listenerServer(f.metricsListen, f, admin, log)
	adminSrv.ConnState = conns.track
	servers = append(servers, adminSrv)
	if pick := pickServer(f, r, log); pick != nil {
		servers = append(servers, pick)
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
	if err := startElection(electCtx, &wg, f, r, log); err != nil {
		return err
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

func configPath(f *flags) string {
	if f.configDir != "" {
		return filepath.Join(f.configDir, routingv1alpha1.ConfigMapKey)
	}
	return f.configFile
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

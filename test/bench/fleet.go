package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/router/policy"
	"github.com/warmroute/warmroute/test/gobuild"
	"github.com/warmroute/warmroute/test/process"
	"github.com/warmroute/warmroute/test/vllmsim"
)

// BuildRouter compiles the router binary into dir, with the benchmark
// baseline and --strategy-override (routerTags), and returns its path.
func BuildRouter(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "router")
	return bin, gobuild.Build(ctx, "./sidecar/cmd/router", bin, "-tags", routerTags)
}

// routerTags are the build tags of the routers under test: benchstrategies
// adds the benchmark baseline (Baseline) and --strategy-override, which
// the product router lacks. Routers of revisions before the tag have both
// anyway and ignore it.
const routerTags = "benchstrategies"

// Baseline is the benchmark-only strategy of routers built with routerTags:
// one hash of the first prefixLength, placed by rendezvous hashing, spilled
// to the least loaded above the concurrency threshold (what Amazon
// describes).
const Baseline policy.Strategy = "SAGEMAKER_BASELINE"

// fleet is N simulators with cold caches and one router process in front of
// them: what one workload × strategy run uses, then throws away.
type fleet struct {
	sims []*vllmsim.Server
	// members are the sims the router's first routing document lists
	// (nil: all).
	members    []int
	bin        routerBinary
	router     *process.Process
	routerURL  string
	metricsURL string
	// logPath is the router's JSON log, where it announces its listeners.
	logPath string
}

// simConfig is the configuration of instance i.
func (c *Config) simConfig(i int, timeScale float64) vllmsim.Config {
	return vllmsim.Config{
		Listen:      "127.0.0.1:0",
		Model:       c.Model,
		InstanceID:  instanceID(i),
		CacheTokens: c.CacheTokens,
		MaxModelLen: c.MaxModelLen,
		MaxRunning:  c.MaxRunning,
		TimeScale:   timeScale,
	}
}

func instanceID(i int) string { return fmt.Sprintf("vllm-%d", i) }

// startSims starts n simulators.
func (c *Config) startSims(n int, timeScale float64) ([]*vllmsim.Server, error) {
	var sims []*vllmsim.Server
	for i := range n {
		s, err := vllmsim.Start(c.simConfig(i, timeScale))
		if err != nil {
			closeSims(sims)
			return nil, err
		}
		sims = append(sims, s)
	}
	return sims, nil
}

func closeSims(sims []*vllmsim.Server) {
	for _, s := range sims {
		_ = s.Close()
	}
}

// routingDocument is what the operator would write for these instances.
func (c *Config) routingDocument(sims []*vllmsim.Server) ([]byte, error) {
	return c.routingDocumentOf(sims, indexes(len(sims)), 1)
}

// routingDocumentOf is the routing document of generation gen listing the
// instances members (indexes into sims), those of draining marked so.
func (c *Config) routingDocumentOf(sims []*vllmsim.Server, members []int, gen int64, draining ...int) ([]byte, error) {
	var instances []routingv1alpha1.Instance
	for _, i := range members {
		instances = append(instances, routingv1alpha1.Instance{ID: instanceID(i), Address: sims[i].Addr(), Draining: slices.Contains(draining, i)})
	}
	return c.documentOf(instances, gen)
}

// documentOf is the routing document of generation gen listing instances.
func (c *Config) documentOf(instances []routingv1alpha1.Instance, gen int64) ([]byte, error) {
	doc := routingv1alpha1.Document{
		APIVersion: routingv1alpha1.APIVersion,
		Kind:       routingv1alpha1.Kind,
		Endpoint:   "bench/llm",
		Generation: gen,
		Model:      c.Model,
		Strategy:   routingv1alpha1.StrategyPrefixAware,
		PrefixAware: routingv1alpha1.PrefixAware{
			PrefixLength:         c.PrefixLength,
			ConcurrencyThreshold: c.ConcurrencyThreshold,
		},
		HashSeed:    c.Seed,
		Instances:   instances,
		FlowControl: c.flowControl,
	}
	return doc.Encode()
}

// startFleet starts cold simulators and the router binary with strategy
// (passed as --strategy-override, which is how the hidden baseline is
// reached through the real binary) and the extra flags.
func (c *Config) startFleet(ctx context.Context, dir string, strategy policy.Strategy, timeScale float64, bin routerBinary, extra ...string) (*fleet, error) {
	sims, err := c.startSims(c.Instances, timeScale)
	if err != nil {
		return nil, err
	}
	f := &fleet{sims: sims, bin: bin}
	if err := f.startRouter(ctx, c, dir, strategy, extra...); err != nil {
		f.stop()
		return nil, err
	}
	return f, nil
}

func (f *fleet) startRouter(ctx context.Context, c *Config, dir string, strategy policy.Strategy, extra ...string) error {
	doc, err := c.routingDocument(f.sims)
	if f.members != nil {
		doc, err = c.routingDocumentOf(f.sims, f.members, 1)
	}
	if err != nil {
		return err
	}
	docPath := filepath.Join(dir, "routing.json")
	if err := os.WriteFile(docPath, doc, 0o644); err != nil {
		return fmt.Errorf("write routing document: %w", err)
	}
	name := "router-" + strings.ToLower(string(strategy))
	f.logPath = filepath.Join(dir, name+".log")
	args := append([]string{
		"--config-file", docPath,
		"--listen", "127.0.0.1:0",
		"--metrics-listen", "127.0.0.1:0",
		"--strategy-override", string(strategy),
		"--shutdown-timeout", "5s",
		"--allow-loopback-backends", // the simulators listen on loopback
	}, extra...)
	f.router, err = process.Start(name, f.bin.path, args, dir)
	if err != nil {
		return err
	}
	addrs, err := waitListening(ctx, f.logPath, f.router, 2)
	if err != nil {
		return err
	}
	f.routerURL, f.metricsURL = "http://"+addrs[0], "http://"+addrs[1]
	return waitReady(ctx, f.metricsURL+"/readyz")
}

// waitListening reads the router's JSON log until it has announced n
// listening addresses (traffic first, then metrics).
func waitListening(ctx context.Context, logPath string, p *process.Process, n int) ([]string, error) {
	var addrs []string
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		if exited, err := p.Exited(); exited {
			log, _ := os.ReadFile(logPath)
			return false, fmt.Errorf("router exited (%w): %s", err, log)
		}
		addrs = listening(logPath)
		return len(addrs) >= n, nil
	})
	if wait.Interrupted(err) {
		return nil, fmt.Errorf("router did not announce its addresses in %s", logPath)
	}
	if err != nil {
		return nil, err // the router exited
	}
	return addrs[:n], nil
}

// listening is the addresses the router's JSON log has announced so far.
func listening(logPath string) []string {
	fh, err := os.Open(logPath)
	if err != nil {
		return nil
	}
	defer func() { _ = fh.Close() }() // read only
	var addrs []string
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		var line struct {
			Msg     string `json:"msg"`
			Address string `json:"address"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "listening" && line.Address != "" {
			addrs = append(addrs, line.Address)
		}
	}
	return addrs
}

func waitReady(ctx context.Context, url string) error {
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		resp, err := http.Get(url)
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		return fmt.Errorf("router not ready at %s", url)
	}
	return nil
}

func (f *fleet) stop() {
	if f.router != nil {
		_ = f.router.Stop(10 * time.Second)
	}
	closeSims(f.sims)
}

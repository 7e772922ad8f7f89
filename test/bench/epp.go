package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/warmroute/warmroute/sidecar/router/policy"
	"github.com/warmroute/warmroute/test/freeport"
	"github.com/warmroute/warmroute/test/promscrape"
	"github.com/warmroute/warmroute/test/workload"
)

// EPPRun is one workload replayed through the Endpoint Picker Protocol:
// Gateways gateways calling one PREFIX_AWARE router's ext_proc service
// (--epp-listen) and forwarding each request to the simulator it chose.
type EPPRun struct {
	RunResult
	Gateways int
	// Repeat numbers the runs of one workload through one count of
	// gateways from 0 (see Config.EPPRuns).
	Repeat int
	// Placed requests got an endpoint from the picker; AddedP50, AddedP90
	// and AddedP99 are the picker's added time per placed request (wall
	// time, not scaled): from the gateway sending the body's last chunk
	// to its receiving the destination.
	Placed                       int
	AddedP50, AddedP90, AddedP99 time.Duration
	// MaxInFlight is the most requests running or waiting on one
	// instance, on MaxInstance (as ReplicaRun's).
	MaxInFlight int
	MaxInstance string
	// DecisionMean is the router's own mean decision time over the run
	// (decision_duration_seconds: extraction, salt and pick), the part of
	// the added time that is not the protocol's transport.
	DecisionMean time.Duration
	// LeftInFlight is the router's in-flight count over all instances
	// once every response has ended: 0 when the response phases ended
	// every request's accounting.
	LeftInFlight float64
}

// gatewayURL is the base URL the driver sends to; the gateway sends each
// request on to the simulator the picker chose.
const gatewayURL = "http://epp-gateway"

// measureEPP runs what is still missing of w's runs through the protocol:
// EPPRuns per count of gateways. The first rounds run between the
// one-replica runs (replicaCounts), so that a change in the shared
// machine's load falls on the protocol and the standalone router alike.
func (c *Config) measureEPP(ctx context.Context, rep *Report, spec WorkloadSpec, w workload.Workload) error {
	for round := range max(c.EPPRuns, 1) {
		if err := c.eppRound(ctx, rep, spec, w, round); err != nil {
			return err
		}
	}
	return nil
}

// eppRound runs w's round-th run through each count of gateways, where
// not run yet.
func (c *Config) eppRound(ctx context.Context, rep *Report, spec WorkloadSpec, w workload.Workload, round int) error {
	if round >= max(c.EPPRuns, 1) {
		return nil
	}
	for _, n := range c.EPPGateways {
		if _, ok := rep.eppRun(spec.Name, n, round); ok {
			continue
		}
		r, err := c.runEPP(ctx, spec, w, n)
		if err != nil {
			return fmt.Errorf("%s through the endpoint picker protocol, %d gateways: %w", spec.Name, n, err)
		}
		r.Repeat = round
		label := "EPP × " + gateways(n)
		if round > 0 {
			label += fmt.Sprintf(" (run %d)", round+1)
		}
		c.log("  %-26s hit %5.1f%%  engine ttft p50 %.3fs p90 %.3fs (client %.3fs %.3fs)  picker added p50 %s p90 %s p99 %s (%d placed; decision mean %s)  max in flight %d, left %g  spills %.1f%%  failures %d  router cpu %s/request  (%s)",
			label, 100*r.HitRate, r.Summary.EngineTTFT.P50, r.Summary.EngineTTFT.P90, r.Summary.TTFT.P50, r.Summary.TTFT.P90,
			micros(r.AddedP50), micros(r.AddedP90), micros(r.AddedP99), r.Placed, micros(r.DecisionMean), r.MaxInFlight, r.LeftInFlight, 100*r.SpillRate, r.Summary.Failures, micros(r.CPUPerRequest()), r.Wall.Round(time.Second))
		rep.EPP = append(rep.EPP, r)
	}
	return nil
}

// runEPP replays w through n gateways in front of one router serving the
// protocol, on fresh simulators.
func (c *Config) runEPP(ctx context.Context, spec WorkloadSpec, w workload.Workload, n int) (EPPRun, error) {
	dir := filepath.Join(c.WorkDir, spec.Name, fmt.Sprintf("epp-%d", n))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return EPPRun{}, err
	}
	addr, err := freeport.Loopback(1)
	if err != nil {
		return EPPRun{}, err
	}
	f, err := c.startFleet(ctx, dir, policy.PrefixAware, spec.TimeScale, c.router, "--epp-listen", addr[0], "--epp-insecure")
	if err != nil {
		return EPPRun{}, err
	}
	defer f.stop()
	// The protocol's listener is announced after the proxy's and the
	// metrics'.
	if _, err := waitListening(ctx, f.logPath, f.router, 3); err != nil {
		return EPPRun{}, err
	}
	g, err := dialGateways(addr[0], n)
	if err != nil {
		return EPPRun{}, err
	}
	defer g.close()
	before := workload.FleetStatsOf(f.sims...)
	start := time.Now()
	results, err := workload.Run(ctx, gatewayURL, w.Requests, workload.Options{
		TimeScale: spec.TimeScale, Streaming: true, Model: c.Model, Client: &http.Client{Transport: g},
	})
	if err != nil {
		return EPPRun{}, err
	}
	res, err := c.result(ctx, spec, policy.PrefixAware, f.sims, before, results, time.Since(start), f.metricsURL)
	if err != nil {
		return EPPRun{}, err
	}
	added := g.addedTimes()
	r := EPPRun{RunResult: res, Gateways: n, Placed: len(added),
		AddedP50: quantile(added, 0.5), AddedP90: quantile(added, 0.9), AddedP99: quantile(added, 0.99)}
	r.MaxInFlight, r.MaxInstance = maxInFlight(f.sims)
	if r.RouterCPU, err = routerCPU(f.router.Pid()); err != nil {
		return EPPRun{}, err
	}
	families, err := promscrape.Families(ctx, http.DefaultClient, f.metricsURL+"/metrics")
	if err != nil {
		return EPPRun{}, err
	}
	r.LeftInFlight = promscrape.Sum(families["warmroute_router_in_flight_requests"], nil)
	for _, m := range families["warmroute_router_decision_duration_seconds"].GetMetric() {
		if h := m.GetHistogram(); h.GetSampleCount() > 0 {
			r.DecisionMean = time.Duration(h.GetSampleSum() / float64(h.GetSampleCount()) * float64(time.Second))
		}
	}
	return r, nil
}

package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warmroute/warmroute/sidecar/router/policy"
	"github.com/warmroute/warmroute/test/freeport"
	"github.com/warmroute/warmroute/test/process"
	"github.com/warmroute/warmroute/test/vllmsim"
	"github.com/warmroute/warmroute/test/workload"
)

// ReplicaConfig is the router-replica part of a benchmark: the PREFIX_AWARE
// router binary run as R replicas sharing one elected picker, behind a
// spreader that sends each request to a replica picked at random, as a
// Service does.
type ReplicaConfig struct {
	// Counts are the replica counts run for each workload [1 2 3].
	Counts []int
	// Workloads names the workloads run with replicas; empty runs all.
	Workloads []string
	// HotPrefix is the workload of the threshold measurement (the most
	// requests in flight on one instance), run with each of Counts; nil
	// skips it.
	HotPrefix *WorkloadSpec
	// Restart names the workload replayed while one of RestartReplicas
	// [3] replicas restarts ("" skips it), stopped at RestartAt [0.3] of
	// the workload's span.
	Restart         string
	RestartReplicas int
	RestartAt       float64
	// ReferenceRuns is how many times each workload runs through one
	// replica [1]. The replica rows are compared with the median of these
	// runs, since one run's p90 can be far off (see RepeatSpread).
	ReferenceRuns int
	// RepeatSpread is how far apart (highest ÷ lowest − 1) the reference
	// runs' p90s may be before every other count of the workload runs
	// ReferenceRuns times as well, and the targets compare medians with
	// medians: when runs of the same code differ by more than the 5 % the
	// p90 target allows, one run of R replicas says more about its draw
	// than about R (mixed-length, where the 90th percentile falls between
	// the short chats and the long documents: fifteen one-replica runs of
	// the same code drew 131–324 ms). 0 uses defaultRepeatSpread.
	RepeatSpread float64
}

// defaultRepeatSpread is RepeatSpread's default: the p90 target's
// tolerance.
const defaultRepeatSpread = 0.05

func (r *ReplicaConfig) defaults() {
	if r.Counts == nil {
		r.Counts = []int{1, 2, 3}
	}
	r.RestartReplicas = cmp.Or(r.RestartReplicas, 3)
	r.RestartAt = cmp.Or(r.RestartAt, 0.3)
	r.ReferenceRuns = max(r.ReferenceRuns, 1)
	r.RepeatSpread = cmp.Or(r.RepeatSpread, defaultRepeatSpread)
}

// spread is how far apart xs are: the highest ÷ the lowest − 1.
func spread(xs []float64) float64 {
	if len(xs) == 0 || slices.Min(xs) <= 0 {
		return 0
	}
	return slices.Max(xs)/slices.Min(xs) - 1
}

func (r *ReplicaConfig) covers(name string) bool {
	return len(r.Workloads) == 0 || slices.Contains(r.Workloads, name)
}

// ReplicaRun is one workload replayed through R router replicas.
type ReplicaRun struct {
	RunResult // PREFIX_AWARE; spills summed over the replicas
	Replicas  int
	// Repeat numbers the runs of one workload through one count of
	// replicas from 0 (see ReplicaConfig.ReferenceRuns and RepeatSpread).
	Repeat int
	// MaxInFlight is the most requests ever running or waiting on one
	// instance (the simulators' high-water mark of vLLM's
	// num_requests_running + num_requests_waiting), on MaxInstance.
	MaxInFlight int
	MaxInstance string
}

// RestartResult is one replica restarted while a workload runs.
type RestartResult struct {
	Workload  string
	Replicas  int
	Restarted string
	// StoppedAt is when the replica was taken out of the spreader (sent
	// SIGTERM spreaderDrain later), from the start of the replay (wall
	// time); Down how long until its new process was ready.
	StoppedAt, Down time.Duration
	// Requests and Failures count the replay's requests; Served those the
	// restarted replica took after it was ready.
	Requests, Failures, Served int
	// Replayed counts the requests sent again after the replay because
	// the restarted replica was ready too late to see enough of it.
	Replayed int
}

// measureReplicas replays w through each count of router replicas, and
// again while one replica restarts when w is the restart workload.
func (c *Config) measureReplicas(ctx context.Context, rep *Report, spec WorkloadSpec, w workload.Workload) error {
	if c.Replicas.covers(spec.Name) {
		if err := c.replicaCounts(ctx, rep, spec, w, c.Replicas.ReferenceRuns); err != nil {
			return err
		}
	}
	if spec.Name != c.Replicas.Restart {
		return nil
	}
	r, err := c.runRestart(ctx, spec, w)
	if err != nil {
		return fmt.Errorf("%s restart: %w", spec.Name, err)
	}
	c.log("  restart of %s of %d: down %s; it served %d requests after; failures %d of %d; tail sent again %d",
		r.Restarted, r.Replicas, r.Down.Round(time.Millisecond), r.Served, r.Failures, r.Requests, r.Replayed)
	rep.Restart = &r
	return nil
}

// replicaCounts replays w through each count of router replicas, through
// one replica references times, and through every other count as many
// times when the one-replica runs' p90s spread past RepeatSpread.
func (c *Config) replicaCounts(ctx context.Context, rep *Report, spec WorkloadSpec, w workload.Workload, references int) error {
	repeat := 1
	for _, n := range c.Replicas.Counts {
		runs := repeat
		if n == 1 {
			runs = references
		}
		var p90s []float64
		for i := range runs {
			r, err := c.runReplicas(ctx, spec, w, n, c.router)
			if err != nil {
				return fmt.Errorf("%s × %d router replicas: %w", spec.Name, n, err)
			}
			r.Repeat = i
			label := ""
			if i > 0 {
				label = fmt.Sprintf(" (run %d)", i+1)
			}
			c.logReplicas(label, r)
			rep.Replicas = append(rep.Replicas, r)
			p90s = append(p90s, r.Summary.EngineTTFT.P90)
			if n == 1 {
				if err := c.eppRound(ctx, rep, spec, w, i); err != nil {
					return err
				}
			}
		}
		if n == 1 && runs > 1 && spread(p90s) > c.Replicas.RepeatSpread {
			repeat = runs
			c.log("  one-replica p90s %.0f %% apart: every count runs %d times", 100*spread(p90s), runs)
		}
		// The baseline with two replicas, the default router Deployment
		// (its one-replica figures are its PREFIX_AWARE run).
		if b := c.baseline; b != nil && n == 2 {
			r, err := c.runReplicas(ctx, spec, w, n, *b)
			if err != nil {
				return fmt.Errorf("%s × %d router replicas at %s: %w", spec.Name, n, b.revision, err)
			}
			c.logReplicas(" @"+b.revision, r)
			rep.BeforeReplicas = append(rep.BeforeReplicas, r)
		}
	}
	return nil
}

func (c *Config) logReplicas(label string, r ReplicaRun) {
	c.log("  PREFIX_AWARE × %d replicas%s  hit %5.1f%%  engine ttft p50 %.3fs p90 %.3fs  max in flight %d  spills %.1f%%  failures %d  router cpu %s/request  (%s)",
		r.Replicas, label, 100*r.HitRate, r.Summary.EngineTTFT.P50, r.Summary.EngineTTFT.P90, r.MaxInFlight, 100*r.SpillRate, r.Summary.Failures, micros(r.CPUPerRequest()), r.Wall.Round(time.Second))
}

// measureHotPrefix runs the threshold workload with each count of replicas.
func (c *Config) measureHotPrefix(ctx context.Context, rep *Report) error {
	spec := c.Replicas.HotPrefix
	w, err := buildExtra(rep, spec)
	if spec == nil || err != nil {
		return err
	}
	c.log("%s: %d requests, threshold across router replicas", spec.Name, len(w.Requests))
	// Only the counts above one have targets here.
	if err := c.replicaCounts(ctx, rep, *spec, w, 1); err != nil {
		return err
	}
	return c.measureEPP(ctx, rep, *spec, w)
}

// buildExtra generates the workload of a measurement beside the strategy
// runs (nil: none) and records its facts for the report.
func buildExtra(rep *Report, spec *WorkloadSpec) (workload.Workload, error) {
	if spec == nil {
		return workload.Workload{}, nil
	}
	w, err := spec.Build()
	if err != nil {
		return w, fmt.Errorf("workload %s: %w", spec.Name, err)
	}
	rep.Workload[spec.Name] = describe(*spec, w)
	return w, nil
}

// runReplicas replays w through n router replicas behind a spreader.
func (c *Config) runReplicas(ctx context.Context, spec WorkloadSpec, w workload.Workload, n int, bin routerBinary) (ReplicaRun, error) {
	f, err := c.startReplicaFleet(ctx, filepath.Join(c.WorkDir, spec.Name, fmt.Sprintf("replicas-%d%s", n, bin.suffix())), n, spec.TimeScale, bin)
	if err != nil {
		return ReplicaRun{}, err
	}
	defer f.stop()
	sp := f.spreader(c.Seed)
	defer sp.base.CloseIdleConnections()
	before := workload.FleetStatsOf(f.sims...)
	results, err := workload.Run(ctx, spreaderURL, w.Requests, workload.Options{
		TimeScale: spec.TimeScale, Streaming: true, Model: c.Model, Client: &http.Client{Transport: sp},
	})
	if err != nil {
		return ReplicaRun{}, err
	}
	res, err := c.result(ctx, spec, policy.PrefixAware, f.sims, before, results, time.Since(sp.start), f.metricsURLs()...)
	if err != nil {
		return ReplicaRun{}, err
	}
	var pids []int
	for _, x := range f.replicas {
		pids = append(pids, x.proc.Pid())
	}
	if res.RouterCPU, err = routerCPU(pids...); err != nil {
		return ReplicaRun{}, err
	}
	r := ReplicaRun{RunResult: res, Replicas: n}
	r.MaxInFlight, r.MaxInstance = maxInFlight(f.sims)
	return r, nil
}

// maxInFlight is the simulators' highest high-water mark of requests
// running or waiting, and the instance that had it.
func maxInFlight(sims []*vllmsim.Server) (int, string) {
	most, on := 0, ""
	for i, s := range sims {
		if m := s.Stats().MaxInFlight; m > most {
			most, on = m, instanceID(i)
		}
	}
	return most, on
}

// runRestart replays w through RestartReplicas replicas and restarts the
// last one at RestartAt of the replay: taken out of the spreader (as an
// endpoint leaves a Service), SIGTERM, then started again on the same
// addresses, back in the spreader once ready.
func (c *Config) runRestart(ctx context.Context, spec WorkloadSpec, w workload.Workload) (RestartResult, error) {
	n := c.Replicas.RestartReplicas
	f, err := c.startReplicaFleet(ctx, filepath.Join(c.WorkDir, spec.Name, "restart"), n, spec.TimeScale, c.router)
	if err != nil {
		return RestartResult{}, err
	}
	defer f.stop()
	sp := f.spreader(c.Seed)
	defer sp.base.CloseIdleConnections()
	victim := len(f.replicas) - 1
	out := RestartResult{Workload: spec.Name, Replicas: n, Restarted: f.replicas[victim].name}

	type replay struct {
		results []workload.Result
		err     error
	}
	done := make(chan replay, 1)
	go func() {
		results, err := workload.Run(ctx, spreaderURL, w.Requests, workload.Options{
			TimeScale: spec.TimeScale, Streaming: true, Model: c.Model, Client: &http.Client{Transport: sp},
		})
		done <- replay{results, err}
	}()
	at := time.Duration(c.Replicas.RestartAt * float64(w.Duration()) * spec.TimeScale)
	select {
	case <-time.After(time.Until(sp.start.Add(at))):
	case <-ctx.Done():
		return out, ctx.Err()
	}
	out.StoppedAt = time.Since(sp.start)
	restartErr := f.restart(ctx, victim)
	served := func() int { return int(f.replicas[victim].served.Load()) }
	readyAt := time.Since(sp.start)
	out.Down = readyAt - out.StoppedAt
	r := <-done
	if restartErr != nil {
		return out, restartErr
	}
	if r.err != nil {
		return out, r.err
	}
	results := r.results
	// On a loaded machine the replica can be ready only after the replay
	// ended (a restart takes 0.3–2 s here, over 5 s under CI's load), and
	// then nothing measures it. The requests from the restart point on are
	// then sent again, on their own schedule from now: traffic that goes
	// on after the restart, as it would in a cluster.
	if served() < minRestartTail {
		tail := rebased(w.Requests, time.Duration(c.Replicas.RestartAt*float64(w.Duration())))
		more, err := workload.Run(ctx, spreaderURL, tail, workload.Options{
			TimeScale: spec.TimeScale, Streaming: true, Model: c.Model, Client: &http.Client{Transport: sp},
		})
		if err != nil {
			return out, err
		}
		out.Replayed = len(tail)
		results = append(results, more...)
	}
	out.Requests = len(results)
	for _, x := range results {
		if !x.OK() {
			out.Failures++
		}
	}
	out.Served = served()
	return out, nil
}

// minRestartTail is the fewest requests the restarted replica must take
// after it is ready, below which the restart run sends the replay's tail
// again: it takes one request in RestartReplicas (3) at random, so 5 is
// some 15 requests of traffic through the fleet after its restart, not
// one that slipped in at the replay's end.
const minRestartTail = 5

// rebased returns the requests due at or after from, due that much
// earlier, so that a replay of them starts at once.
func rebased(reqs []workload.Request, from time.Duration) []workload.Request {
	var out []workload.Request
	for _, r := range reqs {
		if r.Arrival >= from {
			r.Arrival -= from
			out = append(out, r)
		}
	}
	return out
}

// replicaFleet is cold simulators behind n router replicas.
type replicaFleet struct {
	sims     []*vllmsim.Server
	replicas []*replica
	dir, bin string
}

// replica is one router process and the addresses it keeps across
// restarts.
type replica struct {
	name              string
	addr, metricsAddr string
	args              []string
	proc              *process.Process
	live              atomic.Bool
	// served counts the requests the spreader sent it since it was last
	// made live.
	served atomic.Int64
	starts int
}

func (r *replica) metricsURL() string { return "http://" + r.metricsAddr }

func (c *Config) startReplicaFleet(ctx context.Context, dir string, n int, timeScale float64, bin routerBinary) (*replicaFleet, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	sims, err := c.startSims(c.Instances, timeScale)
	if err != nil {
		return nil, err
	}
	f := &replicaFleet{sims: sims, dir: dir, bin: bin.path}
	ok := false
	defer func() {
		if !ok {
			f.stop()
		}
	}()
	doc, err := c.routingDocument(sims)
	if err != nil {
		return nil, err
	}
	docPath := filepath.Join(dir, "routing.json")
	if err := os.WriteFile(docPath, doc, 0o644); err != nil {
		return nil, fmt.Errorf("write routing document: %w", err)
	}
	// Every replica must be told the picker's address before any starts,
	// so the addresses are chosen first: each replica's traffic and
	// metrics addresses, then the pick API's.
	addrs, err := freeport.Loopback(2*n + 1)
	if err != nil {
		return nil, err
	}
	saltArgs, err := saltKeyArgs(dir)
	if err != nil {
		return nil, err
	}
	for i := range n {
		f.replicas = append(f.replicas, &replica{name: fmt.Sprintf("router-%d", i), addr: addrs[2*i], metricsAddr: addrs[2*i+1]})
	}
	pickArgs, err := pickerArgs(dir, addrs[2*n])
	if err != nil {
		return nil, err
	}
	for _, r := range f.replicas {
		r.args = append([]string{
			"--config-file", docPath,
			"--listen", r.addr,
			"--metrics-listen", r.metricsAddr,
			"--strategy-override", string(policy.PrefixAware),
			"--shutdown-timeout", "5s",
			// The spreader stops sending to a replica before stopping it,
			// as endpoints do once a pod is terminating.
			"--drain-delay", "0s",
			"--allow-loopback-backends", // the simulators listen on loopback
		}, saltArgs...)
		r.args = append(r.args, pickArgs(r.name)...)
		if err := f.startReplica(r); err != nil {
			return nil, err
		}
	}
	for _, r := range f.replicas {
		if err := f.waitReplica(ctx, r); err != nil {
			return nil, err
		}
	}
	ok = true
	return f, nil
}

func (f *replicaFleet) startReplica(r *replica) error {
	name := r.name
	if r.starts > 0 {
		name = fmt.Sprintf("%s-start%d", r.name, r.starts+1)
	}
	r.starts++
	p, err := process.Start(name, f.bin, r.args, f.dir)
	if err != nil {
		return err
	}
	r.proc = p
	return nil
}

// waitReplica waits for r to be ready and puts it in the spreader.
func (f *replicaFleet) waitReplica(ctx context.Context, r *replica) error {
	if err := waitReady(ctx, r.metricsURL()+"/readyz"); err != nil {
		if exited, perr := r.proc.Exited(); exited {
			log, _ := os.ReadFile(filepath.Join(f.dir, r.proc.Name()+".log"))
			return fmt.Errorf("%s exited (%w): %s", r.name, perr, log)
		}
		return fmt.Errorf("%s: %w", r.name, err)
	}
	r.served.Store(0)
	r.live.Store(true)
	return nil
}

// spreaderDrain is how long a replica taken out of the spreader keeps
// running before it is stopped: long enough for a request the spreader
// picked it for just before to connect, which on loopback takes
// microseconds and on the shared 2 cores at most the tens of milliseconds
// a goroutine waits to be scheduled, with ten times that to spare; short
// beside the router's own --drain-delay (5 s), so the restart stays
// quick.
const spreaderDrain = 500 * time.Millisecond

// restart takes replica i out of the spreader, stops it, and starts it
// again on the same addresses.
func (f *replicaFleet) restart(ctx context.Context, i int) error {
	r := f.replicas[i]
	r.live.Store(false)
	// A request the spreader routed to r just before may not have
	// connected yet. In a cluster the router's --drain-delay keeps a
	// terminating pod's listener open while endpoints catch up; the
	// replicas here run with --drain-delay 0s, so the spreader gives those
	// requests spreaderDrain before the SIGTERM.
	time.Sleep(spreaderDrain)
	if err := r.proc.Stop(10 * time.Second); err != nil {
		return fmt.Errorf("stop %s: %w", r.name, err)
	}
	if err := f.startReplica(r); err != nil {
		return err
	}
	return f.waitReplica(ctx, r)
}

func (f *replicaFleet) metricsURLs() []string {
	out := make([]string, len(f.replicas))
	for i, r := range f.replicas {
		out[i] = r.metricsURL()
	}
	return out
}

func (f *replicaFleet) stop() {
	var wg sync.WaitGroup
	for _, r := range f.replicas {
		if r.proc != nil {
			wg.Go(func() { _ = r.proc.Stop(10 * time.Second) })
		}
	}
	wg.Wait()
	closeSims(f.sims)
}

// spreaderURL is the base URL the driver sends to; the spreader replaces
// its host by a replica's.
const spreaderURL = "http://router-replicas"

// spreader is the client side of a Service in front of router replicas: a
// RoundTripper that sends each request to a live replica picked at random.
type spreader struct {
	base     *http.Transport
	replicas []*replica
	start    time.Time

	mu  sync.Mutex
	rng *rand.Rand
}

func (f *replicaFleet) spreader(seed uint64) *spreader {
	return &spreader{
		base:     workload.NewClient().Transport.(*http.Transport),
		replicas: f.replicas, start: time.Now(),
		rng: rand.New(rand.NewPCG(seed, uint64(len(f.replicas)))),
	}
}

func (s *spreader) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	var live []*replica
	for _, r := range s.replicas {
		if r.live.Load() {
			live = append(live, r)
		}
	}
	var to *replica
	if len(live) > 0 {
		to = live[s.rng.IntN(len(live))]
	}
	s.mu.Unlock()
	if to == nil {
		return nil, errors.New("spreader: no router replica is live")
	}
	to.served.Add(1)
	out := req.Clone(req.Context())
	out.URL.Host, out.Host = to.addr, to.addr
	return s.base.RoundTrip(out)
}

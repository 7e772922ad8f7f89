package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
// router binary run as R replicas that exchange load reports (--peers),
// behind a spreader that sends each request to a replica picked at random,
// as a Service does.
type ReplicaConfig struct {
	// Counts are the replica counts run for each workload [1 2 3].
	Counts []int
	// Workloads names the workloads run with replicas; empty runs all.
	Workloads []string
	// SampleEvery: every n-th request is first sent to every replica's
	// /debug/route, to count how often the replicas agree [4].
	SampleEvery int
	// HotPrefix is the workload of the threshold measurement (the most
	// requests in flight on one instance), run with each of Counts; nil
	// skips it.
	HotPrefix *WorkloadSpec
	// Restart names the workload replayed while one of RestartReplicas
	// [3] replicas restarts ("" skips it), stopped at RestartAt [0.3] of
	// the workload's span; every RestartSampleEvery-th [2] request is
	// peeked, for agreement over time after the restart.
	Restart            string
	RestartReplicas    int
	RestartAt          float64
	RestartSampleEvery int
	// PeerInterval is the report interval between replicas to model, in
	// simulated time [100ms, the router's default]: the replicas pull every
	// PeerInterval × time scale of wall time (at least MinPeerInterval),
	// so that reports are as old, in the simulators' time, as they would
	// be in a real fleet. Left at the router's default, a run at time
	// scale 0.15 would see reports 6.7 times staler than production does.
	// Negative leaves the router's default wall interval.
	PeerInterval time.Duration
	// ReferenceRuns is how many times each workload runs through one
	// replica [1]. The replica rows are compared with the median of these
	// runs: one run's p90 can be far off (mixed-length's, where the 90th
	// percentile falls between the short chats and the long documents,
	// ranged 118–278 ms over runs of the same code).
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

// MinPeerInterval bounds how often replicas pull each other's reports in
// a time-scaled run, so that the exchange does not crowd out the
// simulators on a small machine.
const MinPeerInterval = 10 * time.Millisecond

// peerInterval is the wall report interval for a run at timeScale, or 0
// to leave the router's default.
func (r *ReplicaConfig) peerInterval(timeScale float64) time.Duration {
	if r.PeerInterval < 0 {
		return 0
	}
	return max(time.Duration(float64(r.PeerInterval)*timeScale), MinPeerInterval)
}

func (r *ReplicaConfig) defaults() {
	if r.Counts == nil {
		r.Counts = []int{1, 2, 3}
	}
	r.SampleEvery = cmp.Or(r.SampleEvery, 4)
	r.RestartReplicas = cmp.Or(r.RestartReplicas, 3)
	r.RestartAt = cmp.Or(r.RestartAt, 0.3)
	r.RestartSampleEvery = cmp.Or(r.RestartSampleEvery, 2)
	r.PeerInterval = cmp.Or(r.PeerInterval, 100*time.Millisecond)
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
	// Samples requests were first peeked on every replica (none with one
	// replica); Agreed got the same instance from all of them, PlacedAgreed
	// the same placement before the overload guard (the rest of the
	// disagreement is spills); PeekErrors could not be peeked on some
	// replica and are left out of all.
	Samples, Agreed, PlacedAgreed, PeekErrors int
	// Self is the control: one replica asked twice at once per sample.
	Self AgreementWindow
	// MaxInFlight is the most requests ever running or waiting on one
	// instance (the simulators' high-water mark of vLLM's
	// num_requests_running + num_requests_waiting), on MaxInstance.
	MaxInFlight int
	MaxInstance string
}

// Agreement is the fraction of samples on which the replicas agreed.
func (r ReplicaRun) Agreement() float64 { return fraction(r.Agreed, r.Samples) }

// PlacementAgreement is the fraction of samples on which the replicas
// placed the key alike, spills aside.
func (r ReplicaRun) PlacementAgreement() float64 { return fraction(r.PlacedAgreed, r.Samples) }

func fraction(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

// AgreementWindow counts peeked requests in a span of wall time.
type AgreementWindow struct {
	From, To                              time.Duration
	Samples, Agreed, PlacedAgreed, Errors int
}

// Rate is the fraction of the window's samples that agreed.
func (a AgreementWindow) Rate() float64 { return fraction(a.Agreed, a.Samples) }

// RestartResult is one replica restarted while a workload runs.
type RestartResult struct {
	Workload  string
	Replicas  int
	Restarted string
	// StoppedAt is when the replica was taken out of the spreader (sent
	// SIGTERM spreaderDrain later), from the start of the replay (wall
	// time); Down how long until its new process was ready.
	StoppedAt, Down time.Duration
	// Before is the agreement of all replicas before the restart. After
	// the restart a sample counts for the restarted replica when it and at
	// least one other answered, and agrees when its answer is every other
	// replica's: First10s over the first 10 s after it was ready (wall),
	// Windows per second of them, Rest after them.
	Before, First10s, Rest AgreementWindow
	Windows                []AgreementWindow
	Requests, Failures     int
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
	c.log("  restart of %s of %d: down %s; before %d/%d agree; first 10 s after %d/%d; after that %d/%d; failures %d; tail sent again %d",
		r.Restarted, r.Replicas, r.Down.Round(time.Millisecond), r.Before.Agreed, r.Before.Samples, r.First10s.Agreed, r.First10s.Samples, r.Rest.Agreed, r.Rest.Samples, r.Failures, r.Replayed)
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
	c.log("  PREFIX_AWARE × %d replicas%s  hit %5.1f%%  engine ttft p50 %.3fs p90 %.3fs  agree %d/%d (placed %d, %d peek errors, self %d/%d)  max in flight %d  spills %.1f%%  failures %d  router cpu %s/request  (%s)",
		r.Replicas, label, 100*r.HitRate, r.Summary.EngineTTFT.P50, r.Summary.EngineTTFT.P90, r.Agreed, r.Samples, r.PlacedAgreed, r.PeekErrors, r.Self.Agreed, r.Self.Samples, r.MaxInFlight, 100*r.SpillRate, r.Summary.Failures, micros(r.CPUPerRequest()), r.Wall.Round(time.Second))
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
	every := c.Replicas.SampleEvery
	if !bin.peers {
		every = 0 // no /debug/route to ask
	}
	sp := f.spreader(c.Seed, every)
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
	all := sp.agreement(0, time.Duration(1<<62), -1)
	r.Samples, r.Agreed, r.PlacedAgreed, r.PeekErrors = all.Samples, all.Agreed, all.PlacedAgreed, all.Errors
	r.Self = sp.selfAgreement()
	for i, s := range f.sims {
		if m := s.Stats().MaxInFlight; m > r.MaxInFlight {
			r.MaxInFlight, r.MaxInstance = m, instanceID(i)
		}
	}
	return r, nil
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
	sp := f.spreader(c.Seed, c.Replicas.RestartSampleEvery)
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
	if sp.agreement(readyAt, time.Duration(1<<62), victim).Samples < minRestartTail {
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
	out.Before = sp.agreement(0, out.StoppedAt, -1)
	out.First10s = sp.agreement(readyAt, readyAt+10*time.Second, victim)
	out.Rest = sp.agreement(readyAt+10*time.Second, time.Duration(1<<62), victim)
	for s := range 10 {
		from := readyAt + time.Duration(s)*time.Second
		out.Windows = append(out.Windows, sp.agreement(from, from+time.Second, victim))
	}
	return out, nil
}

// minRestartTail is the fewest samples after the restarted replica is
// ready below which the restart run sends the replay's tail again.
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
// restarts (its peers find it there).
type replica struct {
	name              string
	addr, metricsAddr string
	args              []string
	proc              *process.Process
	live              atomic.Bool
	starts            int
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
	// Every replica must be told every peer's address before any starts,
	// so the addresses are chosen first.
	addrs, err := freeport.Loopback(3 * n)
	if err != nil {
		return nil, err
	}
	saltArgs, err := bin.saltKeyArgs(dir)
	if err != nil {
		return nil, err
	}
	var peerList []string
	for i := range n {
		f.replicas = append(f.replicas, &replica{name: fmt.Sprintf("router-%d", i), addr: addrs[3*i], metricsAddr: addrs[3*i+1]})
		peerList = append(peerList, addrs[3*i+1])
	}
	pickArgs, err := bin.pickerArgs(dir, addrs[2])
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
		}, append(bin.loopbackArgs(), saltArgs...)...)
		if bin.peers {
			r.args = append(r.args, "--peers", strings.Join(peerList, ","), "--replica-name", r.name, "--enable-debug-route")
			if d := c.Replicas.peerInterval(timeScale); d > 0 {
				r.args = append(r.args, "--peer-interval", d.String())
			}
		}
		if bin.forward {
			r.args = append(r.args, "--advertise-address", r.addr)
		}
		if bin.picker {
			r.args = append(r.args, pickArgs(r.name)...)
		}
		if err := f.startReplica(r); err != nil {
			return nil, err
		}
	}
	// The replicas start together, so none finds a peer snapshot and each
	// waits out --peer-bootstrap-wait before it is ready.
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
			return fmt.Errorf("%s exited (%v): %s", r.name, perr, log)
		}
		return fmt.Errorf("%s: %w", r.name, err)
	}
	r.live.Store(true)
	return nil
}

// spreaderDrain is how long a replica taken out of the spreader keeps
// running before it is stopped.
const spreaderDrain = 500 * time.Millisecond

// restart takes replica i out of the spreader, stops it, and starts it
// again on the same addresses.
func (f *replicaFleet) restart(ctx context.Context, i int) error {
	r := f.replicas[i]
	r.live.Store(false)
	// A request the spreader routed to r just before (a sampled one peeks
	// at every replica first) may not have connected yet. In a cluster
	// the router's --drain-delay keeps a terminating pod's listener open
	// while endpoints catch up; the replicas here run with --drain-delay
	// 0s, so the spreader gives those requests the same time before the
	// SIGTERM.
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
// Every every-th request is first sent to every live replica's
// /debug/route (and once more to the first, as a control), before it is
// routed anywhere, so that all of them answer for the same moment of the
// same request stream.
type spreader struct {
	base     *http.Transport
	peek     *http.Client
	replicas []*replica
	every    int
	start    time.Time

	mu      sync.Mutex
	rng     *rand.Rand
	n       int
	samples []peekSample
}

// peekSample is one request peeked on the replicas: answers[i] is replica
// i's instance, "" when it was not live or errs counts it, and placed[i]
// where it placed the key before the overload guard. again is the
// first live replica's answer to the same body asked a second time at
// once: the control, since a replica can disagree with itself where the
// policy breaks ties at random or its load moves between two calls.
type peekSample struct {
	at      time.Duration
	answers []string
	// routed is where a request reaching each replica goes (answers
	// through owners, see throughOwners): what agreement compares.
	routed []string
	placed []string
	again  string
	errs   int
}

func (f *replicaFleet) spreader(seed uint64, every int) *spreader {
	base := workload.NewClient().Transport.(*http.Transport)
	return &spreader{
		base: base, peek: &http.Client{Transport: base, Timeout: 10 * time.Second},
		replicas: f.replicas, every: every, start: time.Now(),
		rng: rand.New(rand.NewPCG(seed, uint64(len(f.replicas)))),
	}
}

func (s *spreader) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	s.n++
	sampled := s.every > 0 && s.n%s.every == 0
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
	if sampled && req.GetBody != nil {
		if body, err := req.GetBody(); err == nil {
			b, err := io.ReadAll(body)
			_ = body.Close()
			if err == nil {
				s.sample(req.Context(), req.URL.Path, b)
			}
		}
	}
	out := req.Clone(req.Context())
	out.URL.Host, out.Host = to.addr, to.addr
	return s.base.RoundTrip(out)
}

// sample asks every live replica, at once, where body would go.
func (s *spreader) sample(ctx context.Context, path string, body []byte) {
	at := time.Since(s.start)
	ps := peekSample{at: at, answers: make([]string, len(s.replicas)), placed: make([]string, len(s.replicas))}
	owners := make([]string, len(s.replicas))
	var mu sync.Mutex
	var wg sync.WaitGroup
	ask := func(r *replica, answer, placed, owner *string) {
		wg.Go(func() {
			d, err := debugRoute(ctx, s.peek, r.metricsURL(), path, body)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				ps.errs++
				return
			}
			*answer = d.Instance
			if placed != nil {
				*placed, *owner = d.Placed, d.Owner
			}
		})
	}
	control := false
	for i, r := range s.replicas {
		if !r.live.Load() {
			continue
		}
		ask(r, &ps.answers[i], &ps.placed[i], &owners[i])
		if !control {
			ask(r, &ps.again, nil, nil)
			control = true
		}
	}
	wg.Wait()
	ps.routed = s.throughOwners(ps.answers, owners)
	s.mu.Lock()
	s.samples = append(s.samples, ps)
	s.mu.Unlock()
}

// throughOwners turns each replica's answer into where a request reaching
// it goes: a replica that names another as the owner of the instance it
// placed the request on forwards it, and the owner's answer is where it
// goes (when the owner did not answer, the replica would decide itself).
func (s *spreader) throughOwners(answers, owners []string) []string {
	out := slices.Clone(answers)
	for i, o := range owners {
		if o == "" || answers[i] == "" {
			continue
		}
		for j, r := range s.replicas {
			if r.name == o && answers[j] != "" {
				out[i] = answers[j]
			}
		}
	}
	return out
}

// agreement counts the samples taken in [from, to). With focus < 0 a
// sample counts when at least two replicas answered and agrees when all
// answers are the same; otherwise it counts when replica focus and another
// answered, and agrees when focus's answer is every other's.
func (s *spreader) agreement(from, to time.Duration, focus int) AgreementWindow {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := AgreementWindow{From: from, To: to}
	for _, x := range s.samples {
		if x.at < from || x.at >= to {
			continue
		}
		if x.errs > 0 {
			w.Errors++
			continue
		}
		if focus >= 0 && x.routed[focus] == "" {
			continue
		}
		answered, same := allSame(x.routed, focus)
		if answered < 2 {
			continue
		}
		w.Samples++
		if same {
			w.Agreed++
		}
		if _, same := allSame(x.placed, focus); same {
			w.PlacedAgreed++
		}
	}
	return w
}

// allSame counts the non-empty answers and reports whether they are all
// the same (with focus ≥ 0, all the same as answers[focus]).
func allSame(answers []string, focus int) (int, bool) {
	ref, answered, same := "", 0, true
	if focus >= 0 {
		ref = answers[focus]
	}
	for _, a := range answers {
		if a == "" {
			continue
		}
		answered++
		if ref == "" {
			ref = a
		}
		same = same && a == ref
	}
	return answered, same
}

// selfAgreement counts the samples on which the first live replica gave
// the same answer twice.
func (s *spreader) selfAgreement() AgreementWindow {
	s.mu.Lock()
	defer s.mu.Unlock()
	var w AgreementWindow
	for _, x := range s.samples {
		first := ""
		for _, a := range x.answers {
			if a != "" {
				first = a
				break
			}
		}
		if x.errs > 0 || first == "" || x.again == "" {
			continue
		}
		w.Samples++
		if first == x.again {
			w.Agreed++
		}
	}
	return w
}

// peeked is a peer-protocol router's answer on /debug/route (a baseline
// from before the picker).
type peeked struct {
	Instance string `json:"instance"`
	Placed   string `json:"placed"`
	Spill    string `json:"spill,omitempty"`
	Owner    string `json:"owner,omitempty"`
}

// debugRoute asks the router whose metrics listener is at base where body,
// sent to the traffic path, would go.
func debugRoute(ctx context.Context, client *http.Client, base, path string, body []byte) (peeked, error) {
	var out peeked
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/debug/route?endpoint="+url.QueryEscape(path), bytes.NewReader(body))
	if err != nil {
		return out, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return out, fmt.Errorf("debug route: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return out, fmt.Errorf("debug route: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return out, fmt.Errorf("debug route: status %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	if err := json.Unmarshal(b, &out); err != nil || out.Instance == "" {
		return out, fmt.Errorf("debug route: unexpected answer %q", b)
	}
	return out, nil
}

package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/router/policy"
	"github.com/warmroute/warmroute/test/gobuild"
	"github.com/warmroute/warmroute/test/process"
	"github.com/warmroute/warmroute/test/promscrape"
	"github.com/warmroute/warmroute/test/workload"
)

// From zero: requests arrive at a router whose routing document lists no
// instance. The router holds them (its default --hold-timeout, 10 min) and
// counts an activation; the harness, playing the operator, sees that on
// the router's /metrics, starts one simulator process with
// --model-load-delay (nothing listens while it loads, as with vLLM), and
// lists it in the routing document once it answers /health, as the
// operator lists a pod once it is Ready. Everything is wall-clock, as the
// load delay is: the simulator runs at time scale 1.
//
// What the operator does in a cluster and this leaves out: its scale
// patch, scheduling and the container start, the kubelet's startup and
// readiness probes (every 10 s and 5 s, where the harness polls every
// fromZeroPoll), and the routers reading the routing ConfigMap through the
// API instead of a file; test/e2e/scaletozero_test.go covers that side.

// NameFromZero names the from-zero measurement (-workloads).
const NameFromZero = "from-zero"

// FromZeroSpec configures the from-zero measurement.
type FromZeroSpec struct {
	// Workload is the requests that arrive at zero instances; their
	// arrival times are wall-clock (its TimeScale is 1).
	Workload WorkloadSpec
	// LoadDelay is the simulator's --model-load-delay.
	LoadDelay time.Duration
	// Runs is how many activations are measured, each with a fresh router
	// and simulator.
	Runs int
}

// FromZeroRun is one activation. Times are on the activation clock, which
// starts when the first request is sent.
type FromZeroRun struct {
	LoadDelay time.Duration
	// Noticed is when the harness saw the router's activation on /metrics
	// and started the simulator, Listening when it saw the simulator answer
	// /health, Published when it had written the routing document listing
	// it.
	Noticed, Listening, Published time.Duration
	// HeldPeak is the most requests the router's held-requests gauge showed
	// on the harness's polls.
	HeldPeak int
	// Requests are what each request saw, in arrival order.
	Requests []FromZeroRequest
}

// FromZeroRequest is what one request saw.
type FromZeroRequest struct {
	// Sent is on the activation clock; TTFT is from Sent to the first
	// streamed token; EngineTTFT is the simulator's own (queueing and
	// prefill).
	Sent, TTFT, EngineTTFT time.Duration
	// Err is why it failed ("" if it did not).
	Err string
}

// fromZeroPoll is how often the harness reads the router's /metrics and,
// once the simulator runs, its /health, until it publishes the instance.
// The operator sees demand through a watch on the Lease the router stamps,
// within milliseconds. The poll adds up to its interval to the notice and
// again to the readiness, and the whole interval in practice: the first
// request comes at the same point of the poll in every run, since both
// start together and the workload is seeded (at 50 ms every notice took
// 50-52 ms). 20 ms keeps each under a tenth of the few hundred
// milliseconds the activation may add to the load, for 50 small scrapes
// a second while nothing else runs.
const fromZeroPoll = 20 * time.Millisecond

// fromZeroSlack bounds a run beyond its load delay: every request must
// have its answer by then, or the run fails (the router alone would hold
// them for its 10 minutes).
const fromZeroSlack = time.Minute

// Metrics of the router the harness reads.
const (
	metricActivations = "warmroute_router_activations_requested_total"
	metricHeld        = "warmroute_router_held_requests"
)

// measureFromZero builds the simulator binary and measures the runs.
func (c *Config) measureFromZero(ctx context.Context, rep *Report) error {
	spec := c.FromZero
	if spec == nil {
		return nil
	}
	w, err := buildExtra(rep, &spec.Workload)
	if err != nil {
		return err
	}
	sim := filepath.Join(c.WorkDir, "vllmsim")
	if err := gobuild.Build(ctx, "./test/vllmsim/cmd/vllmsim", sim); err != nil {
		return err
	}
	c.log("%s: %d requests at zero instances, model load %s, %d runs", NameFromZero, len(w.Requests), spec.LoadDelay, spec.Runs)
	for i := range spec.Runs {
		r, err := c.runFromZero(ctx, *spec, w, sim, filepath.Join(c.WorkDir, NameFromZero, fmt.Sprintf("run-%d", i)))
		if err != nil {
			return fmt.Errorf("%s, run %d: %w", NameFromZero, i+1, err)
		}
		first := r.Requests[0]
		c.log("  run %d: first ttft %s (load + %s; noticed %s, listening %s, published %s, engine %s); past the load p90 %s; held at peak %d; failures %d",
			i+1, ms(first.TTFT), ms(first.TTFT-r.LoadDelay), ms(r.Noticed), ms(r.Listening), ms(r.Published), ms(first.EngineTTFT),
			ms(quantile(r.pastLoad(), 0.9)), r.HeldPeak, r.failures())
		rep.FromZero = append(rep.FromZero, r)
	}
	return nil
}

// runFromZero sends w through a router at zero instances while the
// harness activates one.
func (c *Config) runFromZero(ctx context.Context, spec FromZeroSpec, w workload.Workload, sim, dir string) (FromZeroRun, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return FromZeroRun{}, err
	}
	f := &fleet{bin: c.router, members: []int{}}
	// Nothing is in flight when it stops: no drain to wait out.
	if err := f.startRouter(ctx, c, dir, policy.PrefixAware, "--drain-delay=0s"); err != nil {
		f.stop()
		return FromZeroRun{}, err
	}
	defer f.stop()
	client := workload.NewClient()
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, spec.LoadDelay+fromZeroSlack)
	defer cancel()

	op, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan activation, 1)
	errc := make(chan error, 1)
	go func() {
		a, err := c.activate(op, f, sim, dir, spec.LoadDelay)
		if err != nil {
			cancel() // the held requests would wait for nothing
		}
		done <- a
		errc <- err
	}()
	start := time.Now()
	results, err := workload.Run(ctx, f.routerURL, w.Requests, workload.Options{
		TimeScale: 1, Streaming: true, Model: c.Model, Client: client,
	})
	stop()
	a := <-done
	if opErr := <-errc; opErr != nil {
		return FromZeroRun{}, opErr
	}
	if err != nil {
		return FromZeroRun{}, err
	}
	if a.published.IsZero() {
		return FromZeroRun{}, fmt.Errorf("the run ended before the simulator answered /health (see %s)", dir)
	}
	// The activation clock starts at the first request's send.
	origin := start.Add(results[0].Sent)
	r := FromZeroRun{LoadDelay: spec.LoadDelay, HeldPeak: a.heldPeak,
		Noticed: a.noticed.Sub(origin), Listening: a.listening.Sub(origin), Published: a.published.Sub(origin)}
	for _, x := range results {
		q := FromZeroRequest{Sent: x.Sent - results[0].Sent, TTFT: x.TTFT, Err: x.Err,
			EngineTTFT: time.Duration(x.EngineTTFT * float64(time.Second))}
		r.Requests = append(r.Requests, q)
	}
	return r, nil
}

// activation is what the harness, playing the operator, saw and did.
type activation struct {
	noticed, listening, published time.Time
	heldPeak                      int
}

// activate polls the router's /metrics until it counts an activation,
// starts the simulator, and publishes it once it answers /health, reading
// the held-requests gauge on every poll; then, polling no more (the held
// requests only leave once it is published), it waits for ctx to end and
// stops the simulator.
func (c *Config) activate(ctx context.Context, f *fleet, sim, dir string, load time.Duration) (activation, error) {
	var a activation
	var p *process.Process
	defer func() {
		if p != nil {
			_ = p.Stop(5 * time.Second)
		}
	}()
	health := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(fromZeroPoll)
	defer tick.Stop()
	var simURL string
	for {
		select {
		case <-ctx.Done():
			return a, nil
		case <-tick.C:
		}
		fams, err := promscrape.Families(ctx, http.DefaultClient, f.metricsURL+"/metrics")
		if ctx.Err() != nil {
			return a, nil
		}
		if err != nil {
			return a, fmt.Errorf("read the router's metrics: %w", err)
		}
		a.heldPeak = max(a.heldPeak, int(promscrape.Sum(fams[metricHeld], nil)))
		switch {
		case p == nil:
			if promscrape.Sum(fams[metricActivations], nil) == 0 {
				continue
			}
			a.noticed = time.Now()
			p, err = process.Start("vllmsim", sim, c.fromZeroSimArgs(load), dir)
			if err != nil {
				return a, err
			}
		case a.published.IsZero():
			logPath := filepath.Join(dir, "vllmsim.log")
			if exited, err := p.Exited(); exited {
				log, _ := os.ReadFile(logPath)
				return a, fmt.Errorf("the simulator exited (%w): %s", err, log)
			}
			if simURL == "" {
				simURL = servingURL(logPath)
			}
			if simURL == "" || !answers(ctx, health, simURL+"/health") {
				continue
			}
			a.listening = time.Now()
			doc, err := c.documentOf([]routingv1alpha1.Instance{{ID: instanceID(0), Address: strings.TrimPrefix(simURL, "http://")}}, 2)
			if err == nil {
				err = replaceFile(filepath.Join(dir, "routing.json"), doc)
			}
			if err != nil {
				return a, fmt.Errorf("publish the instance: %w", err)
			}
			a.published = time.Now()
			<-ctx.Done()
			return a, nil
		}
	}
}

// fromZeroSimArgs is the simulator's command line: instance 0 of the
// benchmark's fleet, at time scale 1, loading its model for load.
func (c *Config) fromZeroSimArgs(load time.Duration) []string {
	return []string{
		"--listen", "127.0.0.1:0",
		"--model", c.Model,
		"--instance-id", instanceID(0),
		"--cache-tokens", fmt.Sprint(c.CacheTokens),
		"--max-model-len", fmt.Sprint(c.MaxModelLen),
		"--model-load-delay", load.String(),
	}
}

// servingLine is how the simulator announces its address once it listens.
var servingLine = regexp.MustCompile(`vllmsim: serving \S+ on (http://\S+) as `)

// servingURL is the address the simulator's log has announced, or "".
func servingURL(logPath string) string {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return ""
	}
	if m := servingLine.FindSubmatch(b); m != nil {
		return string(m[1])
	}
	return ""
}

// answers reports whether GET url answers 200.
func answers(ctx context.Context, client *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// pastLoad is, per answered request, how long after the model load its
// first token came: its first token on the activation clock less the load
// delay. For the first request that is its TTFT less the load delay.
func (r FromZeroRun) pastLoad() []time.Duration {
	var out []time.Duration
	for _, q := range r.Requests {
		if q.Err == "" {
			out = append(out, q.Sent+q.TTFT-r.LoadDelay)
		}
	}
	return out
}

// afterPublish is, per answered request, the time from the later of its
// send and the instance's publication to its first token: the router's
// reload, the held queue's dispatch and the engine.
func (r FromZeroRun) afterPublish() []time.Duration {
	var out []time.Duration
	for _, q := range r.Requests {
		if q.Err == "" {
			out = append(out, q.Sent+q.TTFT-max(q.Sent, r.Published))
		}
	}
	return out
}

// atZero counts the requests sent before the instance was published.
func (r FromZeroRun) atZero() int {
	n := 0
	for _, q := range r.Requests {
		if q.Sent < r.Published {
			n++
		}
	}
	return n
}

func (r FromZeroRun) failures() int {
	n := 0
	for _, q := range r.Requests {
		if q.Err != "" {
			n++
		}
	}
	return n
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

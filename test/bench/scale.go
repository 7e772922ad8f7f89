package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/router/policy"
	"github.com/warmroute/warmroute/test/workload"
)

// Scale events: a fleet under steady load grows from scaleFrom to scaleTo
// instances at scaleOutAt and shrinks back at scaleInAt (simulated seconds
// from the start), as the operator would rewrite the routing document
// (terminating instances drain in it for drainSeconds, then leave it). The
// windows of
// scaleWindow seconds before the scale-out and after each event show what
// users feel. The two instances the scale-in removes are chosen as the
// ReplicaSet would by pod-deletion-cost, once by age (the youngest: the
// two that joined) and once by cache (the two whose caches served the
// fewest hit tokens, with the operator's rule: hits counted every
// heatSample seconds, fading by half in heatHalfLife), so that the two
// runs compare the choices on the same traffic. A third run, by age,
// turns warming off (the router's --warm=false): its windows after the
// scale-out and after the scale-in against the others' are what warming
// joiners and leavers buys.
// NameScaleEvents names the scale-event workload (-workloads).
const NameScaleEvents = "scale-events"

const (
	scaleFrom, scaleTo    = 4, 6
	scaleOutAt, scaleInAt = 120.0, 210.0
	scaleWindow           = 60.0
	heatSample            = 10.0
	heatHalfLife          = 300.0
	removalByAge          = "age"
	removalByCache        = "cache"
	windowSteady          = "steady, before the scale-out"
	windowAfterOut        = "after the scale-out"
	windowAfterIn         = "after the scale-in"
	// drainSeconds is how long the operator keeps a terminating instance
	// in the routing document, draining (controllers/llmendpoint_drain.go).
	drainSeconds = v1alpha1.PreStopSleepSeconds - v1alpha1.DrainLeaveMarginSeconds
)

// ScaleEventRun is one run of the scale-event workload.
type ScaleEventRun struct {
	// Removal is how the scale-in chose (removalByAge, removalByCache);
	// Removed the instances it removed.
	Removal string
	Removed []string
	// Warm says the router warmed joiners and leavers (--warm, its
	// default).
	Warm    bool
	Windows []ScaleWindow
	// Failures counts failed requests over the whole run.
	Failures int
}

// ScaleWindow is what requests sent in one window saw.
type ScaleWindow struct {
	Name string
	// From is the window's start in simulated seconds.
	From             float64
	Requests         int
	HitRate, TTFTP90 float64
}

// measureScaleEvents runs the scale-event workload once per removal rule.
func (c *Config) measureScaleEvents(ctx context.Context, rep *Report) error {
	spec := c.ScaleEvents
	w, err := buildExtra(rep, spec)
	if spec == nil || err != nil {
		return err
	}
	c.log("%s: %d requests, %d → %d instances at %.0f s, back at %.0f s", spec.Name, len(w.Requests), scaleFrom, scaleTo, scaleOutAt, scaleInAt)
	for _, run := range []struct {
		removal string
		warm    bool
	}{{removalByAge, true}, {removalByCache, true}, {removalByAge, false}} {
		removal := run.removal
		r, err := c.runScaleEvent(ctx, *spec, w, removal, run.warm)
		if err != nil {
			return fmt.Errorf("%s, removal by %s, warming %v: %w", spec.Name, removal, run.warm, err)
		}
		for _, win := range r.Windows {
			c.log("  by %-5s warm %-5v %-30s %4d requests  hit %5.1f%%  engine ttft p90 %.3fs", removal, run.warm, win.Name, win.Requests, 100*win.HitRate, win.TTFTP90)
		}
		c.log("  by %-5s warm %-5v removed %v, failures %d", removal, run.warm, r.Removed, r.Failures)
		rep.ScaleEvents = append(rep.ScaleEvents, r)
	}
	return nil
}

// runScaleEvent replays w through one router while the fleet changes.
func (c *Config) runScaleEvent(ctx context.Context, spec WorkloadSpec, w workload.Workload, removal string, warm bool) (ScaleEventRun, error) {
	dir := filepath.Join(c.WorkDir, spec.Name, "scale-by-"+removal)
	var extra []string
	if !warm {
		dir += "-cold"
		extra = append(extra, "--warm=false")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return ScaleEventRun{}, err
	}
	sims, err := c.startSims(scaleTo, spec.TimeScale)
	if err != nil {
		return ScaleEventRun{}, err
	}
	f := &fleet{sims: sims, bin: c.router, members: indexes(scaleFrom)}
	if err := f.startRouter(ctx, c, dir, policy.PrefixAware, extra...); err != nil {
		f.stop()
		return ScaleEventRun{}, err
	}
	defer f.stop()
	client := workload.NewClient()
	defer client.CloseIdleConnections()

	events, stop := context.WithCancel(ctx)
	defer stop()
	start := time.Now()
	removed := make(chan []string, 1)
	errc := make(chan error, 1)
	go func() {
		r, err := c.scaleFleet(events, f, filepath.Join(dir, "routing.json"), start, spec.TimeScale, removal)
		removed <- r
		errc <- err
	}()
	results, err := workload.Run(ctx, f.routerURL, w.Requests, workload.Options{
		TimeScale: spec.TimeScale, Streaming: true, Model: c.Model, Client: client,
	})
	stop()
	run := ScaleEventRun{Removal: removal, Warm: warm, Removed: <-removed}
	if evErr := <-errc; evErr != nil && ctx.Err() == nil && events.Err() == nil {
		return run, evErr
	}
	if err != nil {
		return run, err
	}
	if len(run.Removed) == 0 {
		return run, fmt.Errorf("the run ended before the scale-in at %.0f s", scaleInAt)
	}
	ids := make([]string, scaleTo)
	for i := range ids {
		ids[i] = instanceID(i)
	}
	for _, r := range results {
		if !r.OK() {
			run.Failures++
		}
	}
	for _, win := range []ScaleWindow{{Name: windowSteady, From: scaleOutAt - scaleWindow}, {Name: windowAfterOut, From: scaleOutAt}, {Name: windowAfterIn, From: scaleInAt}} {
		var in []workload.Result
		for _, r := range results {
			if at := r.Sent.Seconds() / spec.TimeScale; at >= win.From && at < win.From+scaleWindow {
				in = append(in, r)
			}
		}
		s := workload.Summarize(in, ids, spec.TimeScale)
		win.Requests, win.HitRate, win.TTFTP90 = len(in), s.HeaderHitRate, s.EngineTTFT.P90
		run.Windows = append(run.Windows, win)
	}
	return run, nil
}

// scaleFleet rewrites the router's routing document at the scale-out, the
// scale-in and the end of the leaving instances' drain, and returns the
// instances the scale-in removed.
func (c *Config) scaleFleet(ctx context.Context, f *fleet, docPath string, start time.Time, timeScale float64, removal string) ([]string, error) {
	heat := make([]float64, len(f.sims))
	last := make([]int64, len(f.sims))
	wait := func(at float64) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(start.Add(time.Duration(at * timeScale * float64(time.Second))))):
			return nil
		}
	}
	for at := heatSample; at <= scaleInAt; at += heatSample {
		if err := wait(at); err != nil {
			return nil, err
		}
		for i, s := range f.sims {
			hits := s.Stats().PrefixCacheHits
			heat[i] = heat[i]*math.Exp2(-heatSample/heatHalfLife) + float64(hits-last[i])
			last[i] = hits
		}
		if at == scaleOutAt {
			if err := c.writeDocument(f, docPath, indexes(scaleTo), 2); err != nil {
				return nil, err
			}
		}
	}
	// The ReplicaSet removes the lowest deletion costs first, the
	// youngest among equals: by age, the ones that joined last.
	order := indexes(scaleTo)
	slices.Reverse(order)
	if removal == removalByCache {
		slices.SortStableFunc(order, func(a, b int) int { return cmpCost(heat[a], heat[b]) })
	}
	gone := order[:scaleTo-scaleFrom]
	var keep []int
	for _, i := range indexes(scaleTo) {
		if !slices.Contains(gone, i) {
			keep = append(keep, i)
		}
	}
	var removed []string
	for _, i := range gone {
		removed = append(removed, instanceID(i))
	}
	if err := c.writeDocument(f, docPath, indexes(scaleTo), 3, gone...); err != nil {
		return removed, err
	}
	if err := wait(scaleInAt + drainSeconds); err != nil {
		return removed, err
	}
	return removed, c.writeDocument(f, docPath, keep, 4)
}

// cmpCost orders heats as the operator's deletion costs do: by
// 1 + floor(log2(1 + hits)), equal within a doubling.
func cmpCost(a, b float64) int {
	ca, cb := math.Floor(math.Log2(1+a)), math.Floor(math.Log2(1+b))
	switch {
	case ca < cb:
		return -1
	case ca > cb:
		return 1
	}
	return 0
}

// writeDocument replaces the router's routing document, atomically as a
// ConfigMap volume update would.
func (c *Config) writeDocument(f *fleet, path string, members []int, gen int64, draining ...int) error {
	doc, err := c.routingDocumentOf(f.sims, members, gen, draining...)
	if err != nil {
		return err
	}
	return replaceFile(path, doc)
}

// replaceFile replaces path's content atomically, as a ConfigMap volume
// update would.
func replaceFile(path string, doc []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, doc, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func indexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

package custommetrics

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/internal/podspec"
)

// Labels and port names of the pods the operator renders
// (controllers/llmendpoint_router.go, llmendpoint_vllm.go); they are part
// of the pods' contract, so they are repeated here rather than imported
// from the controller's internals.
const (
	labelEndpoint  = "serving.warmroute.dev/endpoint"
	labelRole      = "serving.warmroute.dev/role"
	roleRouter     = "router"
	roleVLLM       = "vllm"
	routerPortName = "metrics"
	vllmPortName   = "http"
)

// Metric names read from the pods: the router's (sidecar/router/metrics)
// and vLLM's (test/vllmsim exports the same names).
const (
	routerInFlight          = "warmroute_router_in_flight_requests"
	routerPrefillTokens     = "warmroute_router_prefill_tokens_in_flight"
	routerFlowQueued        = "warmroute_router_flow_queued"
	routerFlowShed          = "warmroute_router_flow_shed_total"
	vllmRequestsWaiting     = "vllm:num_requests_waiting"
	vllmPrefixCacheQueries  = "vllm:prefix_cache_queries_total"
	vllmPrefixCacheHits     = "vllm:prefix_cache_hits_total"
	maxMetricsResponseBytes = 8 << 20
)

// Load is the latest picture of one endpoint's load.
type Load struct {
	// Time is when the scrape that produced it finished.
	Time time.Time
	// Instances is the endpoint's ready vLLM instances (status.readyReplicas),
	// the denominator of the per-instance figures.
	Instances int32
	// InFlight is the requests in flight from all router replicas to the
	// instances; Waiting is the requests queued inside vLLM (waiting for a
	// batch slot), summed over the instances.
	InFlight, Waiting float64
	// QueuedPromptTokens is the prompt tokens all router replicas estimate
	// the instances have yet to prefill for them (each router reports its
	// own requests only, so the sum counts each once).
	QueuedPromptTokens float64
	// InFlightKnown and WaitingKnown are false when every pod that has the
	// figure failed to answer (InFlightKnown covers QueuedPromptTokens and
	// Queued, read from the same routers).
	InFlightKnown, WaitingKnown bool
	// FlowControl is whether the endpoint had spec.router.flowControl when
	// it was scraped: without it the routers queue and shed nothing, and
	// the flow figures below are not shown.
	FlowControl bool
	// Queued is the requests waiting in the routers' flow-control queues,
	// over tenants and router pods (only the elected picker queues; the
	// other replicas export 0 or nothing, so the sum counts each once).
	Queued float64
	// ShedPerMinute is, by tenant, the requests flow control refused from
	// its queues per minute over shedWindow, over router pods and reasons;
	// ShedKnown is false until the routers were scraped twice.
	ShedPerMinute map[string]float64
	ShedKnown     bool
	// HitRatio is the share of prompt tokens served from vLLM's prefix
	// cache over the window; HitRatioKnown is false while no prompt tokens
	// were queried in it.
	HitRatio      float64
	HitRatioKnown bool
	// Scraped and Failed count the pods read and those that could not be.
	Scraped, Failed int
}

// perInstance divides by the ready instances; with none, the whole load
// stands for one instance, so that an HPA scales up from zero ready.
func (l Load) perInstance(v float64) float64 {
	if l.Instances <= 1 {
		return v
	}
	return v / float64(l.Instances)
}

// InFlightPerInstance is InFlight over the ready instances.
func (l Load) InFlightPerInstance() float64 { return l.perInstance(l.InFlight) }

// WaitingPerInstance is Waiting over the ready instances.
func (l Load) WaitingPerInstance() float64 { return l.perInstance(l.Waiting) }

// QueuedPromptTokensPerInstance is QueuedPromptTokens over the ready
// instances.
func (l Load) QueuedPromptTokensPerInstance() float64 { return l.perInstance(l.QueuedPromptTokens) }

// Store holds the latest Load and Heat of every endpoint; safe for
// concurrent use.
type Store struct {
	mu    sync.RWMutex
	loads map[types.NamespacedName]Load
	heats map[types.NamespacedName]Heat
}

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{loads: map[types.NamespacedName]Load{}, heats: map[types.NamespacedName]Heat{}}
}

// PodHitTokens returns the endpoint's latest per-pod heat (the
// controller's CacheHeat); false before the scraper read its pods twice.
func (s *Store) PodHitTokens(name types.NamespacedName) (map[string]float64, bool) {
	h, ok := s.Heat(name)
	return h.Pods, ok
}

// Heat returns the endpoint's latest per-pod heat; false before the
// scraper read its pods twice.
func (s *Store) Heat(name types.NamespacedName) (Heat, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	h, ok := s.heats[name]
	return h, ok && len(h.Pods) > 0
}

// Get returns the endpoint's latest load.
func (s *Store) Get(name types.NamespacedName) (Load, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	l, ok := s.loads[name]
	return l, ok
}

func (s *Store) set(name types.NamespacedName, l Load, h Heat) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loads[name] = l
	s.heats[name] = h
}

// retain drops the endpoints not in keep.
func (s *Store) retain(keep map[types.NamespacedName]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.loads {
		if !keep[k] {
			delete(s.loads, k)
			delete(s.heats, k)
		}
	}
}

const (
	// hitRatioWindow is the span the prefix-cache hit ratio is measured
	// over, so that a quiet interval does not swing it.
	hitRatioWindow = time.Minute
	// shedWindow is the span the shed rate is averaged over: long enough
	// that shedding a person looks for with `kubectl get` (published every
	// 30 s) is still there, short enough that it goes once it stops.
	shedWindow = 5 * time.Minute
	// endpointsAtOnce bounds the endpoints scraped at once.
	endpointsAtOnce = 4
)

// Scraper reads every endpoint's pods on an interval into a Store. It
// reads the LLMEndpoints and pods through Reader, the manager's cache, so
// a scrape costs the API server nothing.
type Scraper struct {
	Reader client.Reader
	Store  *Store
	// HTTP scrapes the pods; its Timeout bounds one pod's scrape.
	HTTP *http.Client
	// Interval between scrapes (default 10 s: the HPA controller syncs
	// every 15 s).
	Interval time.Duration

	// windows track each endpoint's counters between scrapes.
	windows map[types.NamespacedName]*endpointWindows
	// now is the clock, for tests.
	now func() time.Time
}

// endpointWindows are one endpoint's counters across scrapes.
type endpointWindows struct {
	hits hitWindow
	// shed is the routers' shed counters, by pod and tenant.
	shed counterWindow
}

func (s *Scraper) defaults() {
	if s.Interval <= 0 {
		s.Interval = 10 * time.Second
	}
	if s.HTTP == nil {
		s.HTTP = &http.Client{Timeout: 2 * time.Second}
	}
	if s.windows == nil {
		s.windows = map[types.NamespacedName]*endpointWindows{}
	}
	if s.now == nil {
		s.now = time.Now
	}
}

// NeedLeaderElection is false: every operator replica serves the metrics
// API, so every replica keeps its own figures.
func (s *Scraper) NeedLeaderElection() bool { return false }

// Start scrapes until ctx ends (a manager.Runnable).
func (s *Scraper) Start(ctx context.Context) error {
	s.defaults()
	t := time.NewTicker(s.Interval)
	defer t.Stop()
	for {
		if err := s.ScrapeOnce(ctx); err != nil {
			log.FromContext(ctx).Error(err, "scrape endpoint load")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// ScrapeOnce reads every endpoint's pods once and updates the store.
func (s *Scraper) ScrapeOnce(ctx context.Context) error {
	s.defaults()
	var eps v1alpha1.LLMEndpointList
	if err := s.Reader.List(ctx, &eps); err != nil {
		return fmt.Errorf("list LLMEndpoints: %w", err)
	}
	keep := make(map[types.NamespacedName]bool, len(eps.Items))
	type result struct {
		name types.NamespacedName
		load Load
		hits hitSample
		shed podCounters
	}
	results := make([]result, len(eps.Items))
	sem := make(chan struct{}, endpointsAtOnce)
	var wg sync.WaitGroup
	for i := range eps.Items {
		ep := &eps.Items[i]
		name := types.NamespacedName{Namespace: ep.Namespace, Name: ep.Name}
		keep[name] = true
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			l, h, shed := s.scrapeEndpoint(ctx, ep)
			results[i] = result{name, l, h, shed}
		}()
	}
	wg.Wait()
	for _, r := range results {
		w := s.windows[r.name]
		if w == nil {
			w = &endpointWindows{}
			s.windows[r.name] = w
		}
		var heat Heat
		r.load.HitRatio, r.load.HitRatioKnown, heat = w.hits.add(r.load.Time, r.hits, hitRatioWindow)
		w.shed.add(r.load.Time, r.shed, shedWindow)
		r.load.ShedPerMinute, r.load.ShedKnown = w.shed.perMinute()
		r.load.ShedKnown = r.load.ShedKnown && r.load.InFlightKnown
		s.Store.set(r.name, r.load, heat)
	}
	for k := range s.windows {
		if !keep[k] {
			delete(s.windows, k)
		}
	}
	s.Store.retain(keep)
	return nil
}

// podsPerEndpoint bounds the pods of one endpoint scraped at once, so that
// a large fleet with unreachable pods takes a few timeouts, not one each.
const podsPerEndpoint = 8

// scrapeEndpoint reads one endpoint's router and vLLM pods.
func (s *Scraper) scrapeEndpoint(ctx context.Context, ep *v1alpha1.LLMEndpoint) (Load, hitSample, podCounters) {
	l := Load{Instances: ep.Status.ReadyReplicas, FlowControl: ep.Spec.Router.FlowControl != nil}
	hits := hitSample{pods: map[string][2]float64{}}
	shed := podCounters{}
	var pods corev1.PodList
	if err := s.Reader.List(ctx, &pods, client.InNamespace(ep.Namespace), client.MatchingLabels{labelEndpoint: ep.Name}); err != nil {
		l.Time = s.now()
		return l, hits, shed
	}
	var (
		mu                     sync.Mutex
		wg                     sync.WaitGroup
		sem                    = make(chan struct{}, podsPerEndpoint)
		routersOK, routersFail int
		vllmOK, vllmFail       int
	)
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" || pod.DeletionTimestamp != nil {
			continue
		}
		role := pod.Labels[labelRole]
		var portName string
		switch role {
		case roleRouter:
			portName = routerPortName
		case roleVLLM:
			portName = vllmPortName
		default:
			continue
		}
		port := podspec.ContainerPort(pod, portName)
		if port == 0 {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			fams, err := s.fetch(ctx, "http://"+net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(port)))+"/metrics")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case role == roleRouter && err != nil:
				routersFail++
			case role == roleRouter:
				routersOK++
				l.InFlight += sum(fams[routerInFlight])
				l.QueuedPromptTokens += sum(fams[routerPrefillTokens])
				l.Queued += sum(fams[routerFlowQueued])
				shed[pod.Name] = sumBy(fams[routerFlowShed], "tenant")
			case err != nil:
				vllmFail++
			default:
				vllmOK++
				l.Waiting += sum(fams[vllmRequestsWaiting])
				hits.pods[pod.Name] = [2]float64{sum(fams[vllmPrefixCacheHits]), sum(fams[vllmPrefixCacheQueries])}
			}
		}()
	}
	wg.Wait()
	l.Scraped, l.Failed = routersOK+vllmOK, routersFail+vllmFail
	// A figure read from none of the pods that have it is unknown, not
	// zero: serving 0 would have an HPA scale a loaded fleet down.
	l.InFlightKnown = routersOK > 0 || routersFail == 0
	l.WaitingKnown = vllmOK > 0 || vllmFail == 0
	l.Time = s.now()
	return l, hits, shed
}

// fetch reads and parses one Prometheus text endpoint.
func (s *Scraper) fetch(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	resp, err := s.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: status %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(io.LimitReader(resp.Body, maxMetricsResponseBytes))
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", url, err)
	}
	return fams, nil
}

// sum adds a family's gauge, counter and untyped samples.
func sum(fam *dto.MetricFamily) float64 {
	var total float64
	for _, m := range fam.GetMetric() {
		total += sampleValue(m)
	}
	return total
}

// sumBy adds a family's samples by the value of one label (empty for
// samples without it).
func sumBy(fam *dto.MetricFamily, label string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range fam.GetMetric() {
		key := ""
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				key = lp.GetValue()
				break
			}
		}
		out[key] += sampleValue(m)
	}
	return out
}

func sampleValue(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// hitSample is each vLLM pod's prefix-cache counters (hits, queries) at
// one scrape.
type hitSample struct {
	pods map[string][2]float64
}

// hitWindow turns counter samples into a hit ratio over a sliding window,
// and each pod's heat.
type hitWindow struct {
	counters counterWindow
	heat     podHeat
}

// Series of the hit window's counters.
const (
	seriesHits    = "hits"
	seriesQueries = "queries"
)

// add records a scrape and returns the ratio over the window, and each
// pod's heat.
func (w *hitWindow) add(at time.Time, s hitSample, window time.Duration) (float64, bool, Heat) {
	pods := make(podCounters, len(s.pods))
	for pod, v := range s.pods {
		pods[pod] = map[string]float64{seriesHits: v[0], seriesQueries: v[1]}
	}
	increases := w.counters.add(at, pods, window)
	podHits := make(map[string]float64, len(increases))
	for pod, inc := range increases {
		podHits[pod] = inc[seriesHits]
	}
	heat := w.heat.add(at, podHits)
	sums, _ := w.counters.sums()
	if sums[seriesQueries] <= 0 {
		return 0, false, heat
	}
	return min(sums[seriesHits]/sums[seriesQueries], 1), true, heat
}

// podCounters is counters read at one scrape: pod → series → value.
type podCounters map[string]map[string]float64

// counterWindow turns successive scrapes of counters, read per pod and
// series, into their increases over a sliding window. A pod's first
// scrape sets its baseline: its counters hold what came before the
// window. On a pod seen before, a new series counts from zero, and so does
// one that went down (the pod restarted, or the series was dropped and
// made again), as Prometheus' increase() counts it. A pod missing from a
// scrape is dropped (gone or unreachable) and is a new pod when it is
// back.
type counterWindow struct {
	last  podCounters
	steps []counterStep
}

// counterStep is the increases between two scrapes, by series.
type counterStep struct {
	from, at  time.Time
	increases map[string]float64
}

// increase is how much a counter grew from prev to cur; a counter that
// went down was reset (its pod restarted) and counts from zero.
func increase(prev, cur float64) float64 {
	if cur >= prev {
		return cur - prev
	}
	return cur
}

// add records a scrape at `at` and returns each pod's increases since the
// previous one (pods seen before only).
func (w *counterWindow) add(at time.Time, cur podCounters, window time.Duration) podCounters {
	step := counterStep{from: at, at: at, increases: map[string]float64{}}
	if n := len(w.steps); n > 0 {
		step.from = w.steps[n-1].at
	}
	perPod := make(podCounters, len(cur))
	for pod, series := range cur {
		prev, seen := w.last[pod]
		if !seen {
			continue
		}
		inc := make(map[string]float64, len(series))
		for name, v := range series {
			inc[name] = increase(prev[name], v)
			step.increases[name] += inc[name]
		}
		perPod[pod] = inc
	}
	w.last = cur
	w.steps = append(w.steps, step)
	cut := 0
	for cut < len(w.steps) && at.Sub(w.steps[cut].at) > window {
		cut++
	}
	w.steps = w.steps[cut:]
	return perPod
}

// sums returns each series' increase over the window and the span it
// covers, from the scrape before the oldest step to the latest (0 before
// two scrapes).
func (w *counterWindow) sums() (map[string]float64, time.Duration) {
	out := map[string]float64{}
	if len(w.steps) == 0 {
		return out, 0
	}
	for _, st := range w.steps {
		for name, v := range st.increases {
			out[name] += v
		}
	}
	return out, w.steps[len(w.steps)-1].at.Sub(w.steps[0].from)
}

// perMinute is each series' rate per minute over the window; false before
// two scrapes.
func (w *counterWindow) perMinute() (map[string]float64, bool) {
	sums, span := w.sums()
	if span <= 0 {
		return nil, false
	}
	for name, v := range sums {
		sums[name] = v / span.Minutes()
	}
	return sums, true
}

package custommetrics

import (
	"context"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	routermetrics "github.com/warmroute/warmroute/sidecar/router/metrics"
	"github.com/warmroute/warmroute/test/vllmsim"
)

// routerServer serves the router's real registry with the given in-flight
// requests and unprefilled prompt tokens per backend.
func routerServer(t *testing.T, inFlight, prefillTokens map[string]float64) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(routerMetrics(inFlight, prefillTokens).Handler())
	t.Cleanup(s.Close)
	return s
}

// routerMetrics is the router's real registry with the given in-flight
// requests and unprefilled prompt tokens per backend.
func routerMetrics(inFlight, prefillTokens map[string]float64) *routermetrics.Metrics {
	perBackend := func(values map[string]float64) func(func(string, float64)) {
		return func(report func(string, float64)) {
			for b, n := range values {
				report(b, n)
			}
		}
	}
	return routermetrics.New(routermetrics.Gauges{
		IndexEntries:  func() float64 { return 0 },
		IndexBytes:    func() float64 { return 0 },
		Buffered:      func() float64 { return 0 },
		Held:          func() float64 { return 0 },
		InFlight:      perBackend(inFlight),
		PrefillTokens: perBackend(prefillTokens),
	})
}

// fakeVLLM serves vLLM's metric names (as the simulator exports them)
// with values the test sets.
type fakeVLLM struct {
	waiting       prometheus.Gauge
	hits, queries prometheus.Counter
	srv           *httptest.Server
}

func newFakeVLLM(t *testing.T) *fakeVLLM {
	t.Helper()
	reg := prometheus.NewRegistry()
	labels := prometheus.Labels{"model_name": "m", "engine": "0"}
	f := &fakeVLLM{
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{Name: vllmsim.MetricRequestsWaiting, ConstLabels: labels}),
		// The names carry _total already, as vLLM's do on the wire.
		hits:    prometheus.NewCounter(prometheus.CounterOpts{Name: vllmsim.MetricPrefixCacheHits, ConstLabels: labels}),
		queries: prometheus.NewCounter(prometheus.CounterOpts{Name: vllmsim.MetricPrefixCacheQueries, ConstLabels: labels}),
	}
	reg.MustRegister(f.waiting, f.hits, f.queries)
	f.srv = httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(f.srv.Close)
	return f
}

func port(t *testing.T, url string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(url[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return int32(n)
}

func pod(name, role, portName string, p int32) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{labelEndpoint: "bot", labelRole: role}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: role,
			Ports: []corev1.ContainerPort{{Name: portName, ContainerPort: p}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1"},
	}
}

func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestScrapeAggregatesRoutersAndInstances(t *testing.T) {
	r1 := routerServer(t, map[string]float64{"bot-vllm-a": 3, "bot-vllm-b": 2}, map[string]float64{"bot-vllm-a": 6000, "bot-vllm-b": 0})
	r2 := routerServer(t, map[string]float64{"bot-vllm-a": 1, "bot-vllm-b": 2}, map[string]float64{"bot-vllm-a": 500, "bot-vllm-b": 1500})
	va, vb := newFakeVLLM(t), newFakeVLLM(t)
	va.waiting.Set(3)
	vb.waiting.Set(1)
	// Counters before the first scrape are history, not the window's.
	va.hits.Add(1000)
	va.queries.Add(1000)

	ep := &v1alpha1.LLMEndpoint{ObjectMeta: metav1.ObjectMeta{Name: "bot", Namespace: "ns", Labels: map[string]string{"team": "x"}}}
	ep.Status.ReadyReplicas = 2
	unscheduled := pod("bot-vllm-c", roleVLLM, vllmPortName, 1)
	unscheduled.Status = corev1.PodStatus{Phase: corev1.PodPending}
	c := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(ep,
		pod("bot-router-1", roleRouter, routerPortName, port(t, r1.URL)),
		pod("bot-router-2", roleRouter, routerPortName, port(t, r2.URL)),
		pod("bot-vllm-a", roleVLLM, vllmPortName, port(t, va.srv.URL)),
		pod("bot-vllm-b", roleVLLM, vllmPortName, port(t, vb.srv.URL)),
		unscheduled,
	).Build()
	store := NewStore()
	s := &Scraper{Reader: c, Store: store, HTTP: &http.Client{Timeout: 5 * time.Second}}
	ctx := context.Background()
	if err := s.ScrapeOnce(ctx); err != nil {
		t.Fatal(err)
	}
	name := types.NamespacedName{Namespace: "ns", Name: "bot"}
	l, ok := store.Get(name)
	if !ok {
		t.Fatal("no load stored")
	}
	if l.Scraped != 4 || l.Failed != 0 {
		t.Errorf("scraped %d, failed %d; want 4 and 0", l.Scraped, l.Failed)
	}
	if got := l.InFlightPerInstance(); got != 4 {
		t.Errorf("in flight per instance = %v, want (3+2+1+2)/2 = 4", got)
	}
	if got := l.WaitingPerInstance(); got != 2 {
		t.Errorf("waiting per instance = %v, want (3+1)/2 = 2", got)
	}
	if got := l.QueuedPromptTokensPerInstance(); got != 4000 {
		t.Errorf("queued prompt tokens per instance = %v, want (6000+0+500+1500)/2 = 4000", got)
	}
	if l.HitRatioKnown {
		t.Errorf("hit ratio known after one scrape: %v", l.HitRatio)
	}

	va.queries.Add(300)
	va.hits.Add(150)
	vb.queries.Add(100)
	vb.hits.Add(90)
	if err := s.ScrapeOnce(ctx); err != nil {
		t.Fatal(err)
	}
	l, _ = store.Get(name)
	if !l.HitRatioKnown || l.HitRatio != 0.6 {
		t.Errorf("hit ratio = %v (known %v), want (150+90)/(300+100) = 0.6", l.HitRatio, l.HitRatioKnown)
	}

	p := &Provider{Store: store, Reader: c}
	info := provider.CustomMetricInfo{GroupResource: llmEndpoints, Namespaced: true, Metric: MetricInFlightPerInstance}
	mv, err := p.GetMetricByName(ctx, name, info, labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	if mv.Value.MilliValue() != 4000 || mv.DescribedObject.Kind != "LLMEndpoint" || mv.DescribedObject.Name != "bot" {
		t.Errorf("metric value = %+v", mv)
	}
	mv, err = p.GetMetricByName(ctx, name, provider.CustomMetricInfo{GroupResource: llmEndpoints, Namespaced: true, Metric: MetricQueuedPromptTokensPerInstance}, labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	if mv.Value.MilliValue() != 4000*1000 || mv.Metric.Name != MetricQueuedPromptTokensPerInstance {
		t.Errorf("%s = %+v, want 4000", MetricQueuedPromptTokensPerInstance, mv)
	}
	if !slices.ContainsFunc(p.ListAllMetrics(), func(i provider.CustomMetricInfo) bool { return i.Metric == MetricQueuedPromptTokensPerInstance }) {
		t.Errorf("%s missing from discovery", MetricQueuedPromptTokensPerInstance)
	}
	list, err := p.GetMetricBySelector(ctx, "ns", labels.SelectorFromSet(labels.Set{"team": "x"}),
		provider.CustomMetricInfo{GroupResource: llmEndpoints, Namespaced: true, Metric: MetricPrefixCacheHitRatio}, labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Value.MilliValue() != 600 {
		t.Errorf("by selector: %+v", list.Items)
	}
	if _, err := p.GetMetricByName(ctx, name, provider.CustomMetricInfo{GroupResource: llmEndpoints, Namespaced: true, Metric: "cpu"}, labels.Everything()); err == nil {
		t.Error("an unknown metric was served")
	}

	// The endpoint goes: its figures go with it.
	if err := c.Delete(ctx, ep); err != nil {
		t.Fatal(err)
	}
	if err := s.ScrapeOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := store.Get(name); ok {
		t.Error("a deleted endpoint's load is still served")
	}
	if _, err := p.GetMetricByName(ctx, name, info, labels.Everything()); err == nil {
		t.Error("a deleted endpoint's metric was served")
	}
}

func TestHitWindow(t *testing.T) {
	t0 := time.Unix(0, 0)
	sample := func(hits, queries float64) hitSample {
		return hitSample{pods: map[string][2]float64{"a": {hits, queries}}}
	}
	var w hitWindow
	steps := []struct {
		name          string
		at            time.Duration
		hits, queries float64
		want          float64
		known         bool
	}{
		{"baseline", 0, 500, 1000, 0, false},
		{"half hit", 10 * time.Second, 550, 1100, 0.5, true},
		{"all hit", 20 * time.Second, 650, 1200, 0.75, true},
		// The pod restarted: its counters start again from 0.
		{"restart", 30 * time.Second, 0, 200, 150.0 / 400, true},
		// Past the window only the newer steps count.
		{"window slides", 85 * time.Second, 100, 300, 100.0 / 300, true},
		{"quiet minute", 160 * time.Second, 100, 300, 0, false},
	}
	for _, st := range steps {
		got, known, _ := w.add(t0.Add(st.at), sample(st.hits, st.queries), time.Minute)
		if known != st.known || (known && math.Abs(got-st.want) > 1e-9) {
			t.Errorf("%s: ratio %v (known %v), want %v (known %v)", st.name, got, known, st.want, st.known)
		}
	}
}

func TestStatusPublisherWritesOnlyChanges(t *testing.T) {
	ep := &v1alpha1.LLMEndpoint{ObjectMeta: metav1.ObjectMeta{Name: "bot", Namespace: "ns"}}
	c := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(ep).WithStatusSubresource(ep).Build()
	writes := 0
	counting := interceptingClient{Client: c, onPatch: func() { writes++ }}
	store := NewStore()
	name := types.NamespacedName{Namespace: "ns", Name: "bot"}
	store.set(name, Load{Time: time.Unix(100, 0), Instances: 2, InFlight: 7, Waiting: 1, InFlightKnown: true, WaitingKnown: true, HitRatio: 0.734, HitRatioKnown: true}, Heat{})
	p := &StatusPublisher{Client: counting, Store: store}
	ctx := context.Background()
	for range 2 {
		if err := p.PublishOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var got v1alpha1.LLMEndpoint
	if err := c.Get(ctx, name, &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Load == nil || got.Status.Load.InFlightPerInstance != "3.5" || got.Status.Load.WaitingPerInstance != "0.5" ||
		got.Status.Load.PrefixCacheHitPercent == nil || *got.Status.Load.PrefixCacheHitPercent != 73 {
		t.Fatalf("status.load = %+v", got.Status.Load)
	}
	// Noise below the displayed precision writes nothing.
	store.set(name, Load{Time: time.Unix(130, 0), Instances: 2, InFlight: 7.02, Waiting: 1, InFlightKnown: true, WaitingKnown: true, HitRatio: 0.731, HitRatioKnown: true}, Heat{})
	if err := p.PublishOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if writes != 1 {
		t.Errorf("%d status writes, want 1", writes)
	}
	// A figure gone unknown leaves the status rather than keep its last
	// value: a merge patch keeps what it does not name.
	store.set(name, Load{Time: time.Unix(160, 0), Instances: 2, InFlight: 7, Waiting: 1, InFlightKnown: true, WaitingKnown: true}, Heat{})
	for range 2 {
		if err := p.PublishOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Get(ctx, name, &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Load == nil || got.Status.Load.PrefixCacheHitPercent != nil || got.Status.Load.InFlightPerInstance != "3.5" {
		t.Errorf("status.load after the hit rate went unknown = %+v, want no hit rate", got.Status.Load)
	}
	if writes != 2 {
		t.Errorf("%d status writes, want 2", writes)
	}
}

type interceptingClient struct {
	client.Client
	onPatch func()
}

func (c interceptingClient) Status() client.SubResourceWriter {
	return countingWriter{c.Client.Status(), c.onPatch}
}

type countingWriter struct {
	client.SubResourceWriter
	onPatch func()
}

func (w countingWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	w.onPatch()
	return w.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// A router that does not answer leaves the others' figures standing; when
// none answers the figure is unknown and not served, rather than served as
// 0, which would have an HPA scale a loaded fleet down.
func TestUnreachableRoutersMakeInFlightUnknown(t *testing.T) {
	r1 := routerServer(t, map[string]float64{"bot-vllm-a": 6}, map[string]float64{"bot-vllm-a": 900})
	down := httptest.NewServer(http.NotFoundHandler())
	downPort := port(t, down.URL)
	down.Close()
	v := newFakeVLLM(t)
	ep := &v1alpha1.LLMEndpoint{ObjectMeta: metav1.ObjectMeta{Name: "bot", Namespace: "ns"}}
	ep.Status.ReadyReplicas = 1
	name := types.NamespacedName{Namespace: "ns", Name: "bot"}
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		routers []*corev1.Pod
		known   bool
	}{
		{"one of two answers", []*corev1.Pod{pod("bot-router-1", roleRouter, routerPortName, port(t, r1.URL)), pod("bot-router-2", roleRouter, routerPortName, downPort)}, true},
		{"none answers", []*corev1.Pod{pod("bot-router-2", roleRouter, routerPortName, downPort)}, false},
	} {
		objs := []client.Object{ep.DeepCopy(), pod("bot-vllm-a", roleVLLM, vllmPortName, port(t, v.srv.URL))}
		for _, p := range tc.routers {
			objs = append(objs, p)
		}
		c := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(objs...).Build()
		store := NewStore()
		if err := (&Scraper{Reader: c, Store: store}).ScrapeOnce(ctx); err != nil {
			t.Fatal(err)
		}
		l, _ := store.Get(name)
		if l.InFlightKnown != tc.known || !l.WaitingKnown {
			t.Errorf("%s: in flight known %v (want %v), waiting known %v; load %+v", tc.name, l.InFlightKnown, tc.known, l.WaitingKnown, l)
		}
		// Both figures come from the routers.
		for _, metric := range []string{MetricInFlightPerInstance, MetricQueuedPromptTokensPerInstance} {
			info := provider.CustomMetricInfo{GroupResource: llmEndpoints, Namespaced: true, Metric: metric}
			_, err := (&Provider{Store: store, Reader: c}).GetMetricByName(ctx, name, info, labels.Everything())
			if (err == nil) != tc.known {
				t.Errorf("%s: %s served with error %v, want served %v", tc.name, metric, err, tc.known)
			}
		}
		if st := LoadStatus(l); (st.InFlightPerInstance != "") != tc.known {
			t.Errorf("%s: status shows in flight %q", tc.name, st.InFlightPerInstance)
		}
	}
}

// Figures older than MaxAge are not served: a stuck scraper must not keep
// an HPA acting on old load.
func TestStaleLoadIsNotServed(t *testing.T) {
	store := NewStore()
	name := types.NamespacedName{Namespace: "ns", Name: "bot"}
	store.set(name, Load{Time: time.Unix(1000, 0), Instances: 2, InFlight: 8, InFlightKnown: true}, Heat{})
	info := provider.CustomMetricInfo{GroupResource: llmEndpoints, Namespaced: true, Metric: MetricInFlightPerInstance}
	for _, tc := range []struct {
		at     int64
		served bool
	}{{1020, true}, {1050, true}, {1051, false}} {
		p := &Provider{Store: store, MaxAge: 50 * time.Second, now: func() time.Time { return time.Unix(tc.at, 0) }}
		_, err := p.GetMetricByName(context.Background(), name, info, labels.Everything())
		if (err == nil) != tc.served {
			t.Errorf("at %d s: error %v, want served %v", tc.at-1000, err, tc.served)
		}
	}
}

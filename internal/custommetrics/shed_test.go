package custommetrics

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/router/flow"
	"github.com/warmroute/warmroute/sidecar/router/picker"
)

// flowRouter serves a router's real registry with the picker's metrics,
// flow control's among them, as the router's metrics port has them, and
// returns flow control's to drive.
func flowRouter(t *testing.T) (*flow.Metrics, *httptest.Server) {
	t.Helper()
	m := routerMetrics(nil, nil)
	pm := picker.NewMetrics(m.Registry)
	s := httptest.NewServer(m.Handler())
	t.Cleanup(s.Close)
	return pm.Flow, s
}

func TestCounterWindowPerMinute(t *testing.T) {
	t0 := time.Unix(0, 0)
	var w counterWindow
	steps := []struct {
		name string
		at   time.Duration
		pods podCounters
		want map[string]float64 // per minute; nil: unknown
	}{
		{"the first scrape is the baseline: counters hold history", 0,
			podCounters{"picker": {"a": 100}}, nil},
		{"30 more in a minute", time.Minute,
			podCounters{"picker": {"a": 130}}, map[string]float64{"a": 30}},
		{"a series new on a pod seen before counts from zero", 2 * time.Minute,
			podCounters{"picker": {"a": 130, "b": 6}}, map[string]float64{"a": 15, "b": 3}},
		{"a new pod is a baseline, not a burst of shedding", 3 * time.Minute,
			podCounters{"picker": {"a": 130, "b": 6}, "other": {"a": 50}}, map[string]float64{"a": 10, "b": 2}},
		{"a counter that went down restarted: it counts from zero", 4 * time.Minute,
			podCounters{"picker": {"a": 12, "b": 6}, "other": {"a": 50}}, map[string]float64{"a": 42.0 / 4, "b": 1.5}},
		// At 7 min the steps that ended before 2 min are out: the window
		// runs from the 1 min scrape, 6 minutes.
		{"the window slides", 7 * time.Minute,
			podCounters{"picker": {"a": 24, "b": 6}, "other": {"a": 50}}, map[string]float64{"a": 24.0 / 6, "b": 1}},
		{"a quiet window: shedding stopped", 20 * time.Minute,
			podCounters{"picker": {"a": 24, "b": 6}, "other": {"a": 50}}, map[string]float64{"a": 0, "b": 0}},
	}
	for _, st := range steps {
		w.add(t0.Add(st.at), st.pods, shedWindow)
		got, known := w.perMinute()
		if known != (st.want != nil) {
			t.Errorf("%s: known %v, want %v", st.name, known, st.want != nil)
			continue
		}
		for series, want := range st.want {
			if math.Abs(got[series]-want) > 1e-9 {
				t.Errorf("%s: %s = %v/min, want %v", st.name, series, got[series], want)
			}
		}
	}
}

// The scraper reads flow control's queue and shed counters from every
// router pod over HTTP and sums them, so that whichever replica is the
// picker (and the others' zeros or old counts) gives one figure per
// endpoint; the status shows the queue, the shed rate and the most shed
// tenants, and nothing of it while flow control is off.
func TestScrapeShowsQueueAndShedding(t *testing.T) {
	picker, pickerSrv := flowRouter(t)
	follower, followerSrv := flowRouter(t)
	picker.Queued.WithLabelValues("team-a").Set(4)
	picker.Queued.WithLabelValues(flow.DefaultName).Set(2)
	picker.Shed.WithLabelValues("team-a", "pressure").Add(100)
	// The follower exports its queue at 0, and the shed counts of an
	// earlier term as picker.
	follower.Queued.WithLabelValues("team-a").Set(0)
	follower.Shed.WithLabelValues("team-a", "deadline").Add(50)

	ep := &v1alpha1.LLMEndpoint{ObjectMeta: metav1.ObjectMeta{Name: "bot", Namespace: "ns"}}
	ep.Spec.Router.FlowControl = &v1alpha1.FlowControl{}
	ep.Status.ReadyReplicas = 2
	c := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(ep,
		pod("bot-router-1", roleRouter, routerPortName, port(t, pickerSrv.URL)),
		pod("bot-router-2", roleRouter, routerPortName, port(t, followerSrv.URL)),
	).Build()
	now := time.Unix(1000, 0)
	store := NewStore()
	s := &Scraper{Reader: c, Store: store, HTTP: &http.Client{Timeout: 5 * time.Second}, now: func() time.Time { return now }}
	ctx := context.Background()
	name := types.NamespacedName{Namespace: "ns", Name: "bot"}
	scrape := func() *v1alpha1.LoadStatus {
		t.Helper()
		if err := s.ScrapeOnce(ctx); err != nil {
			t.Fatal(err)
		}
		l, ok := store.Get(name)
		if !ok {
			t.Fatal("no load stored")
		}
		return LoadStatus(l)
	}

	st := scrape()
	if ptr.Deref(st.Queued, -1) != 6 {
		t.Errorf("queued = %v, want 4+2 from the picker and 0 from the follower", st.Queued)
	}
	if st.ShedPerMinute != "" || st.ShedTenants != nil {
		t.Errorf("after one scrape: shed %q %v, want unknown: the counters hold history", st.ShedPerMinute, st.ShedTenants)
	}

	// Two minutes of shedding by four tenants, one of them counted on the
	// follower (it was the picker for part of the time); rate limits are
	// the tenants' own budget and do not count.
	picker.Shed.WithLabelValues("team-a", "pressure").Add(30)
	picker.Shed.WithLabelValues("team-a", "deadline").Add(6)
	picker.Shed.WithLabelValues(flow.DefaultName, "not_queued").Add(12)
	picker.Shed.WithLabelValues("batch", "tenant_queue_full").Add(3)
	picker.Shed.WithLabelValues("team-b", "pressure").Add(1)
	follower.Shed.WithLabelValues("team-a", "deadline").Add(3)
	picker.RateLimited.WithLabelValues("team-b", "requests").Add(500)
	picker.Queued.WithLabelValues("team-a").Set(9)
	now = now.Add(2 * time.Minute)
	st = scrape()
	if ptr.Deref(st.Queued, -1) != 11 {
		t.Errorf("queued = %v, want 9+2", st.Queued)
	}
	if st.ShedPerMinute != "27.5" {
		t.Errorf("shed per minute = %q, want (39+12+3+1)/2 = 27.5", st.ShedPerMinute)
	}
	want := []v1alpha1.TenantShed{{Name: "team-a", PerMinute: "19.5"}, {Name: flow.DefaultName, PerMinute: "6.0"}, {Name: "batch", PerMinute: "1.5"}}
	if len(st.ShedTenants) != len(want) {
		t.Fatalf("shed tenants = %+v, want the 3 most shed, most first: %+v", st.ShedTenants, want)
	}
	for i := range want {
		if st.ShedTenants[i] != want[i] {
			t.Errorf("shed tenants[%d] = %+v, want %+v", i, st.ShedTenants[i], want[i])
		}
	}

	// Flow control turned off: the routers' last figures are not shown.
	ep.Spec.Router.FlowControl = nil
	if err := c.Update(ctx, ep); err != nil {
		t.Fatal(err)
	}
	now = now.Add(10 * time.Second)
	st = scrape()
	if st.Queued != nil || st.ShedPerMinute != "" || st.ShedTenants != nil {
		t.Errorf("flow control off: status shows queued %v, shed %q %v", st.Queued, st.ShedPerMinute, st.ShedTenants)
	}
}

// The figures as the real flow control records them: a Controller
// instrumented with the metrics the router serves queues two of team-a's
// requests, refuses team-a's third (its maxQueued) and an unlisted
// tenant's (maxQueued 0), and the status names both tenants.
func TestScrapeReadsRealFlowControl(t *testing.T) {
	m, srv := flowRouter(t)
	fc := flow.New(flow.Config{
		Default:      flow.Limits{Weight: 1},
		Tenants:      map[string]flow.Limits{"team-a": {Weight: 1, MaxQueued: 2}},
		QueueTimeout: time.Hour,
		MaxQueued:    10,
	}, time.Now)
	fc.Instrument(m)

	ep := &v1alpha1.LLMEndpoint{ObjectMeta: metav1.ObjectMeta{Name: "bot", Namespace: "ns"}}
	ep.Spec.Router.FlowControl = &v1alpha1.FlowControl{}
	c := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(ep,
		pod("bot-router-1", roleRouter, routerPortName, port(t, srv.URL))).Build()
	now := time.Unix(1000, 0)
	store := NewStore()
	s := &Scraper{Reader: c, Store: store, HTTP: &http.Client{Timeout: 5 * time.Second}, now: func() time.Time { return now }}
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.ScrapeOnce(ctx); err != nil {
		t.Fatal(err)
	}

	waiters := make(chan error, 2)
	for range 2 {
		go func() { waiters <- fc.Wait(ctx, flow.Queued{Tenant: "team-a", Tokens: 100}) }()
	}
	defer func() {
		cancel()
		for range 2 {
			if err := <-waiters; !errors.Is(err, context.Canceled) {
				t.Errorf("a queued request ended with %v, want its client gone", err)
			}
		}
	}()
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return fc.Waiting() == 2, nil
	}); err != nil {
		t.Fatalf("team-a's requests not queued: %d waiting", fc.Waiting())
	}
	for _, tenant := range []string{"team-a", "someone-else"} {
		var refusal *flow.Refusal
		if err := fc.Wait(ctx, flow.Queued{Tenant: tenant, Tokens: 100}); !errors.As(err, &refusal) {
			t.Fatalf("%s's request: %v, want a refusal", tenant, err)
		}
	}

	now = now.Add(time.Minute)
	if err := s.ScrapeOnce(ctx); err != nil {
		t.Fatal(err)
	}
	l, _ := store.Get(types.NamespacedName{Namespace: "ns", Name: "bot"})
	st := LoadStatus(l)
	want := []v1alpha1.TenantShed{{Name: flow.DefaultName, PerMinute: "1.0"}, {Name: "team-a", PerMinute: "1.0"}}
	if ptr.Deref(st.Queued, -1) != 2 || st.ShedPerMinute != "2.0" || !slices.Equal(st.ShedTenants, want) {
		t.Errorf("status.load = queued %v, shed %q %+v; want 2 queued, 2.0 shed %+v", st.Queued, st.ShedPerMinute, st.ShedTenants, want)
	}
}

// Tenants tied on the displayed rate are ordered by name, so that noise
// below the precision gives the same status and no write; rates that
// round to 0 and names the CRD would refuse are left out.
func TestMostShed(t *testing.T) {
	long := string(make([]byte, maxTenantName+1))
	got := mostShed(map[string]float64{"b": 2.04, "a": 1.98, "c": 0.04, long: 50, "d": 1})
	want := []v1alpha1.TenantShed{{Name: "a", PerMinute: "2.0"}, {Name: "b", PerMinute: "2.0"}, {Name: "d", PerMinute: "1.0"}}
	if len(got) != len(want) {
		t.Fatalf("most shed = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("most shed[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// An Event when the published rate starts showing shedding and when it
// is measured at 0 again; none while it goes on, nor when it goes unknown
// (routers unreachable, flow control off), which is not news of the
// queue.
func TestSheddingEvents(t *testing.T) {
	shedding := &v1alpha1.LoadStatus{ShedPerMinute: "20.0", ShedTenants: []v1alpha1.TenantShed{{Name: "batch", PerMinute: "20.0"}}}
	quiet := &v1alpha1.LoadStatus{ShedPerMinute: "0.0"}
	unknown := &v1alpha1.LoadStatus{}
	for _, tc := range []struct {
		name          string
		before, after *v1alpha1.LoadStatus
		want          string
	}{
		{"first status, quiet", nil, quiet, ""},
		{"starts", quiet, shedding, "Warning Shedding Flow control sheds 20.0 requests/min (batch 20.0)"},
		{"starts from unknown", unknown, shedding, "Warning Shedding"},
		{"goes on", shedding, &v1alpha1.LoadStatus{ShedPerMinute: "12.5"}, ""},
		{"stops", shedding, quiet, "Normal SheddingStopped"},
		{"goes unknown", shedding, unknown, ""},
	} {
		rec := events.NewFakeRecorder(4)
		p := &StatusPublisher{Recorder: rec}
		p.recordShedding(&v1alpha1.LLMEndpoint{}, tc.before, tc.after)
		close(rec.Events)
		var got []string
		for e := range rec.Events {
			got = append(got, e)
		}
		switch {
		case tc.want == "" && len(got) != 0:
			t.Errorf("%s: events %q, want none", tc.name, got)
		case tc.want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], tc.want)):
			t.Errorf("%s: events %q, want one starting %q", tc.name, got, tc.want)
		}
	}
}

package flow

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// TestFromDocument decodes the contract's JSON strictly and converts it;
// nil is the disabled Config.
func TestFromDocument(t *testing.T) {
	const doc = `{"default": {"weight": 1, "priority": 0, "maxQueued": 100},
		"tenants": {"team-a": {"weight": 3, "priority": 10, "requestsPerMinute": 600, "tokensPerMinute": 200000, "maxQueued": 50},
		            "batch": {"weight": 1, "priority": -100, "maxQueued": 1000}},
		"queueTimeoutMillis": 30000, "maxQueued": 1000}`
	dec := json.NewDecoder(bytes.NewReader([]byte(doc)))
	dec.DisallowUnknownFields()
	var d routing.FlowControl
	if err := dec.Decode(&d); err != nil {
		t.Fatal(err)
	}
	want := Config{
		Default: Limits{Weight: 1, MaxQueued: 100},
		Tenants: map[string]Limits{
			"team-a": {Weight: 3, Priority: 10, RequestsPerMinute: 600, TokensPerMinute: 200000, MaxQueued: 50},
			"batch":  {Weight: 1, Priority: -100, MaxQueued: 1000},
		},
		QueueTimeout: 30 * time.Second, MaxQueued: 1000,
	}
	got := FromDocument(&d)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("FromDocument (-want +got):\n%s", diff)
	}
	if off := FromDocument(nil); off.Enabled() {
		t.Errorf("FromDocument(nil) = %+v, want the disabled Config", off)
	}
}

// TestClamp: a request lowers its priority, never raises it over its
// tenant's; unlisted tenants have Default's.
func TestClamp(t *testing.T) {
	c := New(twoTenants(1, 1, 10, -5), time.Now)
	for _, tc := range []struct {
		tenant          string
		requested, want int
	}{
		{"a", 100, 10}, {"a", 3, 3}, {"b", 0, -5}, {"b", -50, -50}, {"other", 1, 0}, {"", -1, -1},
	} {
		if got := c.Clamp(tc.tenant, tc.requested); got != tc.want {
			t.Errorf("Clamp(%q, %d) = %d, want %d", tc.tenant, tc.requested, got, tc.want)
		}
	}
}

// TestMetrics: per-tenant series, unlisted tenants under DefaultName, and a
// removed tenant's series dropped.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	cfg := limited(1, 0)
	cfg.MaxQueued = 1
	q := newQueueing(t, cfg)
	q.c.Instrument(m)

	tk, _ := q.c.Admit("t", 10)
	tk.Settle(25)
	if _, lim := q.c.Admit("t", 10); lim == nil {
		t.Fatal("the second request of a 1-a-minute tenant was admitted")
	}
	nobody, _ := q.c.Admit("someone", 10)
	nobody.Settle(7)
	// The queue holds one: y, of fewer tokens, sheds x.
	q.arrive(arrival{"x", "someone", 0, 10, 0}, arrival{"y", "t", 0, 5, 0})
	q.clk.advance(time.Second)
	q.release(1)

	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"t's admitted tokens", testutil.ToFloat64(m.AdmittedTokens.WithLabelValues("t")), 25},
		{"unlisted admitted tokens", testutil.ToFloat64(m.AdmittedTokens.WithLabelValues(DefaultName)), 7},
		{"t rate-limited on requests", testutil.ToFloat64(m.RateLimited.WithLabelValues("t", "requests")), 1},
		{"unlisted shed for pressure", testutil.ToFloat64(m.Shed.WithLabelValues(DefaultName, "pressure")), 1},
		{"t queued", testutil.ToFloat64(m.Queued.WithLabelValues("t")), 0},
		{"t queue waits observed", waits(t, m, "t"), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	q.c.Update(Config{QueueTimeout: time.Second, MaxQueued: 1, Default: Limits{Weight: 1}})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "tenant" && l.GetValue() == "t" {
					t.Errorf("%s still has a series of the removed tenant t", mf.GetName())
				}
			}
		}
	}
}

func waits(t *testing.T, m *Metrics, tenant string) float64 {
	var d dto.Metric
	if err := m.QueueWait.WithLabelValues(tenant).(prometheus.Metric).Write(&d); err != nil {
		t.Fatal(err)
	}
	return float64(d.GetHistogram().GetSampleCount())
}

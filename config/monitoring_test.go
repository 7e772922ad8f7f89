package config_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	routermetrics "github.com/warmroute/warmroute/sidecar/router/metrics"
	"github.com/warmroute/warmroute/sidecar/router/picker"
	"github.com/warmroute/warmroute/test/vllmsim"
)

// Files whose PromQL names router and vLLM metrics: the dashboard, the
// alerts and the Prometheus autoscaling samples.
var promQLFiles = []string{
	"grafana/llmendpoint-dashboard.json",
	"prometheus/alerts.yaml",
	"samples/autoscaling/prometheus_adapter_rules.yaml",
	"samples/autoscaling/keda_scaledobject.yaml",
}

// metricName finds what PromQL could name of ours: every series the
// router exports starts with warmroute_router_, every vLLM one with vllm:.
var metricName = regexp.MustCompile(`\b(warmroute_router_[a-zA-Z0-9_]+|vllm:[a-zA-Z0-9_:]+)`)

// TestDashboardsAndAlertsNameRealMetrics keeps the monitoring from
// rotting: a metric renamed or dropped in the router, or a vLLM name
// mistyped, fails here rather than leaving an empty panel or an alert that
// can never fire.
func TestDashboardsAndAlertsNameRealMetrics(t *testing.T) {
	known := knownMetrics(t)
	used := 0
	for _, f := range promQLFiles {
		exprs := promQL(t, f)
		if len(exprs) == 0 {
			t.Errorf("%s: no PromQL found", f)
		}
		for _, e := range exprs {
			names := metricName.FindAllString(e, -1)
			if len(names) == 0 && !strings.Contains(e, "$") {
				t.Errorf("%s: %q names no router or vLLM metric", f, e)
			}
			for _, n := range names {
				used++
				if !known.has(n) {
					t.Errorf("%s: %s is neither in the router's registry nor among vLLM's names", f, n)
				}
			}
		}
	}
	if used < 20 {
		t.Errorf("only %d metric references found: is the extraction broken?", used)
	}
}

// The check itself must catch a wrong name, a histogram series of a
// counter and a typo in vLLM's names.
func TestKnownMetricsRefusesMadeUpNames(t *testing.T) {
	known := knownMetrics(t)
	for _, n := range []string{"warmroute_router_requests_total", "warmroute_router_time_to_first_token_seconds_bucket",
		"warmroute_router_in_flight_requests", "warmroute_router_picks_total", "warmroute_router_flow_queue_wait_seconds_bucket",
		"vllm:prefix_cache_hits_total", "vllm:time_to_first_token_seconds_count"} {
		if !known.has(n) {
			t.Errorf("%s is a real metric, refused", n)
		}
	}
	for _, n := range []string{"warmroute_router_request_total", "warmroute_router_requests_total_bucket", "warmroute_router_peers",
		"warmroute_router_flow_shed", "warmroute_router_flow_queued_bucket",
		"vllm:prefix_cache_hit_total", "vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds"} {
		if known.has(n) {
			t.Errorf("%s is not a real metric, accepted", n)
		}
	}
}

type metricSet struct {
	names      map[string]bool
	histograms map[string]bool
}

// has accepts a metric's name, and a histogram's _bucket, _sum and _count
// series.
func (s metricSet) has(name string) bool {
	if s.names[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && s.histograms[base] {
			return true
		}
	}
	return false
}

// knownMetrics are the router's metrics as its registry has them and
// vLLM's as the simulator exports them.
func knownMetrics(t *testing.T) metricSet {
	t.Helper()
	s := metricSet{names: map[string]bool{}, histograms: map[string]bool{}}
	zero := func() float64 { return 0 }
	// Per-backend gauges appear in a Gather only with a backend.
	oneBackend := func(report func(string, float64)) { report("b", 0) }
	m := routermetrics.New(routermetrics.Gauges{IndexEntries: zero, IndexBytes: zero, Buffered: zero, Held: zero,
		InFlight: oneBackend, PrefillTokens: oneBackend})
	pm := picker.NewMetrics(m.Registry)
	// Vectors without a child are missing from a Gather: describe the
	// structs' collectors as well, flow control's among the picker's.
	for _, v := range []any{*m, *pm, *pm.Flow} {
		describe(t, v, s)
	}
	gather(t, m.Registry, s)

	sim, err := vllmsim.New(vllmsim.Config{Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	gather(t, sim.Registry(), s)
	return s
}

// describe adds the names of the collectors in the fields of the metrics
// struct v.
func describe(t *testing.T, v any, s metricSet) {
	t.Helper()
	rv := reflect.ValueOf(v)
	for i := range rv.NumField() {
		c, ok := rv.Field(i).Interface().(prometheus.Collector)
		if !ok || rv.Field(i).IsNil() {
			continue
		}
		ch := make(chan *prometheus.Desc, 8)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			name := descName(t, d)
			s.names[name] = true
			if strings.Contains(reflect.TypeOf(c).String(), "Histogram") {
				s.histograms[name] = true
			}
		}
	}
}

func gather(t *testing.T, g prometheus.Gatherer, s metricSet) {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		s.names[f.GetName()] = true
		if f.GetType().String() == "HISTOGRAM" {
			s.histograms[f.GetName()] = true
		}
	}
}

var descFQName = regexp.MustCompile(`fqName: "([^"]+)"`)

func descName(t *testing.T, d *prometheus.Desc) string {
	t.Helper()
	m := descFQName.FindStringSubmatch(d.String())
	if m == nil {
		t.Fatalf("no name in %s", d)
	}
	return m[1]
}

// promQL collects the queries of a file: every expr, query, seriesQuery
// and metricsQuery string, at any depth, and in the rules a ConfigMap
// carries as text.
func promQL(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs []any
	if filepath.Ext(path) == ".json" {
		var d any
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		docs = append(docs, d)
	} else {
		for _, part := range strings.Split(string(b), "\n---\n") {
			var d any
			if err := yaml.Unmarshal([]byte(part), &d); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			docs = append(docs, d)
		}
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if v["type"] == "datasource" {
				return // a Grafana variable whose query is a plugin name
			}
			for k, x := range v {
				if str, ok := x.(string); ok {
					switch {
					case slices.Contains([]string{"expr", "query", "seriesQuery", "metricsQuery"}, k):
						out = append(out, str)
					case strings.HasSuffix(k, ".yaml"):
						// A config file in a ConfigMap.
						var inner any
						if err := yaml.Unmarshal([]byte(str), &inner); err != nil {
							t.Fatalf("%s: %s: %v", path, k, err)
						}
						walk(inner)
					}
					continue
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	for _, d := range docs {
		walk(d)
	}
	return out
}

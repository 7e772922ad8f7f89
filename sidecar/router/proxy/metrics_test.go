package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	promodel "github.com/prometheus/common/model"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

// scrapeGauge reads one backend's value of a gauge from the router's
// /metrics over HTTP, as Prometheus and the operator's scraper do; ok is
// false when the series is absent.
func scrapeGauge(t *testing.T, url, name, backend string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(promodel.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range fams[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "backend" && l.GetValue() == backend {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// A request the backend has not answered yet counts its estimated prompt
// tokens in warmroute_router_prefill_tokens_in_flight for that backend;
// the answer takes them out again.
func TestPrefillTokensGauge(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	held := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/completions" {
			return
		}
		arrived <- struct{}{}
		<-release
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"ok","finish_reason":"stop"}]}`))
	}))
	t.Cleanup(held.Close)
	r := New(Options{AllowLoopbackBackends: true, EjectBase: time.Minute})
	// RANDOM matches no prefixes, so the whole prompt is charged.
	if err := r.Apply(document(routingv1alpha1.StrategyRandom, map[string]string{"held": strings.TrimPrefix(held.URL, "http://")})); err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, r)
	metrics := httptest.NewServer(r.Metrics().Handler())
	t.Cleanup(metrics.Close)
	const name = "warmroute_router_prefill_tokens_in_flight"
	if v, ok := scrapeGauge(t, metrics.URL, name, "held"); !ok || v != 0 {
		t.Fatalf("idle: %s = %v (present %v), want 0", name, v, ok)
	}

	// 4000 bytes of prompt at the default 4 bytes per token.
	done := make(chan *http.Response)
	go func() {
		resp, err := http.Post(srv+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"m","prompt":"`+strings.Repeat("a", 4000)+`"}`))
		if err != nil {
			t.Error(err)
			resp = nil
		} else {
			resp.Body.Close()
		}
		done <- resp
	}()
	<-arrived
	if v, ok := scrapeGauge(t, metrics.URL, name, "held"); v != 1000 {
		t.Errorf("while held: %s = %v (present %v), want 1000", name, v, ok)
	}
	if v, _ := scrapeGauge(t, metrics.URL, "warmroute_router_in_flight_requests", "held"); v != 1 {
		t.Errorf("while held: in flight = %v, want 1", v)
	}
	close(release)
	if resp := <-done; resp == nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("response %+v", resp)
	}
	if v, ok := scrapeGauge(t, metrics.URL, name, "held"); !ok || v != 0 {
		t.Errorf("answered: %s = %v (present %v), want 0", name, v, ok)
	}
}

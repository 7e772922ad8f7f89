// Package promscrape reads a Prometheus text endpoint (the router's or a
// simulator's /metrics) for tests and the benchmark.
package promscrape

import (
	"context"
	"fmt"
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families fetches url and parses it; a status other than 200 is an
// error.
func Families(ctx context.Context, client *http.Client, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: status %s", url, resp.Status)
	}
	families, err := Parse(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", url, err)
	}
	return families, nil
}

// Parse reads Prometheus text exposition.
func Parse(r io.Reader) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(r)
}

// Value is a sample's value: a counter's, gauge's or untyped sample's, or a
// histogram's count.
func Value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return 0
}

// Labels are a sample's labels as a map.
func Labels(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// Sum adds the values of fam's samples whose labels include want; a
// missing family sums to 0.
func Sum(fam *dto.MetricFamily, want map[string]string) float64 {
	var sum float64
next:
	for _, m := range fam.GetMetric() {
		have := Labels(m)
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		sum += Value(m)
	}
	return sum
}

// ByLabel adds fam's sample values grouped by the value of one label.
func ByLabel(fam *dto.MetricFamily, label string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range fam.GetMetric() {
		out[Labels(m)[label]] += Value(m)
	}
	return out
}

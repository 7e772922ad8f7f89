package harness

import (
	"net/http"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

var metricsClient = &http.Client{Timeout: 5 * time.Second}

// Metric reads a router metric: the sum of the series whose labels include
// the given ones (counter and gauge values, histogram sample counts). A
// metric not exported yet reads 0.
func Metric(r *Router, name string, labels map[string]string) (float64, error) {
	resp, err := metricsClient.Get(r.MetricsURL + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, err
	}
	fam, ok := families[name]
	if !ok {
		return 0, nil
	}
	var sum float64
next:
	for _, m := range fam.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum, nil
}

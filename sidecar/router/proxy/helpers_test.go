package proxy

import (
	"errors"
	"net/http"
	"net/http/httptest"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func newHTTPTestServer(h http.Handler) *httptest.Server { return httptest.NewServer(h) }

func errorsAs(err error, target any) bool { return errors.As(err, target) }

// counterValue reads a counter.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// familyCount is how many samples the registry holds for a metric name.
func familyCount(r *prometheus.Registry, name string) int {
	fams, err := r.Gather()
	if err != nil {
		return -1
	}
	for _, f := range fams {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}

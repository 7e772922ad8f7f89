package proxy

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/openai/openai-go/v3"
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

// usageOf reads the token usage of an OpenAI response body.
func usageOf(t *testing.T, out string) openai.CompletionUsage {
	t.Helper()
	var v openai.ChatCompletion
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return v.Usage
}

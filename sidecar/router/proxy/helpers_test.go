package proxy

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

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

// usage is an OpenAI response's token usage.
type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	Details          struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// usageOf reads the usage of a response body.
func usageOf(t *testing.T, out string) usage {
	t.Helper()
	var v struct {
		Usage usage `json:"usage"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return v.Usage
}

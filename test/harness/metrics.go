package harness

import (
	"context"
	"net/http"
	"time"

	"github.com/warmroute/warmroute/test/promscrape"
)

var metricsClient = &http.Client{Timeout: 5 * time.Second}

// Metric reads a router metric: the sum of the series whose labels include
// the given ones (counter and gauge values, histogram sample counts). A
// metric not exported yet reads 0.
func Metric(r *Router, name string, labels map[string]string) (float64, error) {
	families, err := promscrape.Families(context.Background(), metricsClient, r.MetricsURL+"/metrics")
	if err != nil {
		return 0, err
	}
	return promscrape.Sum(families[name], labels), nil
}

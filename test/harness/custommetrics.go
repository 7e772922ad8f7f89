package harness

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
)

// customMetricsAPI is the APIService config/metricsapi declares.
const customMetricsAPI = "v1beta2.custom.metrics.k8s.io"

// customMetricsArgs serve the custom metrics API on the port and with the
// certificate of the installation (its APIService and Service come from
// config/default with the rest).
func (in *installation) customMetricsArgs() []string {
	return []string{
		"--custom-metrics-port=" + strconv.Itoa(in.ports[customMetricsPortName]),
		"--custom-metrics-cert-dir=" + in.certDirs[customMetricsCertMount],
		// The HPA controller syncs every 2 s here (localcluster).
		"--custom-metrics-scrape-interval=1s",
		"--load-status-period=5s",
	}
}

// waitCustomMetrics waits until the API server reports the operator's
// custom metrics API Available.
func waitCustomMetrics(ctx context.Context, e *Env) error {
	agg, err := aggregator.NewForConfig(e.Cluster.Config)
	if err != nil {
		return err
	}
	var last []apiregistrationv1.APIServiceCondition
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := agg.ApiregistrationV1().APIServices().Get(ctx, customMetricsAPI, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = got.Status.Conditions
		for _, c := range last {
			if c.Type == apiregistrationv1.Available && c.Status == apiregistrationv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return fmt.Errorf("APIService %s not Available within 60s: %+v (operator log: %s): %w", customMetricsAPI, last,
			filepath.Join(e.Cluster.WorkDir, "operator.log"), err)
	}
	return nil
}

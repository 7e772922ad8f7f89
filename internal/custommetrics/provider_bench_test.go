package custommetrics

import (
	"context"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/custom-metrics-apiserver/pkg/provider"
)

// The read path the HPA controller hits: one map lookup under a read lock,
// whatever the number of endpoints or pods.
func BenchmarkGetMetricByName(b *testing.B) {
	store := NewStore()
	for i := range 1000 {
		store.set(types.NamespacedName{Namespace: "ns", Name: "ep-" + strconv.Itoa(i)}, Load{Time: time.Now(), Instances: 8, InFlight: 40, InFlightKnown: true}, Heat{})
	}
	p := &Provider{Store: store}
	info := provider.CustomMetricInfo{GroupResource: llmEndpoints, Namespaced: true, Metric: MetricInFlightPerInstance}
	name := types.NamespacedName{Namespace: "ns", Name: "ep-500"}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.GetMetricByName(ctx, name, info, labels.Everything()); err != nil {
			b.Fatal(err)
		}
	}
}

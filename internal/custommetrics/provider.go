package custommetrics

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// Names of the metrics served for every LLMEndpoint
// (custom.metrics.k8s.io/v1beta2, resource llmendpoints.serving.warmroute.dev).
const (
	// MetricInFlightPerInstance is the requests in flight from the routers
	// to the instances, divided by the ready instances.
	MetricInFlightPerInstance = "inflight_requests_per_instance"
	// MetricWaitingPerInstance is the requests queued inside vLLM (waiting
	// for a batch slot: vllm:num_requests_waiting), divided by the ready
	// instances.
	MetricWaitingPerInstance = "waiting_requests_per_instance"
	// MetricQueuedPromptTokensPerInstance is the prompt tokens the routers
	// estimate the instances have yet to prefill for them (prompt length
	// less the expected prefix-cache hit, until the first token), divided
	// by the ready instances: the prefill work queued, which a few long
	// prompts raise far more than the request counts show.
	MetricQueuedPromptTokensPerInstance = "queued_prompt_tokens_per_instance"
	// MetricPrefixCacheHitRatio is the share of prompt tokens vLLM served
	// from its prefix cache over the last minute (0 to 1).
	MetricPrefixCacheHitRatio = "prefix_cache_hit_ratio"
)

// MetricNames lists the served metrics.
var MetricNames = []string{MetricInFlightPerInstance, MetricWaitingPerInstance, MetricQueuedPromptTokensPerInstance, MetricPrefixCacheHitRatio}

var llmEndpoints = schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "llmendpoints"}

// Provider answers custom metrics API requests from a Store.
type Provider struct {
	Store *Store
	// Reader lists LLMEndpoints for label-selector queries (the manager's
	// cache).
	Reader client.Reader
	// MaxAge is the oldest load served (0: any). A scraper that stopped
	// must make the metric go missing, which an HPA answers by holding
	// the endpoint's size, not by acting on old figures.
	MaxAge time.Duration
	// now is the clock, for tests.
	now func() time.Time
}

// load is the endpoint's load if it is fresh.
func (p *Provider) load(name types.NamespacedName) (Load, bool) {
	l, ok := p.Store.Get(name)
	if !ok {
		return l, false
	}
	now := time.Now
	if p.now != nil {
		now = p.now
	}
	if p.MaxAge > 0 && now().Sub(l.Time) > p.MaxAge {
		return l, false
	}
	return l, true
}

var _ provider.CustomMetricsProvider = (*Provider)(nil)

// value is a metric's value in a load; false when it has none.
func value(l Load, metric string) (float64, bool) {
	switch metric {
	case MetricInFlightPerInstance:
		return l.InFlightPerInstance(), l.InFlightKnown
	case MetricWaitingPerInstance:
		return l.WaitingPerInstance(), l.WaitingKnown
	case MetricQueuedPromptTokensPerInstance:
		return l.QueuedPromptTokensPerInstance(), l.InFlightKnown
	case MetricPrefixCacheHitRatio:
		return l.HitRatio, l.HitRatioKnown
	}
	return 0, false
}

// served says whether info names a metric of ours.
func served(info provider.CustomMetricInfo) bool {
	return info.GroupResource == llmEndpoints && info.Namespaced && slices.Contains(MetricNames, info.Metric)
}

// GetMetricByName returns one endpoint's metric.
func (p *Provider) GetMetricByName(_ context.Context, name types.NamespacedName, info provider.CustomMetricInfo, _ labels.Selector) (*custom_metrics.MetricValue, error) {
	if !served(info) {
		return nil, provider.NewMetricNotFoundError(info.GroupResource, info.Metric)
	}
	l, ok := p.load(name)
	if !ok {
		return nil, provider.NewMetricNotFoundForError(info.GroupResource, info.Metric, name.Name)
	}
	v, ok := value(l, info.Metric)
	if !ok {
		return nil, provider.NewMetricNotFoundForError(info.GroupResource, info.Metric, name.Name)
	}
	mv := metricValue(name, info.Metric, l, v)
	return &mv, nil
}

// GetMetricBySelector returns the metric of every endpoint in namespace
// that matches selector and has a value.
func (p *Provider) GetMetricBySelector(ctx context.Context, namespace string, selector labels.Selector, info provider.CustomMetricInfo, _ labels.Selector) (*custom_metrics.MetricValueList, error) {
	if !served(info) {
		return nil, provider.NewMetricNotFoundError(info.GroupResource, info.Metric)
	}
	var eps v1alpha1.LLMEndpointList
	if err := p.Reader.List(ctx, &eps, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return nil, fmt.Errorf("list LLMEndpoints: %w", err)
	}
	out := &custom_metrics.MetricValueList{}
	for _, ep := range eps.Items {
		name := types.NamespacedName{Namespace: ep.Namespace, Name: ep.Name}
		l, ok := p.load(name)
		if !ok {
			continue
		}
		if v, ok := value(l, info.Metric); ok {
			out.Items = append(out.Items, metricValue(name, info.Metric, l, v))
		}
	}
	return out, nil
}

// ListAllMetrics lists the served metrics (for discovery).
func (p *Provider) ListAllMetrics() []provider.CustomMetricInfo {
	out := make([]provider.CustomMetricInfo, 0, len(MetricNames))
	for _, m := range MetricNames {
		out = append(out, provider.CustomMetricInfo{GroupResource: llmEndpoints, Namespaced: true, Metric: m})
	}
	return out
}

func metricValue(name types.NamespacedName, metric string, l Load, v float64) custom_metrics.MetricValue {
	return custom_metrics.MetricValue{
		DescribedObject: custom_metrics.ObjectReference{
			APIVersion: v1alpha1.GroupVersion.String(),
			Kind:       "LLMEndpoint",
			Namespace:  name.Namespace,
			Name:       name.Name,
		},
		Metric:    custom_metrics.MetricIdentifier{Name: metric},
		Timestamp: metav1.NewTime(l.Time),
		Value:     *milli(v),
	}
}

// milli keeps three decimals: a hit ratio of 0.734 is 734m, which the HPA
// compares exactly.
func milli(v float64) *resource.Quantity {
	return resource.NewMilliQuantity(int64(math.Round(v*1000)), resource.DecimalSI)
}

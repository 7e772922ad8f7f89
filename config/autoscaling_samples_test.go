package config_test

import (
	"os"
	"slices"
	"testing"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"sigs.k8s.io/yaml"

	"github.com/warmroute/warmroute/internal/custommetrics"
)

// The HPA sample must be a valid autoscaling/v2 object that scales an
// LLMEndpoint on a metric the embedded API serves, with the slow
// scale-down GPU instances call for.
func TestHPASampleScalesOnAServedMetric(t *testing.T) {
	b, err := os.ReadFile("samples/autoscaling/hpa_custom_metrics.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var hpa autoscalingv2.HorizontalPodAutoscaler
	if err := yaml.UnmarshalStrict(b, &hpa); err != nil {
		t.Fatal(err)
	}
	if ref := hpa.Spec.ScaleTargetRef; ref.Kind != "LLMEndpoint" || ref.APIVersion != "serving.warmroute.dev/v1alpha1" {
		t.Errorf("scales %+v, want an LLMEndpoint", ref)
	}
	if len(hpa.Spec.Metrics) == 0 {
		t.Fatal("no metric")
	}
	for _, m := range hpa.Spec.Metrics {
		if m.Type != autoscalingv2.ObjectMetricSourceType || m.Object == nil {
			t.Errorf("metric %+v: want an Object metric on the LLMEndpoint", m)
			continue
		}
		if !slices.Contains(custommetrics.MetricNames, m.Object.Metric.Name) {
			t.Errorf("metric %s is not served by the embedded API (%v)", m.Object.Metric.Name, custommetrics.MetricNames)
		}
		if m.Object.DescribedObject != hpa.Spec.ScaleTargetRef {
			t.Errorf("metric of %+v, scaling %+v", m.Object.DescribedObject, hpa.Spec.ScaleTargetRef)
		}
	}
	b2 := hpa.Spec.Behavior
	if b2 == nil || b2.ScaleDown == nil || b2.ScaleDown.StabilizationWindowSeconds == nil || *b2.ScaleDown.StabilizationWindowSeconds < 300 {
		t.Errorf("scale-down behavior %+v: want a stabilisation window of minutes", b2)
	}
}

// prometheus-adapter, where used instead, serves the same names as the
// embedded API, so the HPA sample works with either.
func TestPrometheusAdapterServesTheEmbeddedNames(t *testing.T) {
	b, err := os.ReadFile("samples/autoscaling/prometheus_adapter_rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Rules []struct {
			Name struct {
				As string `json:"as"`
			} `json:"name"`
			Resources struct {
				Overrides map[string]struct{ Group, Resource string } `json:"overrides"`
			} `json:"resources"`
		} `json:"rules"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range cfg.Rules {
		names = append(names, r.Name.As)
		if o := r.Resources.Overrides["llmendpoint"]; o.Group != "serving.warmroute.dev" || o.Resource != "llmendpoints" {
			t.Errorf("rule %s: llmendpoint label maps to %+v, want llmendpoints.serving.warmroute.dev", r.Name.As, o)
		}
	}
	slices.Sort(names)
	want := slices.Sorted(slices.Values(custommetrics.MetricNames))
	if !slices.Equal(names, want) {
		t.Errorf("adapter serves %v, the embedded API %v", names, want)
	}
}

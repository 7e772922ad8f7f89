package node

import (
	"encoding/json"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/warmroute/warmroute/internal/custommetrics"
)

// autoscaleOnCustomMetrics puts load on the endpoint (one instance) and an
// HorizontalPodAutoscaler on its scale subresource that reads the
// operator's custom metrics API, served from the manager pod through the
// aggregation layer; the HPA must read the metric and scale the endpoint
// up.
func autoscaleOnCustomMetrics(ctx SpecContext) {
	Expect(endpointPods(ctx, endpointName, "vllm")).To(HaveLen(1), "the endpoint starts with one instance")
	startLoadgen(ctx, "loadgen-hpa", endpointName, "-model="+modelName, "-workers=8")

	// The metric, as the HPA controller reads it.
	path := fmt.Sprintf("/apis/custom.metrics.k8s.io/v1beta2/namespaces/%s/llmendpoints.serving.warmroute.dev/%s/%s",
		endpointNamespace, endpointName, custommetrics.MetricInFlightPerInstance)
	start := time.Now()
	Eventually(func(g Gomega) {
		raw, err := kube.RESTClient().Get().AbsPath(path).DoRaw(ctx)
		g.Expect(err).NotTo(HaveOccurred(), string(raw))
		var list struct {
			Items []struct {
				Value resource.Quantity `json:"value"`
			} `json:"items"`
		}
		g.Expect(json.Unmarshal(raw, &list)).To(Succeed(), string(raw))
		g.Expect(list.Items).To(HaveLen(1))
		g.Expect(list.Items[0].Value.AsApproximateFloat64()).To(BeNumerically(">", 1), "requests in flight per instance under 8 workers")
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	AddReportEntry("custom metric above target after", time.Since(start).Round(100*time.Millisecond).String())

	target := autoscalingv2.CrossVersionObjectReference{APIVersion: "serving.warmroute.dev/v1alpha1", Kind: "LLMEndpoint", Name: endpointName}
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: endpointName, Namespace: endpointNamespace},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: target,
			MinReplicas:    ptr.To[int32](1),
			MaxReplicas:    2,
			Metrics: []autoscalingv2.MetricSpec{{
				Type: autoscalingv2.ObjectMetricSourceType,
				Object: &autoscalingv2.ObjectMetricSource{
					DescribedObject: target,
					Metric:          autoscalingv2.MetricIdentifier{Name: custommetrics.MetricInFlightPerInstance},
					Target:          autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: ptr.To(resource.MustParse("1"))},
				},
			}},
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{
				ScaleUp: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To[int32](0)},
			},
		},
	}
	start = time.Now()
	_, err := kube.AutoscalingV2().HorizontalPodAutoscalers(endpointNamespace).Create(ctx, hpa, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func(ctx SpecContext) {
		_ = kube.AutoscalingV2().HorizontalPodAutoscalers(endpointNamespace).Delete(ctx, endpointName, metav1.DeleteOptions{})
	})
	Eventually(func(g Gomega) {
		got, err := kube.AutoscalingV2().HorizontalPodAutoscalers(endpointNamespace).Get(ctx, endpointName, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		var active *autoscalingv2.HorizontalPodAutoscalerCondition
		for i, c := range got.Status.Conditions {
			if c.Type == autoscalingv2.ScalingActive {
				active = &got.Status.Conditions[i]
			}
		}
		g.Expect(active).NotTo(BeNil(), "no ScalingActive condition yet")
		g.Expect(active.Status).To(Equal(corev1.ConditionTrue), "%s: %s", active.Reason, active.Message)
		g.Expect(got.Status.CurrentMetrics).NotTo(BeEmpty())
		g.Expect(got.Status.DesiredReplicas).To(BeEquivalentTo(2))
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	AddReportEntry("HPA read the metric and chose 2 replicas after", time.Since(start).Round(100*time.Millisecond).String())

	// The HPA wrote the endpoint's scale subresource; the operator follows.
	Eventually(func(g Gomega) {
		g.Expect(endpointPods(ctx, endpointName, "vllm")).To(HaveLen(2))
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	AddReportEntry("second instance Running after", time.Since(start).Round(100*time.Millisecond).String())
}

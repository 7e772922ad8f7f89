package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
	"k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"
	custommetricsclient "k8s.io/metrics/pkg/client/custom_metrics"
	"k8s.io/utils/ptr"

	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/internal/custommetrics"
)

// An endpoint scaled by a real HorizontalPodAutoscaler (the controller in
// kube-controller-manager) on the operator's own custom metrics API,
// reached through the API server's aggregation layer: nothing else serves
// metrics in this cluster.
const (
	hpaEndpoint = "hpa-load"
	hpaModel    = "hpa-llama"
	// hpaTarget is the in-flight requests per instance the HPA aims at.
	hpaTarget = 2
	// Closed-loop clients: each keeps one request in flight, so the load
	// per instance is clients over instances.
	heavyClients = 16
	lightClients = 2
)

var _ = Describe("A HorizontalPodAutoscaler on the embedded custom metrics API", Ordered, func() {
	var (
		ctx     context.Context
		service *http.Client
	)

	BeforeAll(func() {
		ctx = suiteCtx
		By("creating an LLMEndpoint of 2 instances")
		pods := serveEndpoint(ctx, prefixAwareEndpoint(hpaEndpoint, hpaModel, 2))
		service = pods.Client()
		waitRoutable(ctx, hpaEndpoint, 2)
	})

	It("serves the endpoint's metrics through the API server", func() {
		path := fmt.Sprintf("/apis/custom.metrics.k8s.io/v1beta2/namespaces/%s/llmendpoints.serving.warmroute.dev/%s/%s",
			namespace, hpaEndpoint, custommetrics.MetricInFlightPerInstance)
		By("kubectl get --raw " + path)
		Eventually(func(g Gomega) {
			out, err := exec.CommandContext(ctx, env.Kubectl(), "--kubeconfig", env.Cluster.KubeconfigPath, "get", "--raw", path).CombinedOutput()
			g.Expect(err).NotTo(HaveOccurred(), "%s", out)
			var list v1beta2.MetricValueList
			g.Expect(json.Unmarshal(out, &list)).To(Succeed())
			g.Expect(list.Items).To(HaveLen(1))
			g.Expect(list.Items[0].DescribedObject.Kind).To(Equal("LLMEndpoint"))
			g.Expect(list.Items[0].DescribedObject.Name).To(Equal(hpaEndpoint))
			g.Expect(list.Items[0].Metric.Name).To(Equal(custommetrics.MetricInFlightPerInstance))
		}).WithTimeout(20 * time.Second).Should(Succeed())

		By("the custom metrics client the HPA controller uses")
		dc, err := discovery.NewDiscoveryClientForConfig(env.Cluster.Config)
		Expect(err).NotTo(HaveOccurred())
		mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
		cm := custommetricsclient.NewForConfig(env.Cluster.Config, mapper, custommetricsclient.NewAvailableAPIsGetter(dc))
		gk := schema.GroupKind{Group: servingv1alpha1.GroupVersion.Group, Kind: "LLMEndpoint"}
		for _, m := range []string{custommetrics.MetricInFlightPerInstance, custommetrics.MetricWaitingPerInstance} {
			v, err := cm.NamespacedMetrics(namespace).GetForObject(gk, hpaEndpoint, m, labels.Everything())
			Expect(err).NotTo(HaveOccurred(), m)
			Expect(v.Value.MilliValue()).To(BeZero(), "%s of an idle endpoint", m)
		}
	})

	It("scales the endpoint from 2 to 4 instances under load and back to 2, without a failed request", func() {
		hpa := inFlightHPA(hpaEndpoint, 2, 4, hpaTarget)
		// Short windows for the test; config/samples has those for GPU
		// instances that take minutes to start.
		hpa.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{
			ScaleUp: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To(int32(0))},
			ScaleDown: &autoscalingv2.HPAScalingRules{
				StabilizationWindowSeconds: ptr.To(int32(10)),
				Policies:                   []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 2, PeriodSeconds: 10}},
			},
		}
		Expect(env.Client.Create(ctx, hpa)).To(Succeed())
		DeferCleanup(func() { _ = env.Client.Delete(context.Background(), hpa) })

		By("the HPA reads the metric while the endpoint is idle")
		Eventually(hpaCondition(ctx, autoscalingv2.ScalingActive)).WithTimeout(30 * time.Second).Should(Equal("True"))
		Expect(getEndpoint(ctx, hpaEndpoint).Spec.Replicas).To(HaveValue(BeEquivalentTo(2)))

		system := longText("hpa-load", 2000)
		send := func(ctx context.Context, g, n int) reply {
			return chatWith(ctx, service, "http://"+hpaEndpoint+"."+namespace+".svc", hpaModel, system,
				fmt.Sprintf("Question %d from client %d. ", n, g), "", 512)
		}
		heavy := startTraffic(ctx, send, heavyClients, heavyClients)
		defer heavy.stop()

		By(fmt.Sprintf("%d clients: the HPA raises the endpoint to 4 instances", heavyClients))
		Eventually(func() int32 { return ptr.Deref(getEndpoint(ctx, hpaEndpoint).Spec.Replicas, 0) }).
			WithTimeout(90 * time.Second).WithPolling(500 * time.Millisecond).Should(BeEquivalentTo(4))
		waitRoutable(ctx, hpaEndpoint, 4)
		By("kubectl get llme shows the load")
		Eventually(func(g Gomega) {
			out, err := exec.CommandContext(ctx, env.Kubectl(), "--kubeconfig", env.Cluster.KubeconfigPath,
				"get", "llme", hpaEndpoint, "--namespace", namespace).CombinedOutput()
			g.Expect(err).NotTo(HaveOccurred(), "%s", out)
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			g.Expect(lines).To(HaveLen(2))
			g.Expect(lines[0]).To(ContainSubstring("LOAD"))
			g.Expect(lines[0]).To(ContainSubstring("HIT%"))
			load := getEndpoint(ctx, hpaEndpoint).Status.Load
			g.Expect(load).NotTo(BeNil())
			g.Expect(strings.Fields(lines[1])).To(ContainElement(load.InFlightPerInstance))
			g.Expect(load.PrefixCacheHitPercent).NotTo(BeNil(), "a hit rate once prompts were served")
			GinkgoWriter.Printf("under load:\n%s\n", out)
		}).WithTimeout(30 * time.Second).WithPolling(time.Second).Should(Succeed())

		By(fmt.Sprintf("%d clients: after the stabilisation window the HPA takes it back to 2", lightClients))
		light := startTraffic(ctx, send, lightClients, lightClients)
		defer light.stop()
		heavy.stop()
		Eventually(func() int32 { return ptr.Deref(getEndpoint(ctx, hpaEndpoint).Spec.Replicas, 0) }).
			WithTimeout(90 * time.Second).WithPolling(500 * time.Millisecond).Should(BeEquivalentTo(2))
		waitRoutable(ctx, hpaEndpoint, 2)
		By("the leaving instances drain and stop while the light load goes on")
		Eventually(func() int {
			n := 0
			for id := range env.Agent.Backends() {
				if strings.HasPrefix(id, hpaEndpoint+"-vllm-") {
					n++
				}
			}
			return n
		}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Equal(2))
		light.stop()
		GinkgoWriter.Printf("HPA scale 2→4→2: %d heavy and %d light requests, replies by instance %v and %v\n",
			heavy.sent.Load(), light.sent.Load(), heavy.servedBy(), light.servedBy())
		Expect(heavy.failureList()).To(BeEmpty())
		Expect(light.failureList()).To(BeEmpty())
		Expect(heavy.sent.Load()).To(BeNumerically(">", heavyClients))

		out, err := exec.CommandContext(ctx, env.Kubectl(), "--kubeconfig", env.Cluster.KubeconfigPath,
			"describe", "hpa", hpaEndpoint, "--namespace", namespace).CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "%s", out)
		GinkgoWriter.Printf("%s\n", out)
		Expect(string(out)).To(MatchRegexp(`ScalingActive\s+True`))
	})
})

// hpaCondition reads a condition of the test's HPA.
func hpaCondition(ctx context.Context, typ autoscalingv2.HorizontalPodAutoscalerConditionType) func() string {
	return func() string {
		var hpa autoscalingv2.HorizontalPodAutoscaler
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: hpaEndpoint}, &hpa); err != nil {
			return err.Error()
		}
		for _, c := range hpa.Status.Conditions {
			if c.Type == typ {
				return string(c.Status)
			}
		}
		return "absent"
	}
}

// inFlightHPA is an HPA of the endpoint on the operator's in-flight
// requests per instance, aiming at target.
func inFlightHPA(endpoint string, minReplicas, maxReplicas int32, target int64) *autoscalingv2.HorizontalPodAutoscaler {
	ref := autoscalingv2.CrossVersionObjectReference{APIVersion: servingv1alpha1.GroupVersion.String(), Kind: "LLMEndpoint", Name: endpoint}
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: endpoint, Namespace: namespace},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: ref,
			MinReplicas:    ptr.To(minReplicas),
			MaxReplicas:    maxReplicas,
			Metrics: []autoscalingv2.MetricSpec{{
				Type: autoscalingv2.ObjectMetricSourceType,
				Object: &autoscalingv2.ObjectMetricSource{
					DescribedObject: ref,
					Metric:          autoscalingv2.MetricIdentifier{Name: custommetrics.MetricInFlightPerInstance},
					Target:          autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: resource.NewQuantity(target, resource.DecimalSI)},
				},
			}},
		},
	}
}

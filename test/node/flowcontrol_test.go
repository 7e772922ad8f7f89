package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dto "github.com/prometheus/client_model/go"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	"github.com/warmroute/warmroute/test/promscrape"
)

// The flow control spec's endpoint: two tenants by API key share two
// instances that hold one request each.
const (
	flowEndpoint = "shared"
	flowModel    = "sim-shared"
	flowKeys     = "shared-keys"
	// floodWorkers is ten times what the fleet holds (2 instances at a
	// concurrencyThreshold of 1).
	floodWorkers = 20
	// floodMaxTokens makes each of the flood's requests take about 1.2 s
	// (the simulator decodes a token per 30 ms): the fleet serves under
	// 2 a second of them, and the flood's workers keep its queue full.
	floodMaxTokens = 40
	// floodRequestsPerMinute is the flood's rate limit once patched in.
	floodRequestsPerMinute = 30
	// steadyAnswers is how many of the steady tenant's requests the load
	// runs for: 2 workers, one request a second each.
	steadyAnswers = 40
)

// floodAndSteady runs two tenants against one endpoint through its router
// Service and its two router pods: "flood" sends ten times what the fleet
// holds, "steady" a request a second from each of two workers. The elected
// picker queues the flood behind the steady tenant (higher priority and
// weight) and refuses what its queue cannot hold with 429 or 503 and
// Retry-After; every steady request succeeds and every request is
// answered. Then a requestsPerMinute patched onto the flood's entry
// reaches the routers without a restart and answers 429 with OpenAI's
// x-ratelimit-* headers.
func floodAndSteady(ctx SpecContext) {
	apiKeys := map[string]string{"flood": newAPIKey(), "steady": newAPIKey()}
	_, err := kube.CoreV1().Secrets(endpointNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: flowKeys, Namespace: endpointNamespace},
		StringData: apiKeys,
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func(ctx SpecContext) {
		_ = kube.CoreV1().Secrets(endpointNamespace).Delete(ctx, flowKeys, metav1.DeleteOptions{})
	})

	// Flood's queue of 4 and the total of 5 make the picker refuse in all
	// three ways: a flood arrival past its 4 queued (429
	// tenant_queue_full), a queued flood request shed for a steady
	// arrival (503 queue_full), one that waited 5 s (503 queue_timeout).
	start := time.Now()
	applyEndpoint(ctx, flowEndpoint, fmt.Sprintf(`  replicas: 2
  model: {name: %s, uri: hf://sim/shared, image: %s, gpus: 0}
  routing:
    prefixAware: {concurrencyThreshold: 1}
  router:
    replicas: 2
    auth:
      mode: APIKeys
      apiKeys: {secretName: %s}
    flowControl:
      tenants:
      - {name: flood, weight: 1, priority: 0, maxQueued: 4}
      - {name: steady, weight: 4, priority: 10, maxQueued: 10}
      queueTimeout: 5s
      maxQueued: 5
`, flowModel, vllmImage, flowKeys))
	routers := routerPods(ctx, flowEndpoint)
	Expect(routers).To(HaveLen(2))
	doc := waitRoutersServe(ctx, routers)
	Expect(doc.FlowControl).NotTo(BeNil(), "flow control in the routing document")
	AddReportEntry("shared endpoint serving after", time.Since(start).Round(100*time.Millisecond).String())

	startLoadgen(ctx, "flood", flowEndpoint, "-model="+flowModel, "-key="+apiKeys["flood"],
		fmt.Sprintf("-workers=%d", floodWorkers), fmt.Sprintf("-max-tokens=%d", floodMaxTokens),
		// A client that backs off a little, so that the refused workers
		// press on the queue without spinning.
		"-refusal-pause=500ms")
	startLoadgen(ctx, "steady", flowEndpoint, "-model="+flowModel, "-key="+apiKeys["steady"],
		"-workers=2", "-max-tokens=8", "-interval=1s")

	// The queue is seen while it holds requests: the picker's gauge,
	// summed over both router pods (only the picker records it), is
	// sampled while the steady tenant's answers come in.
	var floodQueued, steadyQueued float64
	Eventually(func(g Gomega) {
		queued := flowSeries(ctx, g, routers, "warmroute_router_flow_queued", "tenant")
		floodQueued = max(floodQueued, queued["flood"])
		steadyQueued = max(steadyQueued, queued["steady"])
		s := loadgenStats(ctx, g, "steady", "GET", "stats")
		g.Expect(s.OK+s.Failed+s.Unanswered).To(BeNumerically(">=", steadyAnswers), "steady requests answered")
	}).WithContext(ctx).WithTimeout(3*time.Minute).WithPolling(500*time.Millisecond).Should(Succeed(), describePods(ctx, endpointNamespace))
	flood := loadgenStats(ctx, Default, "flood", "POST", "stop")
	steady := loadgenStats(ctx, Default, "steady", "POST", "stop")
	AddReportEntry("flood answers", answerSummary(flood))
	AddReportEntry("steady answers", answerSummary(steady))
	AddReportEntry("most queued at one scrape", fmt.Sprintf("flood %.0f, steady %.0f", floodQueued, steadyQueued))

	// Every request answered, and every steady one a success.
	Expect(flood.Unanswered).To(BeZero(), "flood requests without an answer: %v", flood.Failures)
	Expect(steady.Unanswered).To(BeZero(), "steady requests without an answer: %v", steady.Failures)
	Expect(steady.Failed).To(BeZero(), "steady requests refused: %v", steady.Failures)
	Expect(steady.OK).To(BeNumerically(">=", steadyAnswers))

	// The flood is served in part and refused in part, only in the ways
	// the queue refuses, each with Retry-After.
	Expect(flood.Answers).To(HaveKey("200"), "the flood is served too")
	refused := int64(0)
	for kind, a := range flood.Answers {
		if kind == "200" {
			continue
		}
		Expect(kind).To(BeElementOf("429 tenant_queue_full", "503 queue_full", "503 queue_timeout"), "flood answered %s (%d times): %v", kind, a.Count, flood.Failures)
		Expect(a.FirstHeaders.Get("Retry-After")).NotTo(BeEmpty(), "Retry-After of %s", kind)
		refused += a.Count
	}
	Expect(refused).To(BeNumerically(">", 0), "flood requests refused by the queue: %s", answerSummary(flood))
	Expect(flood.RefusedWithoutRetryAfter).To(BeZero(), "flood refusals without Retry-After")
	Expect(floodQueued).To(BeNumerically(">", 0), "flood requests queued at some scrape")

	// The picker's own account agrees: the flood queued and shed, the
	// steady tenant never shed.
	wait := flowHistogram(ctx, Default, routers, "warmroute_router_flow_queue_wait_seconds")
	shed := flowSeries(ctx, Default, routers, "warmroute_router_flow_shed_total", "tenant")
	AddReportEntry("picker: queue wait (count, mean s)", fmt.Sprintf("flood %d, %.2f; steady %d, %.2f",
		wait["flood"].GetSampleCount(), meanSeconds(wait["flood"]), wait["steady"].GetSampleCount(), meanSeconds(wait["steady"])))
	AddReportEntry("picker: shed", fmt.Sprintf("%v", shed))
	Expect(wait["flood"].GetSampleCount()).To(BeNumerically(">", 0), "flood requests that waited in the queue")
	Expect(shed["flood"]).To(BeNumerically(">", 0), "flood requests shed")
	Expect(shed["steady"]).To(BeZero(), "steady requests shed")
	// And it counts each refusal the flood's client saw under its reason.
	for reason, kind := range map[string]string{"tenant_queue_full": "429 tenant_queue_full", "pressure": "503 queue_full", "deadline": "503 queue_timeout"} {
		Expect(flowSum(ctx, Default, routers, "warmroute_router_flow_shed_total", map[string]string{"tenant": "flood", "reason": reason})).
			To(BeEquivalentTo(flood.Answers[kind].Count), "flood shed for %s, against its client's %s answers", reason, kind)
	}
	// Both router pods took requests from the Service: the followers'
	// requests were queued by the picker as well.
	for _, r := range routers {
		fams := routerMetrics(ctx, Default, r.Name)
		Expect(promscrape.Sum(fams["warmroute_router_requests_total"], nil)).To(BeNumerically(">", 0), "requests through %s", r.Name)
	}

	// The operator's scraper reads the same counters into the endpoint's
	// status: kubectl shows the shedding, and names the flood.
	Eventually(func(g Gomega) {
		out, err := kubectl(ctx, "", "-n", endpointNamespace, "get", "llmendpoint", flowEndpoint, "-o", "jsonpath={.status.load.shedTenants[0].name} {.status.load.shedPerMinute}")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(strings.Fields(out)).To(HaveLen(2), "shedTenants and shedPerMinute in the status: %q", out)
		g.Expect(strings.Fields(out)[0]).To(Equal("flood"))
		wide, err := kubectl(ctx, "", "-n", endpointNamespace, "get", "llmendpoint", flowEndpoint, "-o", "wide")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(wide).To(ContainSubstring("SHED/MIN"))
		AddReportEntry("status: shed tenant, per minute", out)
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())

	// A rate limit, patched in: the routers reload the document (no
	// restart) and hold the flood to 30 requests a minute.
	_, err = kubectl(ctx, "", "-n", endpointNamespace, "patch", "llmendpoint", flowEndpoint, "--type=json", "-p",
		fmt.Sprintf(`[{"op": "add", "path": "/spec/router/flowControl/tenants/0/requestsPerMinute", "value": %d}]`, floodRequestsPerMinute))
	Expect(err).NotTo(HaveOccurred())
	Eventually(func(g Gomega) {
		doc := routingDocument(ctx, g, flowEndpoint)
		g.Expect(doc.FlowControl).NotTo(BeNil())
		g.Expect(doc.FlowControl.Tenants["flood"].RequestsPerMinute).To(BeEquivalentTo(floodRequestsPerMinute))
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
	waitRoutersServe(ctx, routers)
	expectSameRouters(ctx, routers)

	start = time.Now()
	startLoadgen(ctx, "flood-limited", flowEndpoint, "-model="+flowModel, "-key="+apiKeys["flood"],
		"-workers=2", "-max-tokens=1", "-refusal-pause=200ms")
	Eventually(func(g Gomega) {
		s := loadgenStats(ctx, g, "flood-limited", "GET", "stats")
		g.Expect(s.Answers).To(HaveKey("429 rate_limit_exceeded"))
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
	limited := loadgenStats(ctx, Default, "flood-limited", "POST", "stop")
	AddReportEntry("flood at 30 requests a minute", fmt.Sprintf("%s in %s", answerSummary(limited), time.Since(start).Round(time.Second)))
	Expect(limited.Unanswered).To(BeZero(), "requests without an answer: %v", limited.Failures)
	for kind := range limited.Answers {
		Expect(kind).To(BeElementOf("200", "429 rate_limit_exceeded"), "answers: %s", answerSummary(limited))
	}
	// Within the first minute, at most the minute's 30 and what refilled
	// while the client ran (half a request a second).
	Expect(limited.OK).To(BeNumerically("<=", floodRequestsPerMinute+int64(time.Since(start).Seconds())/2+1))
	h := limited.Answers["429 rate_limit_exceeded"].FirstHeaders
	Expect(h.Get("x-ratelimit-limit-requests")).To(Equal(fmt.Sprint(floodRequestsPerMinute)))
	Expect(h.Get("x-ratelimit-remaining-requests")).To(Equal("0"))
	Expect(h.Get("x-ratelimit-reset-requests")).NotTo(BeEmpty())
	Expect(h.Get("Retry-After")).NotTo(BeEmpty())
	Expect(flowSum(ctx, Default, routers, "warmroute_router_flow_rate_limited_total", map[string]string{"tenant": "flood", "limit": "requests"})).
		To(BeEquivalentTo(limited.Answers["429 rate_limit_exceeded"].Count), "flood requests rate-limited by the picker's count, against its client's")
	Expect(flowSum(ctx, Default, routers, "warmroute_router_flow_rate_limited_total", map[string]string{"tenant": "steady"})).To(BeZero())
}

// newAPIKey is a random API key of 48 hex characters.
func newAPIKey() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// waitRoutersServe waits until every router serves the endpoint's current
// routing document and returns it.
func waitRoutersServe(ctx context.Context, routers []corev1.Pod) *routingv1alpha1.Document {
	GinkgoHelper()
	var doc *routingv1alpha1.Document
	Eventually(func(g Gomega) {
		doc = routingDocument(ctx, g, flowEndpoint)
		for _, r := range routers {
			fams := routerMetrics(ctx, g, r.Name)
			g.Expect(promscrape.Sum(fams["warmroute_router_config_generation"], nil)).To(BeEquivalentTo(doc.Generation), "config_generation of %s", r.Name)
		}
	}).WithContext(ctx).WithTimeout(2*time.Minute).WithPolling(time.Second).Should(Succeed(), describePods(ctx, endpointNamespace))
	return doc
}

// flowSeries sums a flow metric over the router pods by one label: only
// the elected picker records flow control, the others export nothing or
// zeros.
func flowSeries(ctx context.Context, g Gomega, routers []corev1.Pod, name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, r := range routers {
		for k, v := range promscrape.ByLabel(routerMetrics(ctx, g, r.Name)[name], label) {
			out[k] += v
		}
	}
	return out
}

// flowSum sums a flow metric's samples with the given labels over the
// router pods.
func flowSum(ctx context.Context, g Gomega, routers []corev1.Pod, name string, want map[string]string) float64 {
	var sum float64
	for _, r := range routers {
		sum += promscrape.Sum(routerMetrics(ctx, g, r.Name)[name], want)
	}
	return sum
}

// flowHistogram sums a histogram's count and sum over the router pods by
// tenant.
func flowHistogram(ctx context.Context, g Gomega, routers []corev1.Pod, name string) map[string]*dto.Histogram {
	out := map[string]*dto.Histogram{}
	for _, r := range routers {
		for _, m := range routerMetrics(ctx, g, r.Name)[name].GetMetric() {
			tenant := promscrape.Labels(m)["tenant"]
			h := out[tenant]
			if h == nil {
				h = &dto.Histogram{SampleCount: new(uint64), SampleSum: new(float64)}
				out[tenant] = h
			}
			*h.SampleCount += m.GetHistogram().GetSampleCount()
			*h.SampleSum += m.GetHistogram().GetSampleSum()
		}
	}
	return out
}

func meanSeconds(h *dto.Histogram) float64 {
	if h.GetSampleCount() == 0 {
		return 0
	}
	return h.GetSampleSum() / float64(h.GetSampleCount())
}

// answerSummary is a load client's answers for the report:
// "200: 31 (mean 2.10 s, max 4.80 s); 429 tenant_queue_full: 120 …".
func answerSummary(s loadStats) string {
	var parts []string
	for _, kind := range slices.Sorted(maps.Keys(s.Answers)) {
		a := s.Answers[kind]
		parts = append(parts, fmt.Sprintf("%s: %d (mean %.2f s, max %.2f s)", kind, a.Count, a.TotalSeconds/float64(a.Count), a.MaxSeconds))
	}
	if s.Unanswered > 0 {
		parts = append(parts, fmt.Sprintf("unanswered: %d", s.Unanswered))
	}
	return strings.Join(parts, "; ")
}

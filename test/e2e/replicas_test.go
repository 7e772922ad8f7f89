package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/test/harness"
	"github.com/warmroute/warmroute/test/vllmsim"
	"github.com/warmroute/warmroute/test/workload"
)

// An endpoint whose router Deployment keeps the operator's default replica
// count, served by one router process per router pod on the pod's own IP.
const (
	sharedEndpoint  = "shared-view"
	sharedModel     = "shared-llama"
	sharedInstances = 4
	// sharedThreshold is low so that a handful of clients overrun it.
	sharedThreshold = 4
	// serviceURL is what clients name; the spreader sends each request to
	// a ready router pod at random, as the Service would.
	serviceURL = "http://" + sharedEndpoint + "." + namespace + ".svc"
)

var _ = Describe("Router replicas of the default router Deployment", Ordered, func() {
	var (
		ctx     context.Context
		pods    *harness.RouterPods
		routers []*harness.Router
		service *http.Client
		sims    []*vllmsim.Server
	)

	BeforeAll(func() {
		ctx = suiteCtx
		ep := &servingv1alpha1.LLMEndpoint{
			ObjectMeta: metav1.ObjectMeta{Name: sharedEndpoint, Namespace: namespace},
			Spec: servingv1alpha1.LLMEndpointSpec{
				Replicas: ptr.To(int32(sharedInstances)),
				Model: servingv1alpha1.ModelSpec{
					Name: sharedModel, URI: "meta-llama/Llama-3.1-8B-Instruct", MaxModelLen: ptr.To(int32(16384)),
				},
				Routing: servingv1alpha1.RoutingSpec{
					Strategy: servingv1alpha1.RoutingStrategyPrefixAware,
					PrefixAware: servingv1alpha1.PrefixAwareSpec{
						PrefixLength:         ptr.To(int32(16384)),
						ConcurrencyThreshold: ptr.To(int32(sharedThreshold)),
					},
				},
				// spec.router left empty: the default replica count.
			},
		}
		By("creating an LLMEndpoint with the default router replicas")
		Expect(env.Client.Create(ctx, ep)).To(Succeed())
		DeferCleanup(func() { _ = env.Client.Delete(context.Background(), ep) })
		Eventually(available(ctx, sharedEndpoint)).WithTimeout(90 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

		var dep appsv1.Deployment
		Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: sharedEndpoint + "-router"}, &dep)).To(Succeed())
		replicas := int(ptr.Deref(dep.Spec.Replicas, 1))
		Expect(replicas).To(BeNumerically(">=", 2), "the default router Deployment has several replicas")

		By(fmt.Sprintf("running a router process for each of the %d router pods", replicas))
		var err error
		pods, err = env.StartRouterPods(ctx, sharedEndpoint, "--enable-debug-route")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(pods.Stop)
		routers, err = pods.WaitReady(ctx, replicas, 60*time.Second)
		Expect(err).NotTo(HaveOccurred())
		service = pods.Client()

		Eventually(func(g Gomega) {
			doc, err := routingDoc(ctx, sharedEndpoint)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(doc.Instances).To(HaveLen(sharedInstances))
			all := env.Sims.All()
			sims = sims[:0]
			for _, in := range doc.Instances {
				g.Expect(simulated(in.ID)).To(BeTrue(), "no simulator serves instance %s yet; pod agent errors: %v", in.ID, env.Agent.Errors())
				g.Expect(all).To(HaveKey(in.ID))
				sims = append(sims, all[in.ID])
			}
			for _, r := range routers {
				g.Expect(mustMetric(r, "warmroute_router_config_generation", nil)).To(BeNumerically(">=", float64(doc.Generation)))
			}
		}).WithTimeout(30 * time.Second).Should(Succeed())
	})

	It("find each other through the router Service's EndpointSlices", func() {
		Eventually(func(g Gomega) {
			for _, r := range routers {
				g.Expect(mustMetric(r, "warmroute_router_peers", map[string]string{"state": "fresh"})).
					To(BeEquivalentTo(len(routers)-1), "router %s", r.URL)
				g.Expect(mustMetric(r, "warmroute_router_peers", map[string]string{"state": "stale"})).
					To(BeZero(), "router %s", r.URL)
			}
		}).WithTimeout(20 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	})

	It("agree on where support-bot traffic goes, each seeing a random part of it", func() {
		w := workload.SupportBot(workload.SupportBotConfig{Seed: 12, Users: 120, Turns: 4, ReplyTokens: 40})
		opts := workload.Options{Concurrency: 8, TimeScale: timeScale, Model: sharedModel, Client: service}
		results, err := workload.Run(ctx, serviceURL, w.Requests, opts)
		Expect(err).NotTo(HaveOccurred())
		failed := 0
		for _, r := range results {
			if !r.OK() {
				failed++
			}
		}
		Expect(failed).To(BeZero(), "support-bot requests failed through the router Service")
		received := receivedPerRouter(routers)
		GinkgoWriter.Printf("support-bot: %d requests, received per router replica %v\n", len(results), received)
		for i, n := range received {
			Expect(n).To(BeNumerically(">=", len(results)/(4*len(routers))), "replica %d saw its part of the traffic: %v", i, received)
		}
		// Each replica sent the requests it placed on an instance another
		// replica owns to that owner, at the pod IP and client port it
		// advertises; every one arrived.
		var forwarded, arrived float64
		for _, r := range routers {
			forwarded += mustMetric(r, "warmroute_router_forwards_total", map[string]string{"result": "forwarded"})
			arrived += mustMetric(r, "warmroute_router_forwards_total", map[string]string{"result": "received"})
		}
		GinkgoWriter.Printf("support-bot: %v requests forwarded to the owner of their instance, %v arrived\n", forwarded, arrived)
		Expect(forwarded).To(BeNumerically(">", 0), "no request was forwarded to its instance's owner")
		Expect(arrived).To(Equal(forwarded))

		// Ask every replica where a sample of the same requests would go
		// now; reports are pulled every 100 ms, so the picture settles
		// within a few hundred milliseconds of the last request.
		var sample []workload.Request
		for i := 0; i < len(w.Requests); i += 2 {
			sample = append(sample, w.Requests[i])
		}
		var agreement float64
		var disagreed []string
		Eventually(func(g Gomega) {
			same := 0
			disagreed = disagreed[:0]
			for i, req := range sample {
				body, err := workload.Body(req, workload.Options{Model: sharedModel})
				g.Expect(err).NotTo(HaveOccurred())
				answers := map[string]bool{}
				for _, r := range routers {
					inst, err := debugRoute(ctx, r, body)
					g.Expect(err).NotTo(HaveOccurred())
					answers[inst] = true
				}
				if len(answers) == 1 {
					same++
				} else if len(disagreed) < 5 {
					disagreed = append(disagreed, fmt.Sprintf("%d (%s turn %d): %v", i, req.Session, req.Turn, answers))
				}
			}
			agreement = float64(same) / float64(len(sample))
			g.Expect(agreement).To(BeNumerically(">=", 0.98), "first disagreements: %v", disagreed)
		}).WithTimeout(5 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())
		GinkgoWriter.Printf("support-bot: the %d replicas agreed on %.2f%% of %d sampled requests\n",
			len(routers), 100*agreement, len(sample))
	})

	It("hold concurrencyThreshold per instance, whatever the number of replicas", func() {
		reasons := []string{"concurrency_threshold", "all_busy", "token_load"}
		spills := func() map[string]float64 {
			out := map[string]float64{}
			for _, reason := range reasons {
				for _, r := range routers {
					out[reason] += mustMetric(r, "warmroute_router_spills_total", map[string]string{"reason": reason})
				}
			}
			return out
		}
		spilledBefore := spills()
		system := longText("shared-view", 6000)
		// Short requests over many prefixes keep the hot prefix a small
		// share of decisions (not replicated on purpose), while its long
		// completions hold more requests in flight than the threshold.
		// Together they stay below the fleet's room (instances ×
		// threshold), where the bound is promised.
		const hotClients, bgClients = 2*sharedThreshold + 1, 2
		Expect(hotClients + bgClients).To(BeNumerically("<", sharedInstances*sharedThreshold))
		bg := startTraffic(ctx, func(ctx context.Context, g, n int) reply {
			return chatWith(ctx, service, serviceURL, sharedModel, system, fmt.Sprintf("Background question %d. ", g), "", 4)
		}, 400, bgClients)
		defer bg.stop()
		hot := startTraffic(ctx, func(ctx context.Context, g, n int) reply {
			return chatWith(ctx, service, serviceURL, sharedModel, system, "The hot question everybody asks about delivery. ", "", 256)
		}, 1, hotClients)
		defer hot.stop()

		// The simulators' own gauges under vLLM's names: requests in the
		// batch plus requests queued, as an engine counts them. Every
		// sample of the whole window is kept, so that a failure reports
		// how far and how often the bound was overrun.
		bound := sharedThreshold + len(routers)
		peak := map[string]int{}
		samples, over := 0, 0
		Consistently(func(g Gomega) {
			for _, s := range sims {
				st, err := vllmsim.ScrapeStats(ctx, metricsHTTP, s.URL())
				g.Expect(err).NotTo(HaveOccurred())
				n := st.Running + st.Waiting
				peak[s.InstanceID()] = max(peak[s.InstanceID()], n)
				samples++
				if n > bound {
					over++
				}
			}
		}).WithTimeout(6 * time.Second).WithPolling(10 * time.Millisecond).Should(Succeed())
		hot.stop()
		bg.stop()
		Expect(hot.failureList()).To(BeEmpty())
		Expect(bg.failureList()).To(BeEmpty())
		spilled := spills()
		for reason := range spilled {
			spilled[reason] -= spilledBefore[reason]
		}
		top := 0
		for _, n := range peak {
			top = max(top, n)
		}
		GinkgoWriter.Printf("threshold %d, %d router replicas, %d hot + %d background clients: most in flight per instance %v (bound %d; %d of %d samples over it, every 10 ms); %d hot and %d background requests, hot replies by instance %v; spills %v\n",
			sharedThreshold, len(routers), hotClients, bgClients, peak, bound, over, samples, hot.sent.Load(), bg.sent.Load(), hot.servedBy(), spilled)
		Expect(spilled["concurrency_threshold"]).To(BeNumerically(">", 0), "the hot prefix overran the threshold")
		Expect(top).To(BeNumerically(">=", sharedThreshold), "an instance was filled up to the threshold: %v", peak)
		Expect(top).To(BeNumerically("<=", bound), "most requests in flight on one instance (%d of %d samples over the bound)", over, samples)
	})
})

var metricsHTTP = &http.Client{Timeout: 5 * time.Second}

// debugRoute asks a router where it would send body now.
func debugRoute(ctx context.Context, r *harness.Router, body []byte) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.MetricsURL+"/debug/route", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := metricsHTTP.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s/debug/route: %s", r.MetricsURL, resp.Status)
	}
	var out struct {
		Instance string `json:"instance"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", fmt.Errorf("%s/debug/route: %w", r.MetricsURL, err)
	}
	return out.Instance, nil
}

// receivedPerRouter is how many requests each router received from the
// Service, from its own counters: those it decided, less those a peer
// forwarded to it, plus those it forwarded to their instance's owner.
func receivedPerRouter(routers []*harness.Router) []int {
	out := make([]int, len(routers))
	for i, r := range routers {
		decided := mustMetric(r, "warmroute_router_requests_total", nil)
		in := mustMetric(r, "warmroute_router_forwards_total", map[string]string{"result": "received"})
		sent := mustMetric(r, "warmroute_router_forwards_total", map[string]string{"result": "forwarded"})
		out[i] = int(decided - in + sent)
	}
	return out
}

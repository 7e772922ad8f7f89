package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/router/picker"
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
		pods, err = env.StartRouterPods(ctx, sharedEndpoint)
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

	It("elect one picker through the endpoint's Lease", func() {
		Eventually(func(g Gomega) {
			g.Expect(leaderOf(routers)).To(BeNumerically(">=", 0), "no router leads, or several do")
			for _, r := range routers {
				g.Expect(mustMetric(r, "warmroute_router_picker_known", nil)).To(BeEquivalentTo(1), "router %s knows no picker yet", r.URL)
			}
		}).WithTimeout(20 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		var lease coordinationv1.Lease
		Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: sharedEndpoint + "-router"}, &lease)).To(Succeed())
		leader := routers[leaderOf(routers)]
		Expect(ptr.Deref(lease.Spec.HolderIdentity, "")).To(HaveSuffix("@"+leader.PickAddr), "the Lease names the router that leads")
	})

	It("decide every request once, on the picker, each replica seeing a random part of the traffic", func() {
		w := workload.SupportBot(workload.SupportBotConfig{Seed: 12, Users: 120, Turns: 4, ReplyTokens: 40})
		opts := workload.Options{Concurrency: 8, TimeScale: timeScale, Model: sharedModel, Client: service}
		before := picksBySource(routers)
		results, err := workload.Run(ctx, serviceURL, w.Requests, opts)
		Expect(err).NotTo(HaveOccurred())
		failed := 0
		for _, r := range results {
			if !r.OK() {
				failed++
			}
		}
		Expect(failed).To(BeZero(), "support-bot requests failed through the router Service")
		received := make([]int, len(routers))
		for i, r := range routers {
			received[i] = int(mustMetric(r, "warmroute_router_requests_total", nil))
		}
		GinkgoWriter.Printf("support-bot: %d requests, received per router replica %v\n", len(results), received)
		for i, n := range received {
			Expect(n).To(BeNumerically(">=", len(results)/(4*len(routers))), "replica %d saw its part of the traffic: %v", i, received)
		}
		picks := picksBySource(routers)
		for source := range picks {
			picks[source] -= before[source]
		}
		GinkgoWriter.Printf("support-bot: decisions by source %v\n", picks)
		Expect(picks["fallback"]).To(BeZero(), "requests routed by the fallback while the picker was up")
		Expect(picks["picker"]).To(BeNumerically(">", 0), "no replica asked the picker")
		Expect(picks["leader"] + picks["picker"]).To(BeNumerically("==", len(results)))
	})

	It("refuse the pick API to a pod that is not a router of this endpoint", func() {
		leader := routers[leaderOf(routers)]
		for _, header := range []string{"", "v2 00112233445566778899aabbccddeeff 1 " + strconv.FormatInt(time.Now().UnixMilli(), 10) + " 00ff not-a-router"} {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+leader.PickAddr+picker.PathPick, bytes.NewReader([]byte{1, 0}))
			Expect(err).NotTo(HaveOccurred())
			if header != "" {
				req.Header.Set(picker.AuthHeader, header)
			}
			resp, err := metricsHTTP.Do(req)
			Expect(err).NotTo(HaveOccurred())
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized), "%s", body)
		}
		Expect(mustMetric(leader, "warmroute_router_pick_api_refused_total", nil)).To(BeNumerically(">=", 2))
	})

	It("hold concurrencyThreshold per instance, whatever the number of replicas", func() {
		reasons := []string{"concurrency_threshold", "all_busy", "token_load"}
		spills := func() map[string]float64 {
			out := map[string]float64{}
			for _, reason := range reasons {
				out[reason] = sumMetric(routers, "warmroute_router_spills_total", map[string]string{"reason": reason})
			}
			return out
		}
		spilledBefore := spills()
		picksBefore := picksBySource(routers)
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

		// The simulators' own counts: requests in the batch plus requests
		// queued, as an engine counts them, read under the engine's lock
		// (their two gauges on /metrics are set one after the other, so a
		// scrape between the two sets counts a request being admitted
		// twice: that read 5 here once in about a thousand samples). Every
		// sample of the whole window is kept, so that a failure reports
		// how far and how often the bound was overrun.
		// One picker counts every request: the threshold itself.
		bound := sharedThreshold
		peak := map[string]int{}
		samples, over := 0, 0
		Consistently(func(g Gomega) {
			for _, s := range sims {
				st := s.Stats()
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
		picks := picksBySource(routers)
		for source := range picks {
			picks[source] -= picksBefore[source]
		}
		var retries, stale float64
		for _, r := range routers {
			retries += mustMetric(r, "warmroute_router_retries_total", nil)
			stale += mustMetric(r, "warmroute_router_stale_connection_retries_total", nil)
		}
		GinkgoWriter.Printf("decisions by source during the burst: %v; retries %v, stale-connection retries %v\n", picks, retries, stale)
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

	// A rolling update replaces the router pods one at a time, each once its
	// replacement is ready: the harness has no kubelet to gate a
	// Deployment's rollout on readiness probes, so the spec deletes the
	// pods in that order itself. The picker steps down gracefully when its
	// pod goes, and the next one starts warm.
	It("roll the router pods under load without a failed request, the next picker warm", func() {
		tr := conversations(ctx, service, "rolling")
		defer tr.stop()
		time.Sleep(time.Second)
		old := podsOf(ctx)
		for _, name := range old {
			Expect(env.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}})).To(Succeed())
			Eventually(func(g Gomega) {
				now := podsOf(ctx)
				g.Expect(now).NotTo(ContainElement(name))
				g.Expect(now).To(HaveLen(len(routers)))
				_, err := pods.WaitReady(ctx, len(routers), time.Second)
				g.Expect(err).NotTo(HaveOccurred())
			}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		}
		time.Sleep(2 * time.Second)
		tr.stop()
		var err error
		routers, err = pods.WaitReady(ctx, len(routers), 10*time.Second)
		Expect(err).NotTo(HaveOccurred())
		warm := 0.0
		for _, r := range routers {
			v, _ := harness.Metric(r, "warmroute_router_picker_handoffs_total", map[string]string{"direction": "received", "result": "restored"})
			warm += v
		}
		GinkgoWriter.Printf("rolled %d router pods under load: %d requests, %d failed; warm terms on the new pods: %v\n", len(old), tr.sent.Load(), tr.failed.Load(), warm)
		Expect(tr.failureList()).To(BeEmpty())
		Expect(tr.sent.Load()).To(BeNumerically(">", 20))
		Expect(warm).To(BeNumerically(">=", 1), "no new picker started with its predecessor's state")
		Eventually(func() int { return leaderOf(routers) }).WithTimeout(10 * time.Second).Should(BeNumerically(">=", 0))
	})

	// A leader that dies leaves the next one cold: conversations it had
	// placed may land elsewhere on their next turn. Fresh conversations
	// keep arriving (see conversations), so the new picker learns the
	// traffic again; the hit rate over the window that ends recovery after
	// the kill is held to the one before it.
	It("keep serving when the picker's process dies: a new picker within the Lease's time, the hit rate back within 30 s", func() {
		const (
			// warmup lets every conversation slot start, so that the
			// before window sees conversations at every turn.
			warmup = 3 * time.Second
			// window is long enough for a few hundred requests.
			window = 10 * time.Second
			// recovery is the target: the hit rate within 2 points of
			// before within 30 s of the kill.
			recovery = 30 * time.Second
		)
		Eventually(func() int { return leaderOf(routers) }).WithTimeout(10 * time.Second).Should(BeNumerically(">=", 0))
		dead := leaderOf(routers)
		tr := conversations(ctx, service, "failover")
		defer tr.stop()
		time.Sleep(warmup)
		mark := fleetStats(ctx, sims)
		time.Sleep(window)
		before := fleetStats(ctx, sims).Since(mark).Total()
		killed := time.Now()
		Expect(routers[dead].Proc.Stop(0)).To(Succeed()) // SIGKILL at once: no handoff
		var survivors []*harness.Router
		for i, r := range routers {
			if i != dead {
				survivors = append(survivors, r)
			}
		}
		// client-go's candidates poll the Lease every RetryPeriod stretched
		// by up to its JitterFactor (1.2), and count the lease from when
		// they saw its last renewal: one poll late to see it, the lease,
		// one poll late to take it, and a second to report. Lease plus one
		// plain retry, the bound this had, was met by 6.85 s of 7 s alone.
		poll := time.Duration(2.2 * float64(picker.DefaultRetryPeriod))
		limit := picker.DefaultLeaseDuration + 2*poll + time.Second
		Eventually(func() int { return leaderOf(survivors) }).WithTimeout(limit).WithPolling(50 * time.Millisecond).Should(BeNumerically(">=", 0))
		elected := time.Since(killed)
		time.Sleep(time.Until(killed.Add(recovery - window)))
		mark = fleetStats(ctx, sims)
		time.Sleep(time.Until(killed.Add(recovery)))
		after := fleetStats(ctx, sims).Since(mark).Total()
		tr.stop()
		fallback := picksBySource(survivors)["fallback"]
		GinkgoWriter.Printf("picker killed: new picker after %s (lease %s + retry %s); %d requests, %d failed, %v routed by the fallback meanwhile\n",
			elected.Round(10*time.Millisecond), picker.DefaultLeaseDuration, picker.DefaultRetryPeriod, tr.sent.Load(), tr.failed.Load(), fallback)
		GinkgoWriter.Printf("hit rate (token-weighted, simulators' counters): %.1f %% over the %s before the kill (%d requests, %d prompt tokens), %.1f %% from %s to %s after it (%d requests, %d prompt tokens)\n",
			100*before.HitRate(), window, before.Requests, before.PrefixCacheQueries,
			100*after.HitRate(), recovery-window, recovery, after.Requests, after.PrefixCacheQueries)
		// Only requests on the killed process may fail: their connection
		// breaks or is refused (no HTTP status). A survivor never answers
		// an error because of the election.
		// Those sent to it after it died, until the readiness probe (every
		// 50 ms) takes it out of the Service, are refused: counted apart.
		refused := 0
		for _, f := range tr.failureList() {
			Expect(f).To(ContainSubstring("status 0 "), "a failure with an HTTP answer: %s", f)
			if strings.Contains(f, "connection refused") {
				refused++
			}
		}
		GinkgoWriter.Printf("failed: %d refused by the dead process before the probe took it out, %d broken in flight\n", refused, len(tr.failureList())-refused)
		Expect(fallback).To(BeNumerically(">", 0), "the survivors never needed the fallback: the test did not catch the gap")
		// Each window holds many whole conversations (conversationTurns
		// requests each), so its rate is not one conversation's luck.
		for _, w := range []vllmsim.Stats{before, after} {
			Expect(w.Requests).To(BeNumerically(">=", 10*conversationTurns*conversationSlots/4), "too few requests in a window to weigh the hit rate")
		}
		Expect(100*after.HitRate()).To(BeNumerically(">=", 100*before.HitRate()-2), "hit rate %s after the kill, against the %s before it", recovery, window)
	})
})

var metricsHTTP = &http.Client{Timeout: 5 * time.Second}

// leaderOf is the index of the one router that reports leading, -1 if
// none or several do.
func leaderOf(routers []*harness.Router) int {
	leader := -1
	for i, r := range routers {
		v, err := harness.Metric(r, "warmroute_router_picker_leader", nil)
		if err != nil || v != 1 {
			continue
		}
		if leader >= 0 {
			return -1
		}
		leader = i
	}
	return leader
}

// Conversation traffic: conversationSlots conversations at a time, each of
// conversationTurns turns.
const conversationSlots, conversationTurns = 40, 4

// conversations sends conversations behind one system prompt from 4
// clients through the router Service until stopped. Each turn resends the
// conversation's history (its opening, then every earlier turn), so most of
// a prompt is a cache hit only on an instance that served an earlier turn;
// a conversation gives way to a new one after conversationTurns turns, so
// new conversations keep arriving for the picker to place. Placed at
// random over 4 instances, a conversation's turns would share an instance
// with an earlier one only 1/4, 7/16 and 37/64 of the time.
func conversations(ctx context.Context, service *http.Client, seed string) *traffic {
	system := longText(seed, 1000)
	return startTraffic(ctx, func(ctx context.Context, g, n int) reply {
		round := n / conversationSlots
		id := fmt.Sprintf("%s conversation %d.%d", seed, g, round/conversationTurns)
		var user strings.Builder
		user.WriteString(longText(id, 2000))
		for turn := 0; turn <= round%conversationTurns; turn++ {
			fmt.Fprintf(&user, " Turn %d: %s", turn, longText(fmt.Sprintf("%s turn %d", id, turn), 400))
		}
		return chatWith(ctx, service, serviceURL, sharedModel, system, user.String(), "", 16)
	}, conversationSlots, 4)
}

// fleetStats reads the simulators' own counters from their /metrics.
func fleetStats(ctx context.Context, sims []*vllmsim.Server) workload.FleetStats {
	urls := make([]string, len(sims))
	for i, s := range sims {
		urls[i] = s.URL()
	}
	st, err := workload.ScrapeFleet(ctx, metricsHTTP, urls)
	Expect(err).NotTo(HaveOccurred())
	return st
}

// podsOf is the names of the endpoint's router pods that are not being
// deleted.
func podsOf(ctx context.Context) []string {
	var list corev1.PodList
	sel, err := labels.Parse(harness.RouterPodSelector(sharedEndpoint))
	Expect(err).NotTo(HaveOccurred())
	Expect(env.Client.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel})).To(Succeed())
	var out []string
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p.Name)
		}
	}
	return out
}

// picksBySource sums every router's decisions by who made them.
func picksBySource(routers []*harness.Router) map[string]float64 {
	out := map[string]float64{}
	for _, source := range []string{"leader", "picker", "fallback"} {
		for _, r := range routers {
			v, _ := harness.Metric(r, "warmroute_router_picks_total", map[string]string{"source": source})
			out[source] += v
		}
	}
	return out
}

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/test/harness"
)

// The multi-tenant sample: 4 instances with maxLoras 4 and three adapters
// (acme-support ×2, globex-legal ×2, initech-sql ×1).
const (
	loraSample   = "serving_v1alpha1_llmendpoint_multi_tenant.yaml"
	loraEndpoint = "tenants"
	// brokenAdapter fails to load on every simulator (the suite's LoRAFail).
	brokenAdapter = "broken-adapter"
)

var _ = Describe("LoRA adapters of the multi-tenant sample", Ordered, func() {
	var (
		ctx    context.Context
		router *harness.Router
		system = longText("tenants", 2000)
	)

	// placed is each adapter's Desired set, once every adapter is Ready
	// exactly there.
	placed := func(g Gomega) map[string][]string {
		doc, err := routingDoc(ctx, loraEndpoint)
		g.Expect(err).NotTo(HaveOccurred())
		out := map[string][]string{}
		for _, a := range doc.Adapters {
			if a.Name == brokenAdapter {
				continue
			}
			g.Expect(a.Desired).NotTo(BeEmpty(), "adapter %s", a.Name)
			g.Expect(a.Ready).To(Equal(a.Desired), "adapter %s", a.Name)
			out[a.Name] = a.Desired
		}
		return out
	}
	podUIDs := func() map[string]types.UID { return vllmPodUIDs(ctx, loraEndpoint) }
	patchEndpoint := func(patch string) {
		ep := &servingv1alpha1.LLMEndpoint{}
		ep.Name, ep.Namespace = loraEndpoint, namespace
		Expect(env.Client.Patch(ctx, ep, rawMergePatch([]byte(patch)))).To(Succeed())
	}

	BeforeAll(func() {
		ctx = suiteCtx
		agentCtx, stopAgents := context.WithCancel(suiteCtx)
		DeferCleanup(stopAgents)
		env.StartLoRAAgents(agentCtx)

		// The sample's adapters live on the claim "adapters", which the
		// vLLM pods mount read-only at its own path.
		ensureClaim(ctx, "adapters")
		By("kubectl apply -f config/samples/" + loraSample)
		applySample(ctx, loraSample)
		DeferCleanup(func() {
			ep := &servingv1alpha1.LLMEndpoint{}
			ep.Name, ep.Namespace = loraEndpoint, namespace
			_ = env.Client.Delete(context.Background(), ep)
		})
		Eventually(available(ctx, loraEndpoint)).WithTimeout(90 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		var err error
		router, err = env.StartRouter(ctx, loraEndpoint)
		Expect(err).NotTo(HaveOccurred())
		Expect(router.WaitReady(ctx, 30*time.Second)).To(Succeed())
	})

	It("loads each adapter on its replicas and routes its requests only there", func() {
		var sets map[string][]string
		Eventually(func(g Gomega) {
			doc, err := routingDoc(ctx, loraEndpoint)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(doc.Instances).To(HaveLen(4))
			sets = placed(g)
		}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		Expect(sets).To(HaveKeyWithValue("acme-support", HaveLen(2)))
		Expect(sets).To(HaveKeyWithValue("globex-legal", HaveLen(2)))
		Expect(sets).To(HaveKeyWithValue("initech-sql", HaveLen(1)))

		ep := getEndpoint(ctx, loraEndpoint)
		Expect(meta.IsStatusConditionTrue(ep.Status.Conditions, servingv1alpha1.ConditionAdaptersReady)).To(BeTrue(), "%+v", ep.Status.Conditions)
		for _, a := range ep.Status.Adapters {
			Expect(a.Loaded).To(Equal(sets[a.Name]), "status of %s", a.Name)
		}

		for name, set := range sets {
			seen := map[string]int{}
			for i := range 24 {
				r := chat(ctx, router.URL, name, system, fmt.Sprintf("question %d", i), "", 4)
				Expect(r.ok()).To(BeTrue(), "%s: %d %v %s", name, r.status, r.err, r.body)
				seen[r.instance]++
			}
			for inst := range seen {
				Expect(set).To(ContainElement(inst), "%s answered by %s outside its set %v", name, inst, set)
			}
			AddReportEntry(name, fmt.Sprintf("set %v, served by %v", set, seen))
		}
	})

	It("adds an adapter under traffic without touching any pod", func() {
		before := podUIDs()
		var d appsv1.Deployment
		Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: loraEndpoint + "-vllm"}, &d)).To(Succeed())
		template := d.Spec.Template.DeepCopy()

		var sent, failed atomic.Int64
		trafficCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; trafficCtx.Err() == nil; i++ {
				r := chat(trafficCtx, router.URL, "acme-support", system, fmt.Sprintf("q%d", i), "", 4)
				if trafficCtx.Err() != nil {
					return
				}
				sent.Add(1)
				if !r.ok() {
					failed.Add(1)
				}
			}
		}()

		patchEndpoint(`{"spec":{"loraAdapters":[
			{"name":"acme-support","uri":"pvc://adapters/acme-support","replicas":2},
			{"name":"globex-legal","uri":"pvc://adapters/globex-legal","replicas":2},
			{"name":"initech-sql","uri":"initech/mistral-7b-sql-lora","replicas":1},
			{"name":"hooli-search","uri":"hooli/search-lora","replicas":2}]}}`)
		Eventually(func(g Gomega) {
			g.Expect(placed(g)).To(HaveKeyWithValue("hooli-search", HaveLen(2)))
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		r := chat(ctx, router.URL, "hooli-search", system, "hello", "", 4)
		Expect(r.ok()).To(BeTrue(), "%d %v %s", r.status, r.err, r.body)
		stop()
		<-done

		Expect(podUIDs()).To(Equal(before), "pods were replaced")
		Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: loraEndpoint + "-vllm"}, &d)).To(Succeed())
		Expect(equality.Semantic.DeepEqual(template, &d.Spec.Template)).To(BeTrue(), "the pod template changed")
		Expect(sent.Load()).To(BeNumerically(">", 0))
		Expect(failed.Load()).To(BeZero(), "%d of %d requests failed", failed.Load(), sent.Load())
		AddReportEntry("traffic while adding an adapter", fmt.Sprintf("%d requests, %d failed", sent.Load(), failed.Load()))
	})

	It("scales 4 → 6 moving only the adapters that must move", func() {
		var before map[string][]string
		Eventually(func(g Gomega) { before = placed(g) }).WithTimeout(10 * time.Second).Should(Succeed())
		old := podUIDs()

		patchEndpoint(`{"spec":{"replicas":6}}`)
		var after map[string][]string
		Eventually(func(g Gomega) {
			doc, err := routingDoc(ctx, loraEndpoint)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(doc.Instances).To(HaveLen(6))
			// The router routes by the document it has read: until it reads
			// this one, an adapter's request may still go where it was.
			g.Expect(mustMetric(router, "warmroute_router_config_generation", nil)).To(BeNumerically(">=", float64(doc.Generation)))
			after = placed(g)
		}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

		moves, total := 0, 0
		for name, set := range after {
			total += len(set)
			for _, id := range set {
				if slices.Contains(before[name], id) {
					continue
				}
				moves++
				Expect(old).NotTo(HaveKey(id), "%s moved onto %s, which was there before", name, id)
			}
		}
		AddReportEntry("LoRA moves on 4 → 6", fmt.Sprintf("%d of %d adapter-instance assignments moved; before %v, after %v", moves, total, before, after))
		GinkgoWriter.Printf("4 → 6: %d of %d adapter-instance assignments moved\n", moves, total)
		for name, set := range after {
			r := chat(ctx, router.URL, name, system, "after scaling", "", 4)
			Expect(r.ok()).To(BeTrue(), "%s: %d %v", name, r.status, r.err)
			Expect(set).To(ContainElement(r.instance))
		}
	})

	It("shows an adapter whose load fails in the status, and answers 503 for it", func() {
		patchEndpoint(`{"spec":{"loraAdapters":[
			{"name":"acme-support","uri":"pvc://adapters/acme-support","replicas":2},
			{"name":"globex-legal","uri":"pvc://adapters/globex-legal","replicas":2},
			{"name":"initech-sql","uri":"initech/mistral-7b-sql-lora","replicas":1},
			{"name":"hooli-search","uri":"hooli/search-lora","replicas":2},
			{"name":"` + brokenAdapter + `","uri":"org/broken","replicas":1}]}}`)
		Eventually(func(g Gomega) {
			ep := getEndpoint(ctx, loraEndpoint)
			i := slices.IndexFunc(ep.Status.Adapters, func(a servingv1alpha1.AdapterStatus) bool { return a.Name == brokenAdapter })
			g.Expect(i).To(BeNumerically(">=", 0))
			g.Expect(ep.Status.Adapters[i].Failed).To(HaveLen(1))
			g.Expect(ep.Status.Adapters[i].Failed[0].Reason).To(ContainSubstring("simulated failure"))
			g.Expect(ep.Status.Adapters[i].Loaded).To(BeEmpty())
			c := meta.FindStatusCondition(ep.Status.Conditions, servingv1alpha1.ConditionAdaptersReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(servingv1alpha1.ReasonAdapterLoadFailed))
			AddReportEntry("AdaptersReady", c.Message)
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

		r := chat(ctx, router.URL, brokenAdapter, system, "hello", "", 4)
		Expect(r.status).To(Equal(http.StatusServiceUnavailable), r.body)
		doc, err := routingDoc(ctx, loraEndpoint)
		Expect(err).NotTo(HaveOccurred())
		i := slices.IndexFunc(doc.Adapters, func(a routingv1alpha1.Adapter) bool { return a.Name == brokenAdapter })
		Expect(doc.Adapters[i].Ready).To(BeEmpty())
	})
})

// vllmPodUIDs are the endpoint's vLLM pods by name: a pod replaced under
// the same name shows as a new UID.
func vllmPodUIDs(ctx context.Context, endpoint string) map[string]types.UID {
	var pods corev1.PodList
	Expect(env.Client.List(ctx, &pods, client.InNamespace(namespace),
		client.MatchingLabels{"serving.warmroute.dev/endpoint": endpoint, "serving.warmroute.dev/role": "vllm"})).To(Succeed())
	out := map[string]types.UID{}
	for _, p := range pods.Items {
		out[p.Name] = p.UID
	}
	return out
}

package e2e

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	scaleInEndpoint = "scale-in"
	scaleInModel    = "scale-in-llama"
)

// One conversation sent over and over to one instance makes it the only
// one whose cache serves hits; the operator's scraper sees that in vLLM's
// counters, the others get the lowest deletion costs, and a scale-in
// removes one of them.
var _ = Describe("Scale-in", Ordered, func() {
	It("removes the instance whose cache served the fewest hits", func() {
		ctx := suiteCtx
		serveEndpoint(ctx, prefixAwareEndpoint(scaleInEndpoint, scaleInModel, 3))
		waitRoutable(ctx, scaleInEndpoint, 3)

		By("sending one conversation to one instance, one request at a time")
		// Straight to the instance, not through the router, which would
		// spread a prefix this hot over several: the operator reads the
		// hits from vLLM's own counters, whoever sent the requests.
		var target, addr string
		for pod, a := range env.Agent.Addresses() {
			if strings.HasPrefix(pod, scaleInEndpoint+"-vllm-") && (target == "" || pod < target) {
				target, addr = pod, a
			}
		}
		Expect(target).NotTo(BeEmpty())
		system := longText("scale-in", 6000)
		hits := map[string]int{} // cached prompt tokens each instance served
		n := 0
		send := func(g Gomega, count int) {
			for range count {
				r := chat(ctx, "http://"+addr, scaleInModel, system, fmt.Sprintf("Question %d. ", n), "", 4)
				g.Expect(r.ok()).To(BeTrue(), "request %d: %v %d %s", n, r.err, r.status, r.body)
				hits[r.instance] += r.cached
				n++
			}
		}
		send(Default, 30)

		costs := func(g Gomega) map[string]int {
			var list corev1.PodList
			g.Expect(env.Client.List(ctx, &list, client.InNamespace(namespace),
				client.MatchingLabels{"serving.warmroute.dev/endpoint": scaleInEndpoint, "serving.warmroute.dev/role": "vllm"})).To(Succeed())
			out := map[string]int{}
			for _, p := range list.Items {
				if p.DeletionTimestamp == nil {
					out[p.Name], _ = strconv.Atoi(p.Annotations["controller.kubernetes.io/pod-deletion-cost"])
				}
			}
			return out
		}
		before := costs(Default)
		Expect(before).To(HaveLen(3))
		// The cost is 1 + floor(log2(1 + hits)), hits fading by half in 5
		// minutes: an instance with over 3 times the hits (plus one) of
		// another costs more, whatever the fading since.
		warmer := func(a, b string) bool { return hits[a]+1 > 3*(hits[b]+1) }
		coldest := ""
		for id := range before {
			if coldest == "" || hits[id] < hits[coldest] {
				coldest = id
			}
		}
		var pairs int
		for a := range before {
			if warmer(a, coldest) {
				pairs++
			}
		}
		Expect(pairs).To(BeNumerically(">", 0), "the traffic left no instance far colder than another: hits %v", hits)

		By("deletion costs follow the hits each instance served")
		// The operator counts the hits a pod served since its first scrape
		// (which sets the counters' baseline): the conversation goes on
		// while the test waits, so that hits fall after that scrape even
		// when the first 30 came before it.
		Eventually(func(g Gomega) {
			send(g, 3)
			c := costs(g)
			g.Expect(c).To(HaveLen(3))
			for a := range c {
				for b := range c {
					if warmer(a, b) {
						g.Expect(c[a]).To(BeNumerically(">", c[b]), "%s served %d hit tokens, %s %d; costs %v", a, hits[a], b, hits[b], c)
					}
				}
			}
		}).WithTimeout(90 * time.Second).WithPolling(time.Second).Should(Succeed())
		before = costs(Default)
		GinkgoWriter.Printf("hit tokens served %v; deletion costs before the scale-in: %v\n", hits, before)

		By("kubectl scale --replicas=2")
		out, err := exec.CommandContext(ctx, env.Kubectl(), "--kubeconfig", env.Cluster.KubeconfigPath,
			"scale", "llme", scaleInEndpoint, "--namespace", namespace, "--replicas=2").CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "%s", out)
		Eventually(costs).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(HaveLen(2))
		after := costs(Default)
		least := before[coldest]
		for _, cost := range before {
			least = min(least, cost)
		}
		for id, cost := range before {
			if _, kept := after[id]; !kept {
				Expect(cost).To(Equal(least), "removed %s (cost %d, hits %d) while costs were %v", id, cost, hits[id], before)
			}
		}
	})
})

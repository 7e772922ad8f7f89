package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/test/harness"
	"github.com/warmroute/warmroute/test/vllmsim"
)

// streamResult is one streaming generation as its client saw it.
type streamResult struct {
	instance string
	status   int
	tokens   int
	done     bool // ended with [DONE]
	err      error
}

// streamCompletion sends a streaming completions request and reads it to
// the end; started is closed at its first token.
func streamCompletion(ctx context.Context, url, model, prompt string, maxTokens int, started chan<- struct{}) streamResult {
	body, _ := json.Marshal(map[string]any{"model": model, "prompt": prompt, "max_tokens": maxTokens, "stream": true})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return streamResult{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return streamResult{err: err}
	}
	defer resp.Body.Close()
	r := streamResult{instance: resp.Header.Get(vllmsim.HeaderInstance), status: resp.StatusCode}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		r.done = data == "[DONE]"
		if strings.Contains(data, `"text"`) {
			if r.tokens == 0 {
				close(started)
			}
			r.tokens++
		}
	}
	r.err = sc.Err()
	return r
}

// Scale-in with generations running that outlast the preStop: the leaving
// instances stop getting requests, get SIGTERM with the --shutdown-timeout
// the operator derived from the grace period, and finish what they run.
var _ = Describe("Scaling in while long generations stream", Ordered, func() {
	const (
		name  = "drain-bot"
		model = "drain-llama"
		// 40,000 tokens at 30 simulated ms each, run 50× faster: 24 s of
		// wall time, longer than the 15 s preStop.
		maxTokens = 40000
		streams   = 8
		// 60 s of grace: 15 s preStop, --shutdown-timeout=40, 5 s margin.
		grace = 60
	)
	var (
		ctx    context.Context
		router *harness.Router
	)

	BeforeAll(func() {
		ctx = suiteCtx
		ep := &servingv1alpha1.LLMEndpoint{}
		ep.Name, ep.Namespace = name, namespace
		ep.Spec.Replicas = ptr.To[int32](4)
		ep.Spec.Model = servingv1alpha1.ModelSpec{
			Name: model, URI: "meta-llama/Llama-3.1-8B-Instruct",
			TerminationGracePeriodSeconds: ptr.To[int64](grace),
		}
		// Spreads the concurrent streams evenly, so each instance runs some.
		ep.Spec.Routing.Strategy = servingv1alpha1.RoutingStrategyLeastOutstandingRequests
		Expect(env.Client.Create(ctx, ep)).To(Succeed())
		DeferCleanup(func() { _ = env.Client.Delete(context.Background(), ep) })
		Eventually(available(ctx, name)).WithTimeout(90 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

		var err error
		router, err = env.StartRouter(ctx, name)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(router.Stop)
		Expect(router.WaitReady(ctx, 30*time.Second)).To(Succeed())
		waitRoutable(ctx, name, 4)
	})

	It("loses no response and truncates none when scaling 4 → 2", func() {
		before := map[string]bool{}
		doc, err := routingDoc(ctx, name)
		Expect(err).NotTo(HaveOccurred())
		for _, in := range doc.Instances {
			before[in.ID] = true
		}

		By(fmt.Sprintf("starting %d streams of %d tokens", streams, maxTokens))
		results := make([]streamResult, streams)
		var wg sync.WaitGroup
		for i := range streams {
			started := make(chan struct{})
			wg.Go(func() {
				results[i] = streamCompletion(ctx, router.URL, model, fmt.Sprintf("long story %d", i), maxTokens, started)
			})
			Eventually(started).WithTimeout(30 * time.Second).Should(BeClosed())
		}

		By("scaling to 2 while they run")
		scale(ctx, name, 2)
		wg.Wait()

		var served []string
		for i, r := range results {
			Expect(r.err).NotTo(HaveOccurred(), "stream %d on %s", i, r.instance)
			Expect(r.status).To(Equal(http.StatusOK), "stream %d", i)
			Expect(r.tokens).To(Equal(maxTokens), "stream %d on %s was truncated", i, r.instance)
			Expect(r.done).To(BeTrue(), "stream %d on %s ended without [DONE]", i, r.instance)
			served = append(served, r.instance)
		}

		By("checking that the removed instances drained on SIGTERM")
		sims := env.Sims.All()
		removed := 0
		for id := range before {
			t, terminated := sims[id].Terminated()
			if !terminated {
				continue
			}
			removed++
			Expect(t.ShutdownTimeout).To(Equal(time.Duration(servingv1alpha1.ShutdownTimeoutSeconds(getEndpoint(ctx, name))) * time.Second))
			Expect(t.Aborted).To(BeZero(), "%s aborted requests on SIGTERM", id)
			Expect(served).To(ContainElement(id), "%s left without running a stream: the spec proves nothing", id)
			GinkgoWriter.Printf("%s: SIGTERM with %d requests in flight, drained in --shutdown-timeout=%s\n", id, t.InFlight, t.ShutdownTimeout)
		}
		Expect(removed).To(Equal(2), "instances that received SIGTERM")
	})
})

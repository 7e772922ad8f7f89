// Package e2e runs warmroute end to end on the local cluster: the real API
// server, controller-manager, scheduler and KWOK nodes; the operator and the
// router as processes built from this checkout; a simulated vLLM server on
// each pod's own loopback IP; real clients (kubectl, the OpenAI Go client).
package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/warmroute/warmroute/test/harness"
	"github.com/warmroute/warmroute/test/vllmsim"
)

// timeScale runs the simulated vLLM servers 50× faster than real time.
const timeScale = 0.02

var (
	env      *harness.Env
	suiteCtx context.Context
	// anyFailed keeps the processes' logs when a spec failed.
	anyFailed bool
)

var _ = JustAfterEach(func() {
	if CurrentSpecReport().Failed() {
		anyFailed = true
	}
	// A vLLM container whose arguments the pinned vLLM release refuses
	// never serves; fail here, naming the argument, rather than in a wait
	// that times out.
	if env != nil {
		for _, err := range env.Agent.Errors() {
			var usage *vllmsim.UsageError
			if errors.As(err, &usage) {
				anyFailed = true
				Fail(err.Error())
			}
		}
	}
})

// The operator runs with config/rbac's permissions alone: a request the API
// server refused it during a spec fails that spec, even when the spec's
// own checks passed around it (a lost Event, a retried write).
var _ = AfterEach(func() {
	denied, err := env.OperatorDenials()
	Expect(err).NotTo(HaveOccurred())
	Expect(denied).To(BeEmpty(), "the API server refused the operator requests config/rbac should allow")
})

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "warmroute end-to-end")
}

var _ = BeforeSuite(func() {
	var cancel context.CancelFunc
	suiteCtx, cancel = context.WithCancel(context.Background())
	DeferCleanup(cancel)

	workDir, err := os.MkdirTemp("", "warmroute-e2e-")
	Expect(err).NotTo(HaveOccurred())
	By("starting the local cluster, the operator and the pod agent in " + workDir)
	ctx, cancelStart := context.WithTimeout(suiteCtx, 30*time.Minute)
	defer cancelStart()
	env, err = harness.Start(ctx, harness.Options{
		WorkDir:     workDir,
		PodCIDR:     "127.3.0.1/16",
		Nodes:       4,
		GPUsPerNode: 8,
		Sim: vllmsim.Config{
			TimeScale:   timeScale,
			CacheTokens: 256 * 1024,
			// lora_test.go's adapter whose load fails.
			LoRAFail: []string{brokenAdapter},
		},
		Progress: func(s string) { GinkgoWriter.Println(s) },
		// autoscaling_test.go's HorizontalPodAutoscaler scales on it.
		CustomMetrics: true,
	})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		env.Stop()
		if !anyFailed {
			_ = os.RemoveAll(workDir)
		} else {
			GinkgoWriter.Println("logs kept in", filepath.Join(workDir, "cluster"))
		}
	})
})

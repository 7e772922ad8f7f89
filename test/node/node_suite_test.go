// Package node holds the end-to-end specs that need a real kubelet node:
// warmroute installed from its manifests as a pod of its own image, the pod
// specs the operator writes run as containers, Pod Security admission and
// NetworkPolicies enforced. See README.md for which suite runs what.
package node

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes"

	"github.com/warmroute/warmroute/hack/images"
	"github.com/warmroute/warmroute/test/localcluster"
)

// vllmImage is the product's simulator image, a stand-in for
// vllm/vllm-openai: the operator runs `vllm serve …`, and the image
// carries the simulator as /vllm on its PATH.
var vllmImage = images.DefaultRefs.Simulator

// netcheckImage is the NetworkPolicy spec's client (test/node/netcheck).
const netcheckImage = "warmroute.test/netcheck:test"

var (
	cluster  *localcluster.Cluster
	kube     *kubernetes.Clientset
	repoRoot string
	binDir   string
)

func TestNode(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Real-node end-to-end")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	if missing := localcluster.RealNodeMissing(); missing != "" {
		Skip(missing)
	}
	var err error
	repoRoot, err = localcluster.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	binDir, err = localcluster.BinDir()
	Expect(err).NotTo(HaveOccurred(), "the control plane and kubelet (hack/build-controlplane.sh)")

	start := time.Now()
	cluster, err = localcluster.Start(ctx, localcluster.Options{BinDir: binDir, RealNode: true, Log: GinkgoWriter})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		start := time.Now()
		Expect(cluster.Stop()).To(Succeed())
		AddReportEntry("teardown", time.Since(start).Round(100*time.Millisecond).String())
	})
	AddReportEntry("node Ready after", time.Since(start).Round(100*time.Millisecond).String())
	kube = kubernetes.NewForConfigOrDie(cluster.Config)

	start = time.Now()
	archive := filepath.Join(cluster.WorkDir, "warmroute-images.tar")
	Expect(buildImages(ctx, archive)).To(Succeed())
	Expect(cluster.LoadImages(ctx, archive)).To(Succeed())
	AddReportEntry("images built and loaded in", time.Since(start).Round(100*time.Millisecond).String())
}, NodeTimeout(20*time.Minute))

// buildImages builds the operator, router and simulator images the way
// `make images` does (hack/images), and the suite's client pods, into one
// docker-save archive.
func buildImages(ctx context.Context, archive string) error {
	arch := runtime.GOARCH
	out := filepath.Join(cluster.WorkDir, "image-bin")
	refs := images.DefaultRefs
	var targets []images.Target
	for _, t := range images.Targets(refs) {
		if t.Ref != refs.LoRAAgent { // the router image carries the agent too
			targets = append(targets, t)
		}
	}
	if err := images.BuildBinaries(ctx, repoRoot, out, arch, targets); err != nil {
		return err
	}
	imgs := map[string]v1.Image{}
	for _, t := range targets {
		img, err := t.Image(out, arch, "0.1.0")
		if err != nil {
			return err
		}
		imgs[t.Ref] = img
	}
	// The suite's client pods.
	for ref, pkg := range map[string]string{
		netcheckImage: "./test/node/netcheck", loadgenImage: "./test/node/loadgen", eppClientImage: "./test/node/eppclient",
	} {
		bin := filepath.Join(cluster.WorkDir, filepath.Base(pkg))
		if err := images.BuildGo(ctx, repoRoot, pkg, "linux", arch, bin); err != nil {
			return err
		}
		img, err := images.FromBinary(images.Spec{Ref: ref, Binary: bin})
		if err != nil {
			return err
		}
		imgs[ref] = img
	}
	return images.WriteTarball(archive, imgs)
}

// kubectl runs the control plane's kubectl against the cluster, with stdin
// when given, and returns its output.
func kubectl(ctx context.Context, stdin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "kubectl"), append([]string{"--kubeconfig=" + cluster.KubeconfigPath}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

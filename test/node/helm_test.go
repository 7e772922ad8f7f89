package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/warmroute/warmroute/hack/images"
)

// helmNamespace is where the Helm install puts the operator: another
// namespace than the kustomize install's, so that nothing of that one is
// reused.
const helmNamespace = "warmroute-helm"

// installWithHelm removes the kustomize install (all but the CRD, so the
// endpoint stays) and installs the operator again from dist/chart, as the
// README tells a user without cert-manager: self-signed certificates. The
// new manager pod must run the built image, serve the webhooks and the
// custom metrics API, and reconcile the endpoint the first install made.
func installWithHelm(ctx SpecContext) {
	helmBin := filepath.Join(repoRoot, "bin", "helm")
	_, err := os.Stat(helmBin)
	Expect(err).NotTo(HaveOccurred(), "run `make helm` (make test-node does)")

	withoutCRDs, err := installManifest("CustomResourceDefinition")
	Expect(err).NotTo(HaveOccurred())
	start := time.Now()
	_, err = kubectl(ctx, withoutCRDs, "delete", "-f", "-", "--ignore-not-found", "--timeout=3m")
	Expect(err).NotTo(HaveOccurred())
	AddReportEntry("kustomize install removed in", time.Since(start).Round(100*time.Millisecond).String())

	repo, tag, _ := strings.Cut(images.DefaultRefs.Operator, ":")
	routerRepo, routerTag, _ := strings.Cut(images.DefaultRefs.Router, ":")
	start = time.Now()
	out, err := helm(ctx, "install", "warmroute", filepath.Join(repoRoot, "dist", "chart"),
		"--namespace", helmNamespace, "--create-namespace",
		"--set", "webhook.certificate=self-signed",
		"--set", "manager.replicas=1",
		"--set", "manager.image.repository="+repo, "--set", "manager.image.tag="+tag,
		"--set", "router.image.repository="+routerRepo, "--set", "router.image.tag="+routerTag)
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Print(out)
	_, err = kubectl(ctx, "", "-n", helmNamespace, "rollout", "status", "deployment/"+operatorName, "--timeout=3m")
	Expect(err).NotTo(HaveOccurred(), describePods(ctx, helmNamespace))
	AddReportEntry("Helm install: manager pod Ready after", time.Since(start).Round(100*time.Millisecond).String())

	var d appsv1.Deployment
	raw, err := kubectl(ctx, "", "-n", helmNamespace, "get", "deployment", operatorName, "-o", "yaml")
	Expect(err).NotTo(HaveOccurred())
	Expect(yaml.Unmarshal([]byte(raw), &d)).To(Succeed())
	Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal(images.DefaultRefs.Operator))
	Expect(d.Spec.Template.Spec.ServiceAccountName).To(Equal(operatorName))

	// The webhooks, called by the API server through the Helm install's
	// Service: the validating one refuses a rename of the served model, in
	// a server-side dry run. The message is the webhook's own (no CEL rule
	// of the CRD says it), so only a served webhook gives it.
	Eventually(func(g Gomega) {
		out, err := kubectl(ctx, "", "-n", endpointNamespace, "patch", "llmendpoint", endpointName, "--type=merge",
			"-p", `{"spec": {"model": {"name": "renamed"}}}`, "--dry-run=server")
		g.Expect(err).To(HaveOccurred(), out)
		g.Expect(out).To(ContainSubstring(`the served model name cannot change in place (it was "` + modelName + `")`))
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
	for _, kind := range []string{"mutatingwebhookconfiguration", "validatingwebhookconfiguration"} {
		ns, err := kubectl(ctx, "", "get", kind, "warmroute-"+strings.TrimSuffix(kind, "webhookconfiguration")+"-webhook-configuration",
			"-o", "jsonpath={.webhooks[*].clientConfig.service.namespace}")
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.Fields(ns)).To(HaveEach(helmNamespace), kind)
	}

	// The custom metrics API, through the aggregation layer to the
	// manager pod.
	Eventually(func(g Gomega) {
		out, err := kubectl(ctx, "", "get", "apiservice", "v1beta2.custom.metrics.k8s.io",
			"-o", `jsonpath={.spec.service.namespace} {.status.conditions[?(@.type=="Available")].status}`)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(Equal(helmNamespace + " True"))
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())

	// The endpoint the first install made is now this operator's.
	_, err = kubectl(ctx, "", "-n", endpointNamespace, "scale", "llmendpoint/"+endpointName, "--replicas=1")
	Expect(err).NotTo(HaveOccurred())
	Eventually(func(g Gomega) {
		vllm, err := kube.AppsV1().Deployments(endpointNamespace).Get(ctx, endpointName+"-vllm", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(*vllm.Spec.Replicas).To(BeEquivalentTo(1))
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
}

// helm runs bin/helm against the cluster with its own configuration,
// cache and data directories, so that the user's repositories and plugins
// play no part.
func helm(ctx context.Context, args ...string) (string, error) {
	home := filepath.Join(cluster.WorkDir, "helm")
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot, "bin", "helm"), append(args, "--kubeconfig", cluster.KubeconfigPath)...)
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

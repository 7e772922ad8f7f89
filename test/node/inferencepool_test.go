package node

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/warmroute/warmroute/controllers"
	"github.com/warmroute/warmroute/test/localcluster"
	"github.com/warmroute/warmroute/test/promscrape"
)

// eppClientImage is the InferencePool spec's Gateway stand-in
// (test/node/eppclient).
const eppClientImage = "warmroute.test/eppclient:test"

const (
	poolEndpoint = "gw"
	poolModel    = "sim-gw"
)

// inferencePoolMode runs an endpoint in mode InferencePool: the router
// pods serve only the Endpoint Picker Protocol, with mutual TLS from
// spec.router.inferencePool.tlsSecretName, and a client pod playing the
// Gateway's Envoy (ext_proc) sends requests through the picker to the vLLM
// pods it picks. A client without a certificate is refused.
func inferencePoolMode(ctx SpecContext) {
	_, err := kubectl(ctx, "", "apply", "--server-side", "-f", filepath.Join(repoRoot, "test", "crds"))
	Expect(err).NotTo(HaveOccurred())

	ca, err := localcluster.NewCA("warmroute-gateway-ca")
	Expect(err).NotTo(HaveOccurred())
	service := poolEndpoint + "-epp." + endpointNamespace + ".svc"
	serving, servingKey, err := ca.Issue(service, []string{service, service + ".cluster.local"}, nil)
	Expect(err).NotTo(HaveOccurred())
	client, clientKey, err := ca.Issue("gateway", nil, nil)
	Expect(err).NotTo(HaveOccurred())
	for name, pair := range map[string][2][]byte{"gw-picker-tls": {serving, servingKey}, "gw-client-tls": {client, clientKey}} {
		_, err := kube.CoreV1().Secrets(endpointNamespace).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: endpointNamespace},
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{"tls.crt": pair[0], "tls.key": pair[1], "ca.crt": ca.PEM},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
	}

	start := time.Now()
	applyEndpoint(ctx, poolEndpoint, fmt.Sprintf(`  replicas: 2
  model: {name: %s, uri: hf://sim/gw, image: %s, gpus: 0}
  router:
    mode: InferencePool
    inferencePool: {tlsSecretName: gw-picker-tls}
  networkPolicy:
    routerFrom:
    - podSelector: {matchLabels: {app: gateway}}
`, poolModel, vllmImage))
	// The operator looks for the InferencePool API again every 30 s while
	// it is missing, and it was installed just now.
	Eventually(func(g Gomega) {
		pool, err := kubectl(ctx, "", "-n", endpointNamespace, "get", "inferencepools.inference.networking.k8s.io", poolEndpoint,
			"-o", "jsonpath={.spec.endpointPickerRef.name}")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pool).To(Equal(poolEndpoint + "-epp"))
	}).WithContext(ctx).WithTimeout(90 * time.Second).WithPolling(time.Second).Should(Succeed())
	AddReportEntry("InferencePool endpoint Ready after", time.Since(start).Round(100*time.Millisecond).String())

	pods := func(role string) []corev1.Pod {
		list, err := kube.CoreV1().Pods(endpointNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: labels.Set{controllers.LabelEndpoint: poolEndpoint, controllers.LabelRole: role}.String(),
		})
		Expect(err).NotTo(HaveOccurred())
		return list.Items
	}
	routers := pods("router")
	for _, r := range routers {
		for _, c := range r.Spec.Containers[0].Args {
			Expect(c).NotTo(HavePrefix("--epp-insecure"), "router %s serves the protocol in plaintext", r.Name)
		}
	}
	// Until both routers know the elected picker, a replica decides by its
	// fallback, whose placements the picker never saw.
	Eventually(func(g Gomega) {
		for _, r := range routers {
			fams := routerMetrics(ctx, g, r.Name)
			g.Expect(promscrape.Sum(fams["warmroute_router_picker_known"], nil)).To(BeEquivalentTo(1), "router %s does not know the picker", r.Name)
		}
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())

	members := map[string]bool{}
	for _, p := range pods("vllm") {
		members[net.JoinHostPort(p.Status.PodIP, "8000")] = true
	}
	gateway := func(name string, extra ...string) *corev1.Pod {
		p := clientPod(name, map[string]string{"app": "gateway"}, eppClientImage, append([]string{
			"-picker=" + service + ".cluster.local:9002", "-server-name=" + service,
			"-tls-dir=/etc/gateway-tls", "-model=" + poolModel,
		}, extra...)...)
		p.Spec.Volumes = []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "gw-client-tls"}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "tls", MountPath: "/etc/gateway-tls", ReadOnly: true}}
		return p
	}
	for _, p := range []*corev1.Pod{gateway("gateway"), gateway("gateway-no-cert", "-no-client-cert")} {
		_, err := kube.CoreV1().Pods(endpointNamespace).Create(ctx, p, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
	}
	Expect(endPhase(ctx, "gateway")).To(Equal(corev1.PodSucceeded), podLogs(ctx, "gateway"))
	logs := podLogs(ctx, "gateway")
	picked := 0
	for _, line := range strings.Split(logs, "\n") {
		if _, rest, ok := strings.Cut(line, "picked "); ok {
			dest, _, _ := strings.Cut(rest, ",")
			Expect(members).To(HaveKey(dest), "the picker chose %s, not a vLLM pod of the pool: %s", dest, logs)
			picked++
		}
	}
	Expect(picked).To(Equal(6), logs)
	Expect(endPhase(ctx, "gateway-no-cert")).To(Equal(corev1.PodFailed), podLogs(ctx, "gateway-no-cert"))
	Expect(podLogs(ctx, "gateway-no-cert")).To(ContainSubstring("FAILED"))
}

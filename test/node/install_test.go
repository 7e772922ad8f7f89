package node

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/warmroute/warmroute/controllers"
	"github.com/warmroute/warmroute/hack/images"
	"github.com/warmroute/warmroute/test/harness"
	"github.com/warmroute/warmroute/test/localcluster"
)

const (
	operatorNamespace = "warmroute-system"
	operatorName      = "warmroute-controller-manager"
	// endpointNamespace enforces the restricted Pod Security Standard, as
	// the namespaces of the README's examples do.
	endpointNamespace = "llm"
	endpointName      = "chat"
	modelName         = "sim-chat"
	// loraEndpointName serves LoRA adapters, so that its agents'
	// ServiceAccount and Role exist; it has no instances.
	loraEndpointName = "tune"
)

var _ = Describe("warmroute on a real node", Ordered, func() {
	It("installs from config/default without cert-manager; the manager pod runs its image and serves the webhooks", func(ctx SpecContext) {
		manifest, err := installManifest()
		Expect(err).NotTo(HaveOccurred())
		out, err := kubectl(ctx, manifest, "apply", "--server-side", "-f", "-")
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Print(out)

		start := time.Now()
		_, err = kubectl(ctx, "", "-n", operatorNamespace, "rollout", "status", "deployment/"+operatorName, "--timeout=3m")
		Expect(err).NotTo(HaveOccurred(), describePods(ctx, operatorNamespace))
		AddReportEntry("operator pods Ready after", time.Since(start).Round(100*time.Millisecond).String())

		pods, err := kube.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: "control-plane=controller-manager"})
		Expect(err).NotTo(HaveOccurred())
		Expect(pods.Items).NotTo(BeEmpty())
		for _, p := range pods.Items {
			Expect(p.Spec.Containers[0].Image).To(Equal(images.DefaultRefs.Operator))
			Expect(p.Spec.ServiceAccountName).To(Equal(operatorName))
			Expect(p.Status.PodIP).To(HavePrefix("10.244.0."), "a pod IP from the bridge")
		}

		// The API server calls both webhooks (failurePolicy Fail) for an
		// LLMEndpoint, here in a server-side dry run, which succeeds only
		// if they answer through their Service.
		Eventually(func(g Gomega) {
			out, err := kubectl(ctx, `{"apiVersion": "serving.warmroute.dev/v1alpha1", "kind": "LLMEndpoint",
				"metadata": {"name": "dry-run", "namespace": "default"},
				"spec": {"model": {"name": "m", "uri": "hf://org/m", "gpus": 0}}}`,
				"create", "--dry-run=server", "-f", "-")
			g.Expect(err).NotTo(HaveOccurred(), out)
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
	})

	It("refuses, in a restricted namespace, a pod that breaks the standard (Pod Security admission)", func(ctx SpecContext) {
		_, err := kubectl(ctx, "", "create", "namespace", endpointNamespace)
		Expect(err).NotTo(HaveOccurred())
		_, err = kubectl(ctx, "", "label", "namespace", endpointNamespace, "pod-security.kubernetes.io/enforce=restricted")
		Expect(err).NotTo(HaveOccurred())
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: endpointNamespace},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: localcluster.PauseImage}}},
		}
		_, err = kube.CoreV1().Pods(endpointNamespace).Create(ctx, pod, metav1.CreateOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "create: %v", err)
		Expect(err.Error()).To(ContainSubstring(`violates PodSecurity "restricted:latest"`))
	})

	It("runs an LLMEndpoint's vLLM and router pods from the operator's specs and answers a chat completion through the router Service", func(ctx SpecContext) {
		endpoint := fmt.Sprintf(`apiVersion: serving.warmroute.dev/v1alpha1
kind: LLMEndpoint
metadata:
  name: %s
  namespace: %s
spec:
  replicas: 2
  model:
    name: %s
    uri: hf://sim/chat
    image: %s
    gpus: 0
  networkPolicy:
    monitoringFrom:
    - podSelector: {matchLabels: {app: scraper}}
`, endpointName, endpointNamespace, modelName, vllmImage)
		start := time.Now()
		_, err := kubectl(ctx, endpoint, "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred())
		waitEndpointRollout(ctx, endpointName)
		AddReportEntry("vLLM and router pods Ready after", time.Since(start).Round(100*time.Millisecond).String())

		for role, want := range map[string]int{"vllm": 2, "router": 2} {
			pods, err := kube.CoreV1().Pods(endpointNamespace).List(ctx, metav1.ListOptions{
				LabelSelector: labels.Set{controllers.LabelEndpoint: endpointName, controllers.LabelRole: role}.String(),
			})
			Expect(err).NotTo(HaveOccurred())
			ready := 0
			for _, p := range pods.Items {
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
			Expect(ready).To(Equal(want), "Ready %s pods", role)
		}

		// From the host through the API server's service proxy: the API
		// server (inside the cluster's namespace) connects to a router pod
		// of the Service.
		body := fmt.Sprintf(`{"model": %q, "messages": [{"role": "user", "content": "Hello from a real node"}], "max_tokens": 8}`, modelName)
		Eventually(func(g Gomega) {
			res := kube.CoreV1().RESTClient().Post().
				Namespace(endpointNamespace).Resource("services").Name(endpointName+":http").
				SubResource("proxy").Suffix("v1/chat/completions").
				SetHeader("Content-Type", "application/json").
				Body([]byte(body)).Do(ctx)
			var code int
			res.StatusCode(&code)
			raw, err := res.Raw()
			g.Expect(err).NotTo(HaveOccurred(), "status %d: %s", code, raw)
			g.Expect(code).To(Equal(200))
			g.Expect(string(raw)).To(ContainSubstring(`"chat.completion"`))
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
	})

	It("has the two router pods elect one picker through the endpoint's Lease", func(ctx SpecContext) {
		pods, err := kube.CoreV1().Pods(endpointNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: labels.Set{controllers.LabelEndpoint: endpointName, controllers.LabelRole: "router"}.String(),
		})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			lease, err := kube.CoordinationV1().Leases(endpointNamespace).Get(ctx, endpointName+"-router", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			holder := ptr.Deref(lease.Spec.HolderIdentity, "")
			var ips []string
			for _, p := range pods.Items {
				ips = append(ips, p.Status.PodIP)
			}
			// The identity ends in "@<pick address>", the picker pod's IP.
			g.Expect(holder).To(SatisfyAny(
				ContainSubstring("@"+ips[0]+":"), ContainSubstring("@"+ips[1]+":")), "holder %q, router pods at %v", holder, ips)
		}).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(time.Second).Should(Succeed())
	})

	It("resolves Service names in a pod through the cluster DNS, CoreDNS running as a pod behind the kube-dns Service", func(ctx SpecContext) {
		dns, err := kube.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(dns.Spec.ClusterIP).To(Equal(localcluster.KubeDNSIP))
		coredns, err := kube.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
		Expect(err).NotTo(HaveOccurred())
		Expect(coredns.Items).To(HaveLen(1))
		Expect(coredns.Items[0].Spec.Containers[0].Image).To(Equal(localcluster.CoreDNSImage))
		Expect(coredns.Items[0].Status.PodIP).To(HavePrefix("10.244.0."), "a pod IP from the bridge, not the node's")

		router, err := kube.CoreV1().Services(endpointNamespace).Get(ctx, endpointName, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		port := strconv.Itoa(int(router.Spec.Ports[0].Port))
		names := []string{
			"kubernetes.default.svc.cluster.local:443",
			endpointName + "." + endpointNamespace + ".svc.cluster.local:" + port,
			endpointName + ":" + port, // the pod's search path
		}
		want := []string{"10.96.0.1:443", router.Spec.ClusterIP + ":" + port, router.Spec.ClusterIP + ":" + port}
		phase, err := runNetcheck(ctx, "resolver", nil, names...)
		Expect(err).NotTo(HaveOccurred())
		logs := podLogs(ctx, "resolver")
		Expect(phase).To(Equal(corev1.PodSucceeded), logs)
		for i, name := range names {
			Expect(logs).To(ContainSubstring(name+": connected to "+want[i]), logs)
		}
	})

	It("enforces the endpoint's NetworkPolicies: a pod without the allowed labels reaches neither a vLLM pod nor the pick port; a monitoring peer reaches vLLM", func(ctx SpecContext) {
		podIP := func(role string) string {
			pods, err := kube.CoreV1().Pods(endpointNamespace).List(ctx, metav1.ListOptions{
				LabelSelector: labels.Set{controllers.LabelEndpoint: endpointName, controllers.LabelRole: role}.String(),
			})
			Expect(err).NotTo(HaveOccurred())
			Expect(pods.Items).NotTo(BeEmpty())
			return pods.Items[0].Status.PodIP
		}
		vllm := podIP("vllm") + ":8000"
		pick := podIP("router") + ":9091"
		cases := []struct {
			name   string
			labels map[string]string
			addr   string
			want   corev1.PodPhase
		}{
			{"scraper-to-vllm", map[string]string{"app": "scraper"}, vllm, corev1.PodSucceeded},
			{"stranger-to-vllm", nil, vllm, corev1.PodFailed},
			{"stranger-to-pick", nil, pick, corev1.PodFailed},
		}
		// All at once: a refused client waits out netcheck's patience.
		for _, tc := range cases {
			Expect(startNetcheck(ctx, tc.name, tc.labels, tc.addr)).To(Succeed())
		}
		for _, tc := range cases {
			Expect(endPhase(ctx, tc.name)).To(Equal(tc.want), "%s (%s): %s", tc.name, tc.addr, podLogs(ctx, tc.name))
		}
	})

	It("gives each ServiceAccount the rights the README's RBAC table lists, and no more", func(ctx SpecContext) {
		// The LoRA agent's Role exists for an endpoint that serves
		// adapters; this one has no instances to run.
		_, err := kubectl(ctx, fmt.Sprintf(`apiVersion: serving.warmroute.dev/v1alpha1
kind: LLMEndpoint
metadata: {name: %s, namespace: %s}
spec:
  replicas: 0
  model: {name: sim-tune, uri: hf://sim/tune, image: %s, gpus: 0, maxLoras: 1}
`, loraEndpointName, endpointNamespace, vllmImage), "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() error {
			_, err := kube.RbacV1().RoleBindings(endpointNamespace).Get(ctx, loraEndpointName+"-lora-agent", metav1.GetOptions{})
			return err
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())

		operator := "system:serviceaccount:" + operatorNamespace + ":" + operatorName
		router := "system:serviceaccount:" + endpointNamespace + ":" + endpointName + "-router"
		loraAgent := "system:serviceaccount:" + endpointNamespace + ":" + loraEndpointName + "-lora-agent"
		for _, row := range []struct {
			as, verb, resource string
			want               string
		}{
			{operator, "create", "deployments", "yes"},
			{operator, "patch", "pods", "yes"},
			{operator, "create", "secrets", "yes"},
			{operator, "get", "secrets", "no"},
			{router, "get", "configmaps/" + endpointName + "-routing", "yes"},
			{router, "update", "leases.coordination.k8s.io/" + endpointName + "-router", "yes"},
			{router, "get", "secrets", "no"},
			{router, "create", "deployments", "no"},
			{loraAgent, "get", "configmaps/" + loraEndpointName + "-routing", "yes"},
			{loraAgent, "get", "configmaps/" + endpointName + "-routing", "no"},
			{loraAgent, "patch", "pods", "yes"},
			{loraAgent, "create", "pods", "no"},
			{loraAgent, "delete", "pods", "no"},
			{loraAgent, "get", "secrets", "no"},
			{loraAgent, "update", "leases.coordination.k8s.io", "no"},
			{loraAgent, "patch", "deployments", "no"},
		} {
			// can-i exits 1 when the answer is no.
			out, _ := kubectl(ctx, "", "auth", "can-i", row.verb, row.resource, "-n", endpointNamespace, "--as="+row.as)
			Expect(strings.TrimSpace(out)).To(Equal(row.want), "%s may %s %s", row.as, row.verb, row.resource)
		}

		// RBAC lets a router update any Lease of its namespace (the
		// operator grants warmroute-router by bind); the admission policy
		// warmroute-router-lease holds it to its own. can-i asks RBAC
		// only, so this one is a real write: a PUT, the verb it holds.
		_, err = kubectl(ctx, `{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "another"}}`,
			"apply", "-n", endpointNamespace, "-f", "-")
		Expect(err).NotTo(HaveOccurred())
		another, err := kubectl(ctx, "", "get", "lease", "another", "-n", endpointNamespace, "-o", "json")
		Expect(err).NotTo(HaveOccurred())
		out, err := kubectl(ctx, another, "replace", "-n", endpointNamespace, "-f", "-", "--as="+router)
		Expect(err).To(HaveOccurred(), "the router replaced another Lease: %s", out)
		Expect(out).To(ContainSubstring("warmroute-router-lease"), "refused by the admission policy, not by RBAC")

		// RBAC lets the LoRA agent patch any pod of its namespace (it
		// cannot name a pod before it exists); the admission policy
		// warmroute-lora-agent holds it to the lora-state annotation of
		// the pod its token is bound to. Its credentials as the kubelet
		// projects them: the service account, with the pod's name as
		// extra user info.
		vllm := endpointPods(ctx, endpointName, "vllm")
		Expect(len(vllm)).To(BeNumerically(">=", 2))
		cfg := rest.CopyConfig(cluster.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: loraAgent, Extra: map[string][]string{
			"authentication.kubernetes.io/pod-name": {vllm[0].Name},
		}}
		agent := kubernetes.NewForConfigOrDie(cfg)
		for _, w := range []struct{ pod, patch, refusal string }{
			{vllm[1].Name, `{"metadata": {"annotations": {"serving.warmroute.dev/lora-state": "{}"}}}`, "may not change pod " + vllm[1].Name},
			{vllm[0].Name, `{"metadata": {"labels": {"` + controllers.LabelRole + `": "router"}}}`, "may change only the serving.warmroute.dev/lora-state annotation"},
		} {
			_, err := agent.CoreV1().Pods(endpointNamespace).Patch(ctx, w.pod, types.MergePatchType, []byte(w.patch), metav1.PatchOptions{})
			Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "the LoRA agent of %s patched %s with %s: %v", vllm[0].Name, w.pod, w.patch, err)
			Expect(err.Error()).To(ContainSubstring("warmroute-lora-agent"), "refused by the admission policy, not by RBAC")
			Expect(err.Error()).To(ContainSubstring(w.refusal))
		}
		_, err = kubectl(ctx, "", "-n", endpointNamespace, "delete", "llmendpoint", loraEndpointName, "--wait=false")
		Expect(err).NotTo(HaveOccurred())
	})

	It("answers every request sent through the router Service's DNS name while the endpoint scales 2→3→2 with drain and the picker pod dies; the routers follow the routing document without restarting", trafficUnderScaling)

	It("runs an endpoint in InferencePool mode: picker-only router pods answer a Gateway stand-in in a pod over the Endpoint Picker Protocol with mutual TLS, and refuse one without a client certificate", inferencePoolMode)

	It("installs again with the Helm chart once the kustomize install is removed: the manager pod serves the webhooks and the custom metrics API and takes over the endpoint", installWithHelm)

	It("scales the endpoint under load with a HorizontalPodAutoscaler that reads the custom metrics API served from the manager pod through the aggregation layer", autoscaleOnCustomMetrics)

	It("shares an endpoint between tenants through its router Service and two routers: a flooding tenant is queued and shed with 429 and 503 while every request of another succeeds, and a patched rate limit answers 429 with x-ratelimit headers", floodAndSteady)
})

// applyEndpoint applies an LLMEndpoint with the given spec (YAML indented
// under "spec:") in the endpoint namespace, deleted when the spec ends,
// and waits until its vLLM and router pods are Ready.
func applyEndpoint(ctx context.Context, name, spec string) {
	GinkgoHelper()
	_, err := kubectl(ctx, fmt.Sprintf("apiVersion: serving.warmroute.dev/v1alpha1\nkind: LLMEndpoint\nmetadata: {name: %s, namespace: %s}\nspec:\n%s",
		name, endpointNamespace, spec), "apply", "-f", "-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func(ctx SpecContext) {
		_, _ = kubectl(ctx, "", "-n", endpointNamespace, "delete", "llmendpoint", name, "--wait=false")
	})
	waitEndpointRollout(ctx, name)
}

// waitEndpointRollout waits until the operator has created an endpoint's
// vLLM and router Deployments and their pods are Ready.
func waitEndpointRollout(ctx context.Context, endpoint string) {
	GinkgoHelper()
	for _, d := range []string{endpoint + "-vllm", endpoint + "-router"} {
		// rollout status refuses a Deployment that does not exist yet.
		Eventually(func() error {
			_, err := kube.AppsV1().Deployments(endpointNamespace).Get(ctx, d, metav1.GetOptions{})
			return err
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
		_, err := kubectl(ctx, "", "-n", endpointNamespace, "rollout", "status", "deployment/"+d, "--timeout=3m")
		Expect(err).NotTo(HaveOccurred(), describePods(ctx, endpointNamespace))
	}
}

// installManifest is config/default and config/admission as a user
// without cert-manager installs them: the Certificates and their Issuer
// left out, each Certificate's Secret created from a CA of the user's own,
// and that CA written into the caBundle of every object that asks
// cert-manager to inject it. Objects of the skipped kinds are left out.
func installManifest(skip ...string) (string, error) {
	objs, err := harness.Kustomize(repoRoot, "default", "admission")
	if err != nil {
		return "", err
	}
	ca, err := localcluster.NewCA("warmroute-webhook-ca")
	if err != nil {
		return "", err
	}
	var secrets, rest []*unstructured.Unstructured
	for _, o := range objs {
		if slices.Contains(skip, o.GetKind()) {
			continue
		}
		switch o.GetKind() {
		case "Certificate":
			s, err := certificateSecret(o, ca)
			if err != nil {
				return "", err
			}
			secrets = append(secrets, s)
			continue
		case "Issuer":
			continue
		}
		if _, ok := o.GetAnnotations()[harness.InjectCAFrom]; ok {
			if err := harness.InjectCA(o, ca.PEM); err != nil {
				return "", fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
			}
		}
		rest = append(rest, o)
	}
	// The Namespace first, then the Secrets the manager pod mounts.
	var buf bytes.Buffer
	for _, o := range append(append(rest[:1:1], secrets...), rest[1:]...) {
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			return "", err
		}
		buf.WriteString("---\n")
		buf.Write(b)
	}
	if rest[0].GetKind() != "Namespace" {
		return "", fmt.Errorf("config/default starts with a %s, not its Namespace", rest[0].GetKind())
	}
	return buf.String(), nil
}

// certificateSecret is the kubernetes.io/tls Secret cert-manager would
// write for a Certificate.
func certificateSecret(cert *unstructured.Unstructured, ca *localcluster.CA) (*unstructured.Unstructured, error) {
	name, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	if name == "" || len(dnsNames) == 0 {
		return nil, fmt.Errorf("Certificate %s: no secretName or dnsNames", cert.GetName())
	}
	crt, key, err := ca.Issue(dnsNames[0], dnsNames, nil)
	if err != nil {
		return nil, err
	}
	s := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cert.GetNamespace()},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": ca.PEM},
	}
	b, err := yaml.Marshal(s)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	return u, yaml.Unmarshal(b, &u.Object)
}

// describePods is what a failed wait shows: each pod's phase, conditions
// and container states, and the namespace's recent events.
func describePods(ctx context.Context, namespace string) string {
	pods, _ := kubectl(ctx, "", "-n", namespace, "get", "pods", "-o", "wide")
	events, _ := kubectl(ctx, "", "-n", namespace, "get", "events", "--sort-by=.lastTimestamp")
	desc, _ := kubectl(ctx, "", "-n", namespace, "describe", "pods")
	return strings.Join([]string{pods, events, desc}, "\n")
}

// runNetcheck runs test/node/netcheck against addrs in a pod of the
// endpoint's namespace with the given labels and returns the phase it
// ended in.
func runNetcheck(ctx context.Context, name string, podLabels map[string]string, addrs ...string) (corev1.PodPhase, error) {
	if err := startNetcheck(ctx, name, podLabels, addrs...); err != nil {
		return "", err
	}
	return endPhase(ctx, name)
}

func startNetcheck(ctx context.Context, name string, podLabels map[string]string, addrs ...string) error {
	_, err := kube.CoreV1().Pods(endpointNamespace).Create(ctx, clientPod(name, podLabels, netcheckImage, addrs...), metav1.CreateOptions{})
	return err
}

// endPhase waits for a client pod that runs once to end and returns its
// phase.
func endPhase(ctx context.Context, name string) (corev1.PodPhase, error) {
	var phase corev1.PodPhase
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := kube.CoreV1().Pods(endpointNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, nil
	})
	return phase, err
}

// clientPod is a pod of one of the suite's own images in the endpoint's
// namespace, as the restricted standard allows, run once.
func clientPod(name string, podLabels map[string]string, image string, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: endpointNamespace, Labels: podLabels},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            "client",
				Image:           image,
				ImagePullPolicy: corev1.PullNever,
				Args:            args,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}

// podLogs is a pod's output, for a failure message.
func podLogs(ctx context.Context, name string) string {
	out, _ := kubectl(ctx, "", "-n", endpointNamespace, "logs", name)
	return out
}

/*
Copyright 2026 The warmroute Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package controllers

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/internal/inferencepool"
)

func inInferencePoolMode(ep *v1alpha1.LLMEndpoint) {
	ep.Spec.Router.Mode = v1alpha1.RouterModeInferencePool
}

func TestBuildInferencePool(t *testing.T) {
	ep := newEndpoint(inInferencePoolMode)
	want := inferencepool.Spec{
		Selector:    inferencepool.LabelSelector{MatchLabels: map[string]string{LabelEndpoint: "chat", LabelRole: roleVLLM}},
		TargetPorts: []inferencepool.Port{{Number: 8000}},
		EndpointPickerRef: inferencepool.EndpointPickerRef{
			Kind: "Service", Name: "chat-epp", Port: &inferencepool.Port{Number: 9002}, FailureMode: "FailClose",
		},
	}
	pool := buildInferencePool(ep)
	if diff := cmp.Diff(want, pool.Spec); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
	if pool.Name != "chat" || pool.Namespace != "team" || !metav1.IsControlledBy(pool, ep) {
		t.Errorf("pool %s/%s owners %v", pool.Namespace, pool.Name, pool.OwnerReferences)
	}
	// The selector selects exactly the vLLM pods the Deployment makes.
	podLabels := buildVLLMDeployment(ep, testOptions).Spec.Template.Labels
	for k, v := range pool.Spec.Selector.MatchLabels {
		if podLabels[k] != v {
			t.Errorf("selector %s=%s does not match the vLLM pods' labels %v", k, v, podLabels)
		}
	}
	open := buildInferencePool(newEndpoint(inInferencePoolMode, func(ep *v1alpha1.LLMEndpoint) {
		ep.Spec.Router.InferencePool = &v1alpha1.InferencePoolOptions{FailureMode: v1alpha1.EndpointPickerFailOpen}
	}))
	if open.Spec.EndpointPickerRef.FailureMode != "FailOpen" {
		t.Errorf("failure mode %q, want FailOpen", open.Spec.EndpointPickerRef.FailureMode)
	}
}

// TestRouterInInferencePoolMode: the routers serve the picker protocol
// on 9002 behind an h2c Service, and no proxy; clients call the Gateway.
func TestRouterInInferencePoolMode(t *testing.T) {
	ep := newEndpoint(inInferencePoolMode)
	c := buildRouterDeployment(ep, testOptions).Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--listen=") || !slices.Contains(c.Args, "--epp-listen=:9002") {
		t.Errorf("args %v: want --listen= and --epp-listen=:9002", c.Args)
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "epp" && p.ContainerPort == 9002 }) ||
		slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "http" }) {
		t.Errorf("ports %v: want epp 9002 and no http", c.Ports)
	}
	svc := buildRouterService(ep)
	wantPorts := []corev1.ServicePort{{Name: "grpc-epp", Port: 9002, TargetPort: svc.Spec.Ports[0].TargetPort, Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("kubernetes.io/h2c")}}
	if svc.Name != "chat-epp" || svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Spec.Ports[0].TargetPort.StrVal != "epp" || !cmp.Equal(wantPorts, svc.Spec.Ports) {
		t.Errorf("picker Service %s %s %+v", svc.Name, svc.Spec.Type, svc.Spec.Ports)
	}
	if got := endpointURL(ep); got != "" {
		t.Errorf("status.endpoint = %q, want empty (clients call the Gateway)", got)
	}
	standalone := buildRouterDeployment(newEndpoint(), testOptions).Spec.Template.Spec.Containers[0]
	if slices.ContainsFunc(standalone.Args, func(a string) bool { return a == "--listen=" || a == "--epp-listen=:9002" }) {
		t.Errorf("standalone args %v serve the picker protocol", standalone.Args)
	}
}

// TestNetworkPoliciesInInferencePoolMode: the Gateway's proxies
// (routerFrom) reach the picker port and, since they send the requests
// themselves, vLLM's port; other pods reach neither.
func TestNetworkPoliciesInInferencePoolMode(t *testing.T) {
	gatewayPeer := networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "envoy-gateway-system"}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"gateway.envoyproxy.io/owning-gateway-name": "inference"}},
	}
	ep := newEndpoint(inInferencePoolMode, func(ep *v1alpha1.LLMEndpoint) {
		ep.Spec.NetworkPolicy.RouterFrom = []networkingv1.NetworkPolicyPeer{gatewayPeer}
	})
	envoy := source{"envoy-gateway-system", map[string]string{corev1.LabelMetadataName: "envoy-gateway-system"},
		map[string]string{"gateway.envoyproxy.io/owning-gateway-name": "inference"}, "the Gateway's Envoy"}
	neighbour := source{"team", map[string]string{corev1.LabelMetadataName: "team"}, map[string]string{"app": "notebook"}, "another pod"}
	vllm, router := buildVLLMNetworkPolicy(ep, testOptions), buildRouterNetworkPolicy(ep, testOptions)
	for _, tc := range []struct {
		policy *networkingv1.NetworkPolicy
		src    source
		port   int
		want   bool
	}{
		{router, envoy, routerEPPPort, true},
		{vllm, envoy, vllmPort, true},
		{router, neighbour, routerEPPPort, false},
		{vllm, neighbour, vllmPort, false},
		{router, envoy, routerHTTPPort, false}, // no proxy in this mode
	} {
		if got := admits(t, tc.policy, tc.src, tc.port); got != tc.want {
			t.Errorf("%s: %s on %d admitted %v, want %v", tc.policy.Name, tc.src.description, tc.port, got, tc.want)
		}
	}
	// Standalone: the Gateway's pods are clients of the routers, not of vLLM.
	standalone := newEndpoint(func(e *v1alpha1.LLMEndpoint) { e.Spec.NetworkPolicy.RouterFrom = ep.Spec.NetworkPolicy.RouterFrom })
	if admits(t, buildVLLMNetworkPolicy(standalone, testOptions), envoy, vllmPort) {
		t.Error("standalone: routerFrom peers reach vLLM")
	}
}

var _ = Describe("InferencePool mode", Ordered, func() {
	var ns string
	poolKey := func(name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }
	poolReady := func(name string) func(Gomega) *metav1.Condition {
		return func(g Gomega) *metav1.Condition {
			ep := &v1alpha1.LLMEndpoint{}
			g.Expect(k8sClient.Get(suiteCtx, poolKey(name), ep)).To(Succeed())
			return meta.FindStatusCondition(ep.Status.Conditions, v1alpha1.ConditionInferencePoolReady)
		}
	}
	withReason := func(status metav1.ConditionStatus, reason string) OmegaMatcher {
		return And(Not(BeNil()), HaveField("Status", status), HaveField("Reason", reason))
	}
	BeforeAll(func() { ns = newNamespace() })

	DescribeTable("refuses specs the mode cannot serve, naming the field",
		func(change func(*v1alpha1.LLMEndpoint), wantInMessage ...string) {
			ep := minimalEndpoint(ns, "bad")
			change(ep)
			err := k8sClient.Create(suiteCtx, ep)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
			for _, want := range wantInMessage {
				Expect(err.Error()).To(ContainSubstring(want))
			}
		},
		Entry("an unknown mode", func(ep *v1alpha1.LLMEndpoint) { ep.Spec.Router.Mode = "Gateway" },
			"spec.router.mode", `"Standalone"`, `"InferencePool"`),
		Entry("pool options in mode Standalone", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Router.InferencePool = &v1alpha1.InferencePoolOptions{FailureMode: v1alpha1.EndpointPickerFailClose}
		}, "spec.router.inferencePool", "applies only to spec.router.mode InferencePool"),
		Entry("a LoadBalancer in mode InferencePool", func(ep *v1alpha1.LLMEndpoint) {
			inInferencePoolMode(ep)
			ep.Spec.Router.ServiceType = corev1.ServiceTypeLoadBalancer
		}, "spec.router.serviceType", "must be ClusterIP with spec.router.mode InferencePool"),
		Entry("FailOpen with tenant authentication", func(ep *v1alpha1.LLMEndpoint) {
			inInferencePoolMode(ep)
			ep.Spec.Router.InferencePool = &v1alpha1.InferencePoolOptions{FailureMode: v1alpha1.EndpointPickerFailOpen}
			ep.Spec.Router.Auth = &v1alpha1.RouterAuth{Mode: v1alpha1.RouterAuthAPIKeys, APIKeys: &v1alpha1.APIKeysAuth{SecretName: "keys"}}
		}, "spec.router.inferencePool.failureMode", "must be FailClose with spec.router.auth"),
		Entry("a picker TLS Secret name that names no Secret", func(ep *v1alpha1.LLMEndpoint) {
			inInferencePoolMode(ep)
			ep.Spec.Router.InferencePool = &v1alpha1.InferencePoolOptions{TLSSecretName: "Picker_TLS"}
		}, "spec.router.inferencePool.tlsSecretName"),
		Entry("an unknown failure mode", func(ep *v1alpha1.LLMEndpoint) {
			inInferencePoolMode(ep)
			ep.Spec.Router.InferencePool = &v1alpha1.InferencePoolOptions{FailureMode: "FailSoft"}
		}, "spec.router.inferencePool.failureMode", `"FailClose"`, `"FailOpen"`),
	)

	It("says the InferencePool CRD is missing, then creates the pool once it is installed, keeps it true to the spec, and removes it in mode Standalone", func() {
		err := k8sClient.List(suiteCtx, &inferencepool.InferencePoolList{})
		Expect(meta.IsNoMatchError(err)).To(BeTrue(), "the suite starts without the InferencePool CRD: %v", err)

		ep := minimalEndpoint(ns, "gw")
		inInferencePoolMode(ep)
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())

		By("without the CRD: InferencePoolReady False, InferencePoolCRDMissing, with a Warning event")
		Eventually(poolReady("gw")).Should(And(withReason(metav1.ConditionFalse, v1alpha1.ReasonInferencePoolCRDMissing),
			HaveField("Message", ContainSubstring("install the Gateway API Inference Extension's CRDs"))))
		Eventually(func(g Gomega) []string { return eventReasons(g, ns, "gw") }).Should(ContainElement(v1alpha1.ReasonInferencePoolCRDMissing))
		Expect(endpointEvents(Default, ns, "gw")).To(ContainElement(HaveField("Type", corev1.EventTypeWarning)))

		By("the routers serve the picker only, behind Service gw-epp; no client-facing Service")
		Eventually(func(g Gomega) []string {
			return getDeployment(g, ns, routerName(ep)).Spec.Template.Spec.Containers[0].Args
		}).Should(ContainElements("--listen=", "--epp-listen=:9002"))
		picker := &corev1.Service{}
		Eventually(func() error { return k8sClient.Get(suiteCtx, poolKey("gw-epp"), picker) }).Should(Succeed())
		Expect(picker.Spec.Ports).To(ConsistOf(And(HaveField("Port", int32(9002)), HaveField("AppProtocol", ptr.To("kubernetes.io/h2c")))))
		Expect(apierrors.IsNotFound(k8sClient.Get(suiteCtx, poolKey("gw"), &corev1.Service{}))).To(BeTrue())

		By("installing the CRD: the next look finds it, without restarting the operator")
		_, err = envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{filepath.Join("..", "test", "crds")}, ErrorIfPathMissing: true})
		Expect(err).NotTo(HaveOccurred())
		Eventually(poolReady("gw")).Should(withReason(metav1.ConditionTrue, v1alpha1.ReasonInferencePoolApplied))

		By("the pool, as the API server stored and defaulted it under the CRD's schema")
		pool := &inferencepool.InferencePool{}
		Expect(k8sClient.Get(suiteCtx, poolKey("gw"), pool)).To(Succeed())
		Expect(pool.Spec).To(Equal(inferencepool.Spec{
			Selector:    inferencepool.LabelSelector{MatchLabels: selectorLabels(ep, roleVLLM)},
			TargetPorts: []inferencepool.Port{{Number: vllmPort}},
			EndpointPickerRef: inferencepool.EndpointPickerRef{
				Group: ptr.To(""), Kind: "Service", Name: "gw-epp", Port: &inferencepool.Port{Number: 9002}, FailureMode: "FailClose",
			},
		}))
		owner := metav1.GetControllerOf(pool)
		Expect(owner).NotTo(BeNil())
		Expect(owner.Kind).To(Equal("LLMEndpoint"))
		Expect(owner.Name).To(Equal("gw"))
		Expect(owner.BlockOwnerDeletion).To(Equal(ptr.To(true)), "the garbage collector deletes it with the endpoint")

		By("the CRD's rules hold: a picker Service without a port is refused")
		bad := pool.DeepCopy()
		bad.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: "by-hand"}
		bad.Spec.EndpointPickerRef.Port = nil
		err = k8sClient.Create(suiteCtx, bad)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
		Expect(err.Error()).To(ContainSubstring("port is required when kind is 'Service'"))

		By("a spec change reaches the pool")
		Expect(k8sClient.Get(suiteCtx, poolKey("gw"), ep)).To(Succeed())
		ep.Spec.Router.InferencePool = &v1alpha1.InferencePoolOptions{FailureMode: v1alpha1.EndpointPickerFailOpen}
		Expect(k8sClient.Update(suiteCtx, ep)).To(Succeed())
		Eventually(func(g Gomega) string {
			g.Expect(k8sClient.Get(suiteCtx, poolKey("gw"), pool)).To(Succeed())
			return pool.Spec.EndpointPickerRef.FailureMode
		}).Should(Equal("FailOpen"))

		By("a deleted pool comes back through the InferencePool watch")
		uid := pool.UID
		Expect(k8sClient.Delete(suiteCtx, pool)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(suiteCtx, poolKey("gw"), pool)).To(Succeed())
			g.Expect(pool.UID).NotTo(Equal(uid))
		}).Should(Succeed())

		By("mode Standalone: the pool and the picker Service go, the client-facing Service and status.endpoint come back")
		Expect(k8sClient.Get(suiteCtx, poolKey("gw"), ep)).To(Succeed())
		ep.Spec.Router.Mode = v1alpha1.RouterModeStandalone
		ep.Spec.Router.InferencePool = nil
		Expect(k8sClient.Update(suiteCtx, ep)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(suiteCtx, poolKey("gw"), &inferencepool.InferencePool{}))
		}).Should(BeTrue())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(suiteCtx, poolKey("gw-epp"), &corev1.Service{}))
		}).Should(BeTrue())
		Eventually(func() error { return k8sClient.Get(suiteCtx, poolKey("gw"), &corev1.Service{}) }).Should(Succeed())
		Eventually(poolReady("gw")).Should(BeNil())
		Eventually(func(g Gomega) string {
			g.Expect(k8sClient.Get(suiteCtx, poolKey("gw"), ep)).To(Succeed())
			return ep.Status.Endpoint
		}).Should(Equal("http://gw." + ns + ".svc"))
	})

	It("writes the priorities of the InferenceObjectives naming its pool into the routing document, and follows them", func() {
		// Installed by the spec above; again here, so this one runs alone.
		_, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{filepath.Join("..", "test", "crds")}, ErrorIfPathMissing: true})
		Expect(err).NotTo(HaveOccurred())
		ep := minimalEndpoint(ns, "prio")
		inInferencePoolMode(ep)
		ep.Spec.Router.FlowControl = &v1alpha1.FlowControl{}
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())
		objective := func(name, pool string, priority *int) *inferencepool.InferenceObjective {
			// Group and kind unset: the CRD defaults them to the
			// InferencePool's, as upstream does.
			return &inferencepool.InferenceObjective{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec: inferencepool.ObjectiveSpec{Priority: priority, PoolRef: inferencepool.PoolObjectReference{Name: pool}}}
		}
		batch := objective("batch", "prio", ptr.To(-50))
		for _, o := range []*inferencepool.InferenceObjective{batch, objective("other-pool", "gw", ptr.To(7)), objective("no-priority", "prio", nil)} {
			Expect(k8sClient.Create(suiteCtx, o)).To(Succeed())
		}
		objectives := func(g Gomega) map[string]int {
			doc := routingDocument(g, ep)
			g.Expect(doc.FlowControl).NotTo(BeNil())
			return doc.FlowControl.Objectives
		}
		By("only this pool's objective with a priority")
		Eventually(objectives).Should(Equal(map[string]int{"batch": -50}))

		By("a changed priority reaches the document")
		Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(batch), batch)).To(Succeed())
		Expect(batch.Spec.PoolRef).To(Equal(inferencepool.PoolObjectReference{Group: "inference.networking.k8s.io", Kind: "InferencePool", Name: "prio"}))
		batch.Spec.Priority = ptr.To(-20)
		Expect(k8sClient.Update(suiteCtx, batch)).To(Succeed())
		Eventually(objectives).Should(Equal(map[string]int{"batch": -20}))

		// Without the InferenceObjective watch this fails: by now the
		// endpoint has settled and nothing else reconciles it.
		By("an objective moved to this pool joins it; a deleted one leaves")
		moved := &inferencepool.InferenceObjective{}
		Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: "other-pool"}, moved)).To(Succeed())
		moved.Spec.PoolRef.Name = "prio"
		Expect(k8sClient.Update(suiteCtx, moved)).To(Succeed())
		Expect(k8sClient.Delete(suiteCtx, batch)).To(Succeed())
		Eventually(objectives).Should(Equal(map[string]int{"other-pool": 7}))
	})
})

// TestRouterEPPTLS: with spec.router.inferencePool.tlsSecretName the
// routers serve the picker protocol with mutual TLS from the Secret's
// files, mounted as a directory; without it they are told --epp-insecure
// (the router refuses to serve plaintext otherwise); Standalone gets
// neither.
func TestRouterEPPTLS(t *testing.T) {
	withTLS := func(ep *v1alpha1.LLMEndpoint) {
		ep.Spec.Router.InferencePool = &v1alpha1.InferencePoolOptions{TLSSecretName: "chat-picker-tls"}
	}
	for _, tc := range []struct {
		name       string
		ep         *v1alpha1.LLMEndpoint
		wantArgs   []string
		wantSecret string
	}{
		{"mutual TLS from the Secret", newEndpoint(inInferencePoolMode, withTLS), []string{
			"--epp-tls-cert-file=/etc/warmroute/epp-tls/tls.crt", "--epp-tls-key-file=/etc/warmroute/epp-tls/tls.key",
			"--epp-client-ca-file=/etc/warmroute/epp-tls/ca.crt"}, "chat-picker-tls"},
		{"no Secret: plaintext, said so", newEndpoint(inInferencePoolMode), []string{"--epp-insecure"}, ""},
		{"Standalone", newEndpoint(), nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := buildRouterDeployment(tc.ep, testOptions).Spec.Template.Spec
			c := pod.Containers[0]
			var got []string
			for _, a := range c.Args {
				if strings.HasPrefix(a, "--epp-") && !strings.HasPrefix(a, "--epp-listen") {
					got = append(got, a)
				}
			}
			if !cmp.Equal(tc.wantArgs, got) {
				t.Errorf("epp args %v, want %v", got, tc.wantArgs)
			}
			mounted := slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool {
				return v.Secret != nil && v.Secret.SecretName == tc.wantSecret
			}) && slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.MountPath == "/etc/warmroute/epp-tls" && m.SubPath == ""
			})
			if mounted != (tc.wantSecret != "") {
				t.Errorf("Secret %q mounted %v: volumes %v mounts %v", tc.wantSecret, mounted, pod.Volumes, c.VolumeMounts)
			}
		})
	}
}

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
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// minimalEndpoint is the smallest valid LLMEndpoint: the rest is defaulted.
func minimalEndpoint(ns, name string) *v1alpha1.LLMEndpoint {
	return &v1alpha1.LLMEndpoint{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.LLMEndpointSpec{
			Model: v1alpha1.ModelSpec{Name: "llama", URI: "meta-llama/Llama-3.1-8B-Instruct"},
		},
	}
}

// ownedObjects are empty objects of every kind and name the operator
// creates for an endpoint (without LoRA).
func ownedObjects(ep *v1alpha1.LLMEndpoint) []client.Object {
	meta := func(n string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: ep.Namespace, Name: n} }
	return []client.Object{
		&appsv1.Deployment{ObjectMeta: meta(vllmName(ep))},
		&corev1.Service{ObjectMeta: meta(vllmName(ep))},
		&corev1.ConfigMap{ObjectMeta: meta(routingConfigMapName(ep))},
		&corev1.ServiceAccount{ObjectMeta: meta(routerName(ep))},
		&rbacv1.Role{ObjectMeta: meta(routerName(ep))},
		&rbacv1.RoleBinding{ObjectMeta: meta(routerName(ep))},
		&rbacv1.RoleBinding{ObjectMeta: meta(routerLeaseBindingName(ep))},
		&appsv1.Deployment{ObjectMeta: meta(routerName(ep))},
		&corev1.Service{ObjectMeta: meta(routerServiceName(ep))},
		&networkingv1.NetworkPolicy{ObjectMeta: meta(vllmName(ep))},
		&networkingv1.NetworkPolicy{ObjectMeta: meta(routerName(ep))},
	}
}

// resourceVersions reads the resourceVersion of each owned object and of
// the endpoint.
func resourceVersions(ep *v1alpha1.LLMEndpoint) map[string]string {
	rvs := map[string]string{}
	objs := append(ownedObjects(ep), &v1alpha1.LLMEndpoint{ObjectMeta: metav1.ObjectMeta{Namespace: ep.Namespace, Name: ep.Name}})
	for _, obj := range objs {
		ExpectWithOffset(1, k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		rvs[fmt.Sprintf("%T/%s", obj, obj.GetName())] = obj.GetResourceVersion()
	}
	return rvs
}

// routingDocument reads and decodes the endpoint's routing ConfigMap.
func routingDocument(g Gomega, ep *v1alpha1.LLMEndpoint) *routing.Document {
	cm := &corev1.ConfigMap{}
	g.Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ep.Namespace, Name: routingConfigMapName(ep)}, cm)).To(Succeed())
	doc, err := routing.Decode([]byte(cm.Data[routing.ConfigMapKey]))
	g.Expect(err).NotTo(HaveOccurred())
	return doc
}

func instanceIDs(doc *routing.Document) []string {
	ids := []string{}
	for _, in := range doc.Instances {
		ids = append(ids, in.ID)
	}
	return ids
}

func getDeployment(g Gomega, ns, name string) *appsv1.Deployment {
	d := &appsv1.Deployment{}
	g.Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: name}, d)).To(Succeed())
	return d
}

// waitSettled waits until the operator has reconciled the endpoint's
// current generation and its writes have stopped.
func waitSettled(ns, name string) {
	key := types.NamespacedName{Namespace: ns, Name: name}
	EventuallyWithOffset(1, func(g Gomega) {
		ep := &v1alpha1.LLMEndpoint{}
		g.Expect(k8sClient.Get(suiteCtx, key, ep)).To(Succeed())
		g.Expect(ep.Status.ObservedGeneration).To(Equal(ep.Generation))
	}).Should(Succeed())
	last := -1
	EventuallyWithOffset(1, func() bool {
		now := writes.In(ns)
		settled := now == last
		last = now
		return settled
	}).WithPolling(500 * time.Millisecond).Should(BeTrue())
}

// A test pod stands in for a vLLM pod of the Deployment: envtest runs no
// ReplicaSet controller and no kubelet, so the test plays both.
func createInstancePod(ns, endpoint, name string) *corev1.Pod {
	GinkgoHelper()
	return createInstancePodWith(ns, endpoint, name, nil)
}

// createInstancePodWith is createInstancePod with change made to the pod
// before it is created (its spec cannot change later).
func createInstancePodWith(ns, endpoint, name string, change func(*corev1.Pod)) *corev1.Pod {
	GinkgoHelper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels: map[string]string{LabelEndpoint: endpoint, LabelRole: roleVLLM},
			// Holds the pod in Terminating after a delete, as a kubelet
			// draining requests would.
			Finalizers: []string{"test.warmroute.dev/hold"},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm"}}},
	}
	if change != nil {
		change(pod)
	}
	Expect(k8sClient.Create(suiteCtx, pod)).To(Succeed())
	return pod
}

// setPodReady plays the kubelet: the pod runs at ip and is (not) Ready
// since the given time.
func setPodReady(pod *corev1.Pod, ip string, ready bool, since time.Time) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	// The operator may have annotated the pod meanwhile.
	ExpectWithOffset(1, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		pod.Status.Phase = corev1.PodRunning
		pod.Status.PodIP = ip
		pod.Status.PodIPs = []corev1.PodIP{{IP: ip}}
		pod.Status.Conditions = []corev1.PodCondition{{
			Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.NewTime(since),
		}}
		return k8sClient.Status().Update(suiteCtx, pod)
	})).To(Succeed())
}

func releasePods(ns string) {
	var pods corev1.PodList
	Expect(k8sClient.List(suiteCtx, &pods, client.InNamespace(ns))).To(Succeed())
	for i := range pods.Items {
		pod := &pods.Items[i]
		if len(pod.Finalizers) > 0 {
			pod.Finalizers = nil
			Expect(client.IgnoreNotFound(k8sClient.Update(suiteCtx, pod))).To(Succeed())
		}
	}
}

var _ = Describe("LLMEndpoint validation", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	// Each invalid spec is refused by the API server with a message naming
	// the field and what is allowed.
	DescribeTable("refuses invalid specs",
		func(change func(*v1alpha1.LLMEndpoint), wantInMessage ...string) {
			ep := minimalEndpoint(ns, "bad")
			change(ep)
			err := k8sClient.Create(suiteCtx, ep)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
			for _, want := range wantInMessage {
				Expect(err.Error()).To(ContainSubstring(want))
			}
			GinkgoWriter.Println(err.Error())
		},
		Entry("prefixLength 512", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Routing.PrefixAware.PrefixLength = ptr.To[int32](512)
		}, "spec.routing.prefixAware.prefixLength", "greater than or equal to 1024"),
		Entry("prefixLength 70000", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Routing.PrefixAware.PrefixLength = ptr.To[int32](70000)
		}, "spec.routing.prefixAware.prefixLength", "less than or equal to 65536"),
		Entry("strategy ROUND_ROBIN", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Routing.Strategy = "ROUND_ROBIN"
		}, "spec.routing.strategy", `Unsupported value: "ROUND_ROBIN"`, `"RANDOM"`, `"LEAST_OUTSTANDING_REQUESTS"`, `"PREFIX_AWARE"`),
		Entry("concurrencyThreshold 0", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Routing.PrefixAware.ConcurrencyThreshold = ptr.To[int32](0)
		}, "spec.routing.prefixAware.concurrencyThreshold", "greater than or equal to 1"),
		Entry("concurrencyThreshold 2000", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Routing.PrefixAware.ConcurrencyThreshold = ptr.To[int32](2000)
		}, "spec.routing.prefixAware.concurrencyThreshold", "less than or equal to 1024"),
		Entry("duplicate adapter names", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.LoRAAdapters = []v1alpha1.LoRAAdapter{{Name: "sql", URI: "org/sql"}, {Name: "sql", URI: "org/sql2"}}
		}, "spec.loraAdapters[1]", "Duplicate value", `"name":"sql"`),
		Entry("an adapter named like the model", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.LoRAAdapters = []v1alpha1.LoRAAdapter{{Name: "llama", URI: "org/a"}}
		}, "spec.loraAdapters", "must differ from spec.model.name"),
		Entry("s3 options on an adapter not in object storage", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.LoRAAdapters = []v1alpha1.LoRAAdapter{{Name: "a", URI: "org/a", S3: &v1alpha1.S3Source{CredentialsSecret: "creds"}}}
		}, "spec.loraAdapters[0].s3", "applies only to an s3:// uri"),
		Entry("an s3 endpoint that is not a URL", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.LoRAAdapters = []v1alpha1.LoRAAdapter{{Name: "a", URI: "s3://bucket/a", S3: &v1alpha1.S3Source{Endpoint: "minio:9000"}}}
		}, "spec.loraAdapters[0].s3.endpoint", "should match"),
		Entry("an s3 uri without a bucket", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.LoRAAdapters = []v1alpha1.LoRAAdapter{{Name: "a", URI: "s3:///a"}}
		}, "spec.loraAdapters[0].uri", "s3://bucket/prefix"),
		Entry("adapter replicas 0", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.LoRAAdapters = []v1alpha1.LoRAAdapter{{Name: "a", URI: "org/a", Replicas: ptr.To[int32](0)}}
		}, "spec.loraAdapters[0].replicas", "greater than or equal to 1"),
		Entry("negative replicas", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Replicas = ptr.To[int32](-1)
		}, "spec.replicas", "greater than or equal to 0"),
		Entry("more tensor-parallel ranks than GPUs", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Model.GPUs = ptr.To[int32](2)
			ep.Spec.Model.TensorParallelSize = ptr.To[int32](4)
		}, "spec.model.tensorParallelSize", "must not exceed spec.model.gpus"),
		Entry("prefix caching disabled", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Model.Args = []string{"--no-enable-prefix-caching"}
		}, "spec.model.args", "must not switch prefix caching"),
		Entry("prefix caching disabled, underscore spelling", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Model.Args = []string{"--no_enable_prefix_caching"}
		}, "spec.model.args", "must not switch prefix caching"),
		Entry("vLLM's drain set by hand", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Model.Args = []string{"--shutdown_timeout=600"}
		}, "spec.model.args", "--shutdown-timeout", "terminationGracePeriodSeconds"),
		Entry("a vLLM config file", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Model.Args = []string{"--config=/etc/vllm.yaml"}
		}, "spec.model.args", "--config"),
		Entry("a grace period with no room to drain", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Model.TerminationGracePeriodSeconds = ptr.To[int64](20)
		}, "spec.model.terminationGracePeriodSeconds", "greater than or equal to 30"),
		Entry("an operator-owned flag", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Model.Args = []string{"--port=9000"}
		}, "spec.model.args", "--port"),
		Entry("a model URI of no known kind", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Model.URI = "s3://bucket/model"
		}, "spec.model.uri", "Hugging Face id", "pvc://"),
		Entry("a NetworkPolicy peer that selects nothing", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.NetworkPolicy.RouterFrom = []networkingv1.NetworkPolicyPeer{{}}
		}, "spec.networkPolicy.routerFrom", "must set podSelector, namespaceSelector or ipBlock"),
		Entry("an unknown service type", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Router.ServiceType = "ExternalName"
		}, "spec.router.serviceType", "Unsupported value"),
		Entry("no model name", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Model.Name = ""
		}, "spec.model.name"),
		Entry("a name ending in -vllm", func(ep *v1alpha1.LLMEndpoint) {
			ep.Name = "chat-vllm"
		}, "metadata.name must not end in '-vllm'"),
		Entry("a name too long for the derived names", func(ep *v1alpha1.LLMEndpoint) {
			ep.Name = strings.Repeat("a", 56)
		}, "metadata.name must be at most 55 characters"),
		Entry("scaleToZeroAfter below 30s", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Scaling.ScaleToZeroAfter = &metav1.Duration{Duration: 10 * time.Second}
		}, "spec.scaling.scaleToZeroAfter", "from 30s to 720h"),
		Entry("scaleToZeroAfter above 720h", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Scaling.ScaleToZeroAfter = &metav1.Duration{Duration: 800 * time.Hour}
		}, "spec.scaling.scaleToZeroAfter", "from 30s to 720h"),
		Entry("a rollout that can replace nothing", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Rollout.MaxUnavailable = ptr.To(intstr.FromInt32(0))
		}, "spec.rollout", "must not both be 0", "maxSurge defaults to 0"),
		Entry("a rollout that can replace nothing, in percent", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Rollout = v1alpha1.RolloutSpec{MaxSurge: ptr.To(intstr.FromString("0%")), MaxUnavailable: ptr.To(intstr.FromString("0%"))}
		}, "spec.rollout", "must not both be 0"),
		Entry("maxUnavailable over 100%", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Rollout.MaxUnavailable = ptr.To(intstr.FromString("150%"))
		}, "spec.rollout.maxUnavailable", "0% to 100%"),
		Entry("a negative maxSurge", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Rollout.MaxSurge = ptr.To(intstr.FromInt32(-1))
		}, "spec.rollout.maxSurge", "0-512"),
		Entry("a model cache that is both a claim and a size", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Model.Cache = &v1alpha1.ModelCacheSpec{ClaimName: "hf", Size: ptr.To(resource.MustParse("10Gi"))}
		}, "spec.model.cache", "exactly one of claimName", "size"),
		Entry("a model cache that is neither", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Model.Cache = &v1alpha1.ModelCacheSpec{}
		}, "spec.model.cache", "exactly one of claimName"),
		Entry("a storage class for a claim the operator does not provision", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Model.Cache = &v1alpha1.ModelCacheSpec{ClaimName: "hf", StorageClassName: ptr.To("fast")}
		}, "spec.model.cache", "apply only to a claim the operator provisions"),
		Entry("an unknown cache access mode", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Model.Cache = &v1alpha1.ModelCacheSpec{Size: ptr.To(resource.MustParse("10Gi")), AccessModes: []corev1.PersistentVolumeAccessMode{"ReadOnlyMany"}}
		}, "spec.model.cache.accessModes[0]", "Unsupported value"),
	)

	It("accepts rollouts and model caches in every documented form", func() {
		for i, change := range []func(*v1alpha1.LLMEndpoint){
			func(ep *v1alpha1.LLMEndpoint) {
				ep.Spec.Rollout = v1alpha1.RolloutSpec{MaxSurge: ptr.To(intstr.FromString("25%")), MaxUnavailable: ptr.To(intstr.FromInt32(0))}
			},
			func(ep *v1alpha1.LLMEndpoint) { ep.Spec.Rollout.MaxUnavailable = ptr.To(intstr.FromString("50%")) },
			func(ep *v1alpha1.LLMEndpoint) { ep.Spec.Model.Cache = &v1alpha1.ModelCacheSpec{ClaimName: "hf-cache"} },
			func(ep *v1alpha1.LLMEndpoint) {
				ep.Spec.Model.Cache = &v1alpha1.ModelCacheSpec{Size: ptr.To(resource.MustParse("160Gi")), StorageClassName: ptr.To("nfs"), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}
			},
		} {
			ep := minimalEndpoint(ns, fmt.Sprintf("ok-%d", i))
			change(ep)
			Expect(k8sClient.Create(suiteCtx, ep, client.DryRunAll)).To(Succeed(), "form %d", i)
		}
	})

	It("defaults what the user leaves out", func() {
		ep := minimalEndpoint(ns, "defaults")
		ep.Spec.LoRAAdapters = []v1alpha1.LoRAAdapter{{Name: "sql", URI: "org/sql"}}
		ep.Spec.Model.HFTokenSecretRef = &v1alpha1.SecretKeyRef{Name: "hf"}
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())
		s := ep.Spec
		Expect(*s.Replicas).To(BeEquivalentTo(2))
		Expect(*s.Model.GPUs).To(BeEquivalentTo(1))
		Expect(s.Routing.Strategy).To(Equal(v1alpha1.RoutingStrategyPrefixAware))
		Expect(*s.Routing.PrefixAware.PrefixLength).To(BeEquivalentTo(routing.DefaultPrefixLength))
		Expect(s.Routing.PrefixAware.ConcurrencyThreshold).To(BeNil(), "left for the operator (or a defaulting webhook)")
		Expect(s.Router.ServiceType).To(Equal(corev1.ServiceTypeClusterIP))
		Expect(*s.Router.Port).To(BeEquivalentTo(80))
		Expect(*s.LoRAAdapters[0].Replicas).To(BeEquivalentTo(1))
		Expect(s.Model.HFTokenSecretRef.Key).To(Equal("token"))
	})

	It("accepts every sample", func() {
		files, err := filepath.Glob(filepath.Join("..", "config", "samples", "serving_v1alpha1_*.yaml"))
		Expect(err).NotTo(HaveOccurred())
		Expect(files).To(HaveLen(5))
		for _, f := range files {
			data, err := os.ReadFile(f)
			Expect(err).NotTo(HaveOccurred())
			ep := &v1alpha1.LLMEndpoint{}
			Expect(yaml.UnmarshalStrict(data, ep)).To(Succeed(), f)
			ep.Namespace = ns
			Expect(k8sClient.Create(suiteCtx, ep, client.DryRunAll)).To(Succeed(), f)
		}
	})
})

var _ = Describe("LLMEndpoint reconciler", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })
	AfterEach(func() { releasePods(ns) })

	It("creates every owned object with the right content, controlled by the endpoint", func() {
		ep := minimalEndpoint(ns, "chat")
		ep.Spec.Routing.PrefixAware.ConcurrencyThreshold = ptr.To[int32](7)
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())

		Eventually(func(g Gomega) {
			for _, obj := range ownedObjects(ep) {
				g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(obj), obj)).To(Succeed(), "%T %s", obj, obj.GetName())
				ref := metav1.GetControllerOf(obj)
				g.Expect(ref).NotTo(BeNil(), "%T %s", obj, obj.GetName())
				g.Expect(ref.UID).To(Equal(ep.UID))
				g.Expect(ref.Kind).To(Equal("LLMEndpoint"))
				g.Expect(*ref.BlockOwnerDeletion).To(BeTrue())
				g.Expect(obj.GetLabels()).To(HaveKeyWithValue(LabelEndpoint, "chat"))
				g.Expect(obj.GetManagedFields()).To(ContainElement(HaveField("Manager", FieldOwner)))
			}
		}).Should(Succeed())

		vllm := getDeployment(Default, ns, vllmName(ep))
		c := vllm.Spec.Template.Spec.Containers[0]
		Expect(*vllm.Spec.Replicas).To(BeEquivalentTo(2))
		Expect(c.Image).To(Equal("vllm/vllm-openai:test"))
		Expect(c.Args).To(ContainElements("--enable-prefix-caching", "--served-model-name=llama", "--port=8000"))
		Expect(c.Resources.Limits).To(HaveKey(corev1.ResourceName("nvidia.com/gpu")))

		router := getDeployment(Default, ns, routerName(ep))
		Expect(router.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--configmap=" + ns + "/" + routingConfigMapName(ep)))
		Expect(*router.Spec.Replicas).To(BeEquivalentTo(2))

		svc := &corev1.Service{}
		Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: vllmName(ep)}, svc)).To(Succeed())
		Expect(svc.Spec.ClusterIP).To(Equal(corev1.ClusterIPNone))

		doc := routingDocument(Default, ep)
		Expect(doc.Endpoint).To(Equal(ns + "/chat"))
		Expect(doc.Strategy).To(Equal(routing.StrategyPrefixAware))
		Expect(doc.PrefixAware).To(Equal(routing.PrefixAware{PrefixLength: 4096, ConcurrencyThreshold: 7}))
		Expect(doc.Instances).To(BeEmpty())

		Eventually(func(g Gomega) {
			got := &v1alpha1.LLMEndpoint{}
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(ep), got)).To(Succeed())
			st := got.Status
			g.Expect(st.ObservedGeneration).To(Equal(got.Generation))
			g.Expect(st.Endpoint).To(Equal("http://chat." + ns + ".svc"))
			g.Expect(st.Selector).To(Equal("serving.warmroute.dev/endpoint=chat,serving.warmroute.dev/role=vllm"))
			g.Expect(st.RoutingConfigHash).NotTo(BeEmpty())
			g.Expect(meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionAvailable)).To(HaveField("Reason", v1alpha1.ReasonNoReadyInstances))
			g.Expect(meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionProgressing)).To(HaveField("Status", metav1.ConditionTrue))
			g.Expect(meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionDegraded)).To(HaveField("Status", metav1.ConditionFalse))
		}).Should(Succeed())
	})

	It("updates the objects when the spec changes, and writes nothing when nothing changed", func() {
		ep := minimalEndpoint(ns, "chat")
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())
		waitSettled(ns, "chat")
		routerBefore := getDeployment(Default, ns, routerName(ep))

		By("changing the spec")
		patch := client.MergeFrom(ep.DeepCopy())
		ep.Spec.Replicas = ptr.To[int32](3)
		ep.Spec.Model.MaxModelLen = ptr.To[int32](8192)
		ep.Spec.Routing.PrefixAware.PrefixLength = ptr.To[int32](8192)
		ep.Spec.Routing.Strategy = v1alpha1.RoutingStrategyLeastOutstandingRequests
		ep.Spec.Router.Image = "warmroute-router:v2"
		Expect(k8sClient.Patch(suiteCtx, ep, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			vllm := getDeployment(g, ns, vllmName(ep))
			g.Expect(*vllm.Spec.Replicas).To(BeEquivalentTo(3))
			g.Expect(vllm.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--max-model-len=8192"))
			doc := routingDocument(g, ep)
			g.Expect(doc.Generation).To(Equal(ep.Generation))
			g.Expect(doc.PrefixAware.PrefixLength).To(Equal(8192))
			g.Expect(doc.Strategy).To(Equal(routing.StrategyLeastOutstandingRequests))
			g.Expect(getDeployment(g, ns, routerName(ep)).Spec.Template.Spec.Containers[0].Image).To(Equal("warmroute-router:v2"))
		}).Should(Succeed())
		routerAfter := getDeployment(Default, ns, routerName(ep))
		routerAfter.Spec.Template.Spec.Containers[0].Image = routerBefore.Spec.Template.Spec.Containers[0].Image
		Expect(routerAfter.Spec.Template).To(Equal(routerBefore.Spec.Template), "only the image changed in the router's pod template")

		By("reconciling again with nothing to do")
		waitSettled(ns, "chat")
		before := resourceVersions(ep)
		writesBefore := writes.In(ns)
		key := client.ObjectKeyFromObject(ep)
		runs := reconciles.Of(key)
		// Touch every owned object's watch path and the endpoint itself
		// without changing anything the operator cares about.
		Expect(k8sClient.Patch(suiteCtx, ep, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"test":"touch"}}}`)))).To(Succeed())
		Eventually(func() int { return reconciles.Of(key) }).Should(BeNumerically(">", runs))
		Consistently(func() int { return writes.In(ns) }).Should(Equal(writesBefore), "writes in a no-op reconcile")
		after := resourceVersions(ep)
		delete(before, "*v1alpha1.LLMEndpoint/chat") // the annotation moved it
		delete(after, "*v1alpha1.LLMEndpoint/chat")
		Expect(after).To(Equal(before))
		AddReportEntry("no-op reconciles", fmt.Sprintf("%d reconciles after the touch, 0 writes", reconciles.Of(key)-runs))
	})

	It("undoes drift in an owned object", func() {
		ep := minimalEndpoint(ns, "chat")
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())
		waitSettled(ns, "chat")
		vllm := getDeployment(Default, ns, vllmName(ep))
		Expect(k8sClient.Patch(suiteCtx, vllm, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":7}}`)))).To(Succeed())
		Eventually(func() int32 { return *getDeployment(Default, ns, vllmName(ep)).Spec.Replicas }).Should(BeEquivalentTo(2))
	})

	It("refuses to take over an object it does not control", func() {
		ep := minimalEndpoint(ns, "taken")
		taken := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: routerServiceName(ep)},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 1234}}},
		}
		Expect(k8sClient.Create(suiteCtx, taken)).To(Succeed())
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())
		Eventually(func(g Gomega) {
			got := &v1alpha1.LLMEndpoint{}
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(ep), got)).To(Succeed())
			c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionDegraded)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonReconcileFailed))
			g.Expect(c.Message).To(ContainSubstring("Service taken exists and is not controlled by this LLMEndpoint"))
		}).Should(Succeed())
		Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(taken), taken)).To(Succeed())
		Expect(taken.OwnerReferences).To(BeEmpty())
		Expect(taken.Spec.Ports[0].Port).To(BeEquivalentTo(1234))
		// Everything else is still made.
		Eventually(func() error {
			return k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: vllmName(ep)}, &appsv1.Deployment{})
		}).Should(Succeed())
	})

	It("warns when one instance makes prefix-aware routing pointless", func() {
		ep := minimalEndpoint(ns, "solo")
		ep.Spec.Replicas = ptr.To[int32](1)
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(ep), ep)).To(Succeed())
			g.Expect(meta.FindStatusCondition(ep.Status.Conditions, v1alpha1.ConditionDegraded)).To(HaveField("Reason", v1alpha1.ReasonSingleInstance))
			g.Expect(eventReasons(g, ns, "solo")).To(ContainElement(v1alpha1.ReasonSingleInstance))
		}).Should(Succeed())
	})

	It("follows pods becoming ready, unready and terminating within a second", func() {
		ep := minimalEndpoint(ns, "chat")
		ep.Spec.Replicas = ptr.To[int32](3)
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())
		waitSettled(ns, "chat")

		watcher, err := clientset.CoreV1().ConfigMaps(ns).Watch(suiteCtx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("metadata.name", routingConfigMapName(ep)).String(),
		})
		Expect(err).NotTo(HaveOccurred())
		defer watcher.Stop()
		// await returns how long after start the routing document first
		// had exactly the wanted instances.
		await := func(start time.Time, want ...string) time.Duration {
			GinkgoHelper()
			sort.Strings(want)
			timeout := time.After(10 * time.Second)
			for {
				select {
				case ev := <-watcher.ResultChan():
					cm, ok := ev.Object.(*corev1.ConfigMap)
					if !ok {
						continue
					}
					doc, err := routing.Decode([]byte(cm.Data[routing.ConfigMapKey]))
					Expect(err).NotTo(HaveOccurred())
					if slices.Equal(instanceIDs(doc), want) {
						return time.Since(start)
					}
				case <-timeout:
					Fail(fmt.Sprintf("routing document never had instances %v", want))
				}
			}
		}

		pods := []*corev1.Pod{
			createInstancePod(ns, "chat", "chat-vllm-a"),
			createInstancePod(ns, "chat", "chat-vllm-b"),
			createInstancePod(ns, "chat", "chat-vllm-c"),
		}
		var latencies []time.Duration
		measure := func(what string, change func(), want ...string) {
			GinkgoHelper()
			start := time.Now()
			change()
			d := await(start, want...)
			latencies = append(latencies, d)
			GinkgoWriter.Printf("%-40s %v\n", what, d)
			Expect(d).To(BeNumerically("<", time.Second), what)
		}
		for round := range 5 {
			measure(fmt.Sprintf("round %d: a becomes ready", round), func() { setPodReady(pods[0], "10.1.0.1", true, time.Now()) }, "chat-vllm-a")
			measure(fmt.Sprintf("round %d: b becomes ready", round), func() { setPodReady(pods[1], "10.1.0.2", true, time.Now()) }, "chat-vllm-a", "chat-vllm-b")
			measure(fmt.Sprintf("round %d: a turns unready", round), func() { setPodReady(pods[0], "10.1.0.1", false, time.Now()) }, "chat-vllm-b")
			measure(fmt.Sprintf("round %d: b turns unready", round), func() { setPodReady(pods[1], "10.1.0.2", false, time.Now()) })
		}
		measure("c becomes ready", func() { setPodReady(pods[2], "10.1.0.3", true, time.Now()) }, "chat-vllm-c")
		measure("b becomes ready", func() { setPodReady(pods[1], "10.1.0.2", true, time.Now()) }, "chat-vllm-b", "chat-vllm-c")
		measure("c is deleted (terminating)", func() { Expect(k8sClient.Delete(suiteCtx, pods[2])).To(Succeed()) }, "chat-vllm-b")

		slices.Sort(latencies)
		summary := fmt.Sprintf("%d changes: median %v, p90 %v, max %v", len(latencies),
			latencies[len(latencies)/2], latencies[len(latencies)*9/10], latencies[len(latencies)-1])
		AddReportEntry("routing ConfigMap propagation", summary)
		GinkgoWriter.Printf("routing ConfigMap propagation: %s\n", summary)
		fmt.Printf("routing ConfigMap propagation: %s\n", summary)

		By("reporting the instances in the status and with events")
		Eventually(func(g Gomega) {
			got := &v1alpha1.LLMEndpoint{}
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(ep), got)).To(Succeed())
			g.Expect(got.Status.ReadyReplicas).To(BeEquivalentTo(1))
			g.Expect(got.Status.Replicas).To(BeEquivalentTo(2), "a and b; c is terminating")
			g.Expect(got.Status.Instances).To(Equal([]v1alpha1.InstanceStatus{
				{ID: "chat-vllm-a", Address: "10.1.0.1:8000", Ready: false},
				{ID: "chat-vllm-b", Address: "10.1.0.2:8000", Ready: true},
			}))
			g.Expect(eventReasons(g, ns, "chat")).To(ContainElement("RoutingUpdated"))
		}).Should(Succeed())
	})

	It("keeps a terminating instance in routing, draining, and removes it before its preStop sleep ends", func() {
		ep := minimalEndpoint(ns, "chat")
		ep.Spec.Replicas = ptr.To[int32](2)
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())
		withPreStop := func(pod *corev1.Pod) {
			// Scheduled: the API server deletes a pod on no node at once,
			// with no grace period.
			pod.Spec.NodeName = "node-1"
			pod.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
				Sleep: &corev1.SleepAction{Seconds: v1alpha1.PreStopSleepSeconds}}}
		}
		a := createInstancePodWith(ns, "chat", "chat-vllm-a", withPreStop)
		b := createInstancePodWith(ns, "chat", "chat-vllm-b", withPreStop)
		setPodReady(a, "10.1.0.1", true, time.Now())
		setPodReady(b, "10.1.0.2", true, time.Now())
		type entry struct {
			id       string
			draining bool
		}
		instances := func(g Gomega) []entry {
			cm := &corev1.ConfigMap{}
			g.Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: routingConfigMapName(ep)}, cm)).To(Succeed())
			doc, err := routing.Decode([]byte(cm.Data[routing.ConfigMapKey]))
			g.Expect(err).NotTo(HaveOccurred())
			out := []entry{}
			for _, in := range doc.Instances {
				out = append(out, entry{in.ID, in.Draining})
			}
			return out
		}
		Eventually(instances).Should(Equal([]entry{{"chat-vllm-a", false}, {"chat-vllm-b", false}}))

		// The finalizer keeps b terminating, as a kubelet running its
		// preStop sleep would; its Ready condition stays as it was.
		start := time.Now()
		Expect(k8sClient.Delete(suiteCtx, b)).To(Succeed())
		Eventually(instances).WithTimeout(time.Second).WithPolling(20 * time.Millisecond).
			Should(Equal([]entry{{"chat-vllm-a", false}, {"chat-vllm-b", true}}))
		marked := time.Since(start)
		// Nothing changes in the cluster meanwhile: the operator's own
		// requeue removes it.
		Eventually(instances).WithTimeout(v1alpha1.PreStopSleepSeconds * time.Second).WithPolling(50 * time.Millisecond).
			Should(Equal([]entry{{"chat-vllm-a", false}}))
		left := time.Since(start)
		window := time.Duration(v1alpha1.PreStopSleepSeconds-v1alpha1.DrainLeaveMarginSeconds) * time.Second
		summary := fmt.Sprintf("marked draining after %v, removed after %v (window %v, preStop %ds)",
			marked.Round(time.Millisecond), left.Round(time.Millisecond), window, v1alpha1.PreStopSleepSeconds)
		AddReportEntry("draining instance", summary)
		GinkgoWriter.Printf("draining instance: %s\n", summary)
		// The deletion is stamped in whole seconds: up to one early.
		Expect(left).To(BeNumerically(">", window-time.Second-time.Millisecond*500), summary)
		Expect(left).To(BeNumerically("<", window+2*time.Second), summary)

		By("recording its leaving in an event")
		Eventually(func(g Gomega) {
			var notes []string
			for _, e := range endpointEvents(g, ns, "chat") {
				notes = append(notes, e.Note)
			}
			g.Expect(notes).To(ContainElement("1 instances routable, 1 draining -chat-vllm-b"))
		}).Should(Succeed())

		By("dropping at once an instance that is terminating and not ready")
		setPodReady(a, "10.1.0.1", false, time.Now())
		Expect(k8sClient.Delete(suiteCtx, a)).To(Succeed())
		Eventually(instances).WithTimeout(time.Second).Should(BeEmpty())
	})

	It("annotates ready instances with a deletion cost that grows with their cache's age", func() {
		ep := minimalEndpoint(ns, "chat")
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())
		old := createInstancePod(ns, "chat", "chat-vllm-old")
		young := createInstancePod(ns, "chat", "chat-vllm-young")
		setPodReady(old, "10.1.0.1", true, time.Now().Add(-10*time.Minute))
		setPodReady(young, "10.1.0.2", true, time.Now().Add(-90*time.Second))
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(old), old)).To(Succeed())
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(young), young)).To(Succeed())
			g.Expect(old.Annotations).To(HaveKeyWithValue(annotationPodDeletionCost, "3"))
			g.Expect(young.Annotations).To(HaveKeyWithValue(annotationPodDeletionCost, "1"))
		}).Should(Succeed())
	})

	It("annotates instances with a deletion cost by the cache hits they served, when measured", func() {
		ep := minimalEndpoint(ns, "chat")
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())
		// Oldest is coldest: the hits, not the age, set the cost.
		suiteHeat.set(client.ObjectKeyFromObject(ep), map[string]float64{"chat-vllm-old": 3, "chat-vllm-hot": 5000})
		old := createInstancePod(ns, "chat", "chat-vllm-old")
		hot := createInstancePod(ns, "chat", "chat-vllm-hot")
		unmeasured := createInstancePod(ns, "chat", "chat-vllm-new")
		setPodReady(old, "10.1.0.1", true, time.Now().Add(-48*time.Hour))
		setPodReady(hot, "10.1.0.2", true, time.Now().Add(-2*time.Minute))
		setPodReady(unmeasured, "10.1.0.3", true, time.Now().Add(-90*time.Second))
		costs := func(g Gomega) map[string]string {
			out := map[string]string{}
			for _, p := range []*corev1.Pod{old, hot, unmeasured} {
				g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(p), p)).To(Succeed())
				out[p.Name] = p.Annotations[annotationPodDeletionCost]
			}
			return out
		}
		// 1 + floor(log2(1 + hits)): 3 hits → 3, 5,000 → 13; none yet → 0
		// (no annotation written for a zero cost on a fresh pod).
		Eventually(costs).Should(Equal(map[string]string{"chat-vllm-old": "3", "chat-vllm-hot": "13", "chat-vllm-new": ""}))
		By("following the heat as it changes")
		suiteHeat.set(client.ObjectKeyFromObject(ep), map[string]float64{"chat-vllm-old": 3, "chat-vllm-hot": 1, "chat-vllm-new": 200})
		// The reconciler recomputes on its heat refresh; a pod event
		// brings it on at once.
		setPodReady(old, "10.1.0.1", true, time.Now().Add(-48*time.Hour).Add(time.Second))
		Eventually(costs).Should(Equal(map[string]string{"chat-vllm-old": "3", "chat-vllm-hot": "2", "chat-vllm-new": "8"}))
	})

	It("is scaled through the scale subresource, by a client and by kubectl", func() {
		ep := minimalEndpoint(ns, "chat")
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())
		waitSettled(ns, "chat")

		scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 4}}
		Expect(k8sClient.SubResource("scale").Update(suiteCtx, ep, client.WithSubResourceBody(scale))).To(Succeed())
		Eventually(func() int32 { return *getDeployment(Default, ns, vllmName(ep)).Spec.Replicas }).Should(BeEquivalentTo(4))
		Expect(k8sClient.SubResource("scale").Get(suiteCtx, ep, scale)).To(Succeed())
		Expect(scale.Spec.Replicas).To(BeEquivalentTo(4))
		Expect(scale.Status.Selector).To(Equal("serving.warmroute.dev/endpoint=chat,serving.warmroute.dev/role=vllm"))
		Eventually(func(g Gomega) {
			g.Expect(eventReasons(g, ns, "chat")).To(ContainElement("Scaled"))
		}).Should(Succeed())

		kubectl := "/usr/bin/kubectl"
		if _, err := os.Stat(kubectl); err != nil {
			Skip("no kubectl at " + kubectl)
		}
		out, err := exec.Command(kubectl, "--kubeconfig", kubeconfigPath, "-n", ns, "scale", "llmendpoint", "chat", "--replicas=5").CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
		Eventually(func() int32 { return *getDeployment(Default, ns, vllmName(ep)).Spec.Replicas }).Should(BeEquivalentTo(5))

		out, err = exec.Command(kubectl, "--kubeconfig", kubeconfigPath, "-n", ns, "get", "llme").CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
		GinkgoWriter.Println(string(out))
		Expect(string(out)).To(SatisfyAll(
			ContainSubstring("READY"), ContainSubstring("REPLICAS"), ContainSubstring("STRATEGY"), ContainSubstring("ENDPOINT"), ContainSubstring("AGE"),
			ContainSubstring("PREFIX_AWARE"), ContainSubstring("http://chat."+ns+".svc"),
		))
	})

	It("accepts a HorizontalPodAutoscaler that targets it", func() {
		Expect(k8sClient.Create(suiteCtx, minimalEndpoint(ns, "chat"))).To(Succeed())
		Expect(k8sClient.Create(suiteCtx, endpointHPA(ns, "chat"))).To(Succeed())
	})

	It("leaves the owned objects to the garbage collector on deletion", func() {
		ep := minimalEndpoint(ns, "chat")
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())
		waitSettled(ns, "chat")
		for _, obj := range ownedObjects(ep) {
			Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
			Expect(obj.GetOwnerReferences()).To(ConsistOf(metav1.OwnerReference{
				APIVersion: v1alpha1.GroupVersion.String(), Kind: "LLMEndpoint", Name: "chat", UID: ep.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}), "%T %s", obj, obj.GetName())
		}
		Expect(k8sClient.Delete(suiteCtx, ep)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(ep), ep))
		}).Should(BeTrue(), "no finalizer holds the endpoint")
	})
})

// endpointHPA is an autoscaling/v2 HorizontalPodAutoscaler for an endpoint.
func endpointHPA(ns, name string) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{
				APIVersion: v1alpha1.GroupVersion.String(), Kind: "LLMEndpoint", Name: name,
			},
			MinReplicas: ptr.To[int32](3),
			MaxReplicas: 6,
			Metrics: []autoscalingv2.MetricSpec{{
				Type: autoscalingv2.ResourceMetricSourceType,
				Resource: &autoscalingv2.ResourceMetricSource{
					Name:   corev1.ResourceCPU,
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](80)},
				},
			}},
		},
	}
}

// eventReasons lists the reasons of the Events about an endpoint.
func eventReasons(g Gomega, ns, name string) []string {
	var reasons []string
	for _, e := range endpointEvents(g, ns, name) {
		reasons = append(reasons, e.Reason)
	}
	return reasons
}

// endpointEvents are the events about the endpoint.
func endpointEvents(g Gomega, ns, name string) []eventsv1.Event {
	var events eventsv1.EventList
	g.Expect(k8sClient.List(suiteCtx, &events, client.InNamespace(ns))).To(Succeed())
	var out []eventsv1.Event
	for _, e := range events.Items {
		if e.Regarding.Kind == "LLMEndpoint" && e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out
}

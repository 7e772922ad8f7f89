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

package webhooks

import (
	"github.com/warmroute/warmroute/test/localcluster"

	"context"
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// The suite runs the webhooks in a manager against a real kube-apiserver
// (envtest), which calls them through the MutatingWebhookConfiguration and
// ValidatingWebhookConfiguration that `make manifests` generates into
// config/webhook: what is tested is what a user's kubectl would see.

var (
	testEnv  *envtest.Environment
	k8s      client.Client // records the API server's warnings in warned
	warned   = &warningRecorder{}
	suiteCtx context.Context
	cancel   context.CancelFunc
)

func TestWebhooks(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "LLMEndpoint webhooks")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	suiteCtx, cancel = context.WithCancel(context.Background())

	binDir, err := localcluster.BinDir()
	Expect(err).NotTo(HaveOccurred())
	testEnv = &envtest.Environment{
		BinaryAssetsDirectory: binDir,
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		WebhookInstallOptions: envtest.WebhookInstallOptions{
			Paths: []string{filepath.Join("..", "config", "webhook")},
		},
	}
	cfg, err := testEnv.Start()
	Expect(err).NotTo(HaveOccurred())

	scheme := runtime.NewScheme()
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(servingv1alpha1.AddToScheme(scheme)).To(Succeed())

	opts := &testEnv.WebhookInstallOptions
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		WebhookServer: webhook.NewServer(webhook.Options{
			Host:    opts.LocalServingHost,
			Port:    opts.LocalServingPort,
			CertDir: opts.LocalServingCertDir,
		}),
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(SetupLLMEndpointWebhookWithManager(mgr, nil)).To(Succeed())
	go func() {
		defer GinkgoRecover()
		Expect(mgr.Start(suiteCtx)).To(Succeed())
	}()

	userCfg := rest.CopyConfig(cfg)
	userCfg.WarningHandlerWithContext = warned
	k8s, err = client.New(userCfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())

	addr := net.JoinHostPort(opts.LocalServingHost, strconv.Itoa(opts.LocalServingPort))
	Eventually(func() error {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // probing that the server listens
		if err != nil {
			return err
		}
		return conn.Close()
	}, 20*time.Second, 100*time.Millisecond).Should(Succeed())
})

var _ = AfterSuite(func() {
	if cancel != nil {
		cancel()
	}
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// warningRecorder keeps the warnings the API server returned since reset.
type warningRecorder struct {
	mu   sync.Mutex
	seen []string
}

func (w *warningRecorder) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

func (w *warningRecorder) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = nil
}

func (w *warningRecorder) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.seen...)
}

var nsCounter int

// newNamespace creates a namespace of its own for one spec.
func newNamespace() string {
	nsCounter++
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("webhooks-%d", nsCounter)}}
	Expect(k8s.Create(suiteCtx, ns)).To(Succeed())
	return ns.Name
}

// endpoint is a small valid LLMEndpoint that draws no warning.
func endpoint(ns, name string) *servingv1alpha1.LLMEndpoint {
	return &servingv1alpha1.LLMEndpoint{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: servingv1alpha1.LLMEndpointSpec{
			Model: servingv1alpha1.ModelSpec{
				Name: "qwen-0.5b",
				URI:  "Qwen/Qwen2.5-0.5B-Instruct",
			},
		},
	}
}

// create creates e and returns the warnings the API server sent back.
func create(e *servingv1alpha1.LLMEndpoint) ([]string, error) {
	warned.reset()
	err := k8s.Create(suiteCtx, e)
	return warned.list(), err
}

// update updates e and returns the warnings the API server sent back.
func update(e *servingv1alpha1.LLMEndpoint) ([]string, error) {
	warned.reset()
	err := k8s.Update(suiteCtx, e)
	return warned.list(), err
}

// causeFields returns the fields an Invalid error names.
func causeFields(err error) []string {
	var status apierrors.APIStatus
	ExpectWithOffset(1, err).To(BeAssignableToTypeOf(&apierrors.StatusError{}))
	status = err.(apierrors.APIStatus)
	ExpectWithOffset(1, apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
	var fields []string
	if d := status.Status().Details; d != nil {
		for _, c := range d.Causes {
			fields = append(fields, c.Field)
		}
	}
	return fields
}

var _ = Describe("LLMEndpoint admission", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	Context("allowed", func() {
		It("admits a plain endpoint without a warning", func() {
			warnings, err := create(endpoint(ns, "plain"))
			Expect(err).NotTo(HaveOccurred())
			Expect(warnings).To(BeEmpty())
		})

		It("admits an endpoint whose referenced Secret and PVC exist, without a warning", func() {
			Expect(k8s.Create(suiteCtx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hf-token"},
				StringData: map[string]string{"token": "hf_x"},
			})).To(Succeed())
			Expect(k8s.Create(suiteCtx, pvc(ns, "models"))).To(Succeed())
			Expect(k8s.Create(suiteCtx, pvc(ns, "adapters"))).To(Succeed())

			e := endpoint(ns, "referenced")
			e.Spec.Model.URI = "pvc://models/Qwen2.5-0.5B-Instruct"
			e.Spec.Model.HFTokenSecretRef = &servingv1alpha1.SecretKeyRef{Name: "hf-token"}
			e.Spec.LoRAAdapters = []servingv1alpha1.LoRAAdapter{{Name: "sql", URI: "pvc://adapters/sql"}}
			warnings, err := create(e)
			Expect(err).NotTo(HaveOccurred())
			Expect(warnings).To(BeEmpty())
		})

		It("admits every update that keeps the served model name", func() {
			e := endpoint(ns, "edited")
			_, err := create(e)
			Expect(err).NotTo(HaveOccurred())
			e.Spec.Model.URI = "Qwen/Qwen2.5-1.5B-Instruct"
			e.Spec.Replicas = ptr.To[int32](3)
			warnings, err := update(e)
			Expect(err).NotTo(HaveOccurred())
			Expect(warnings).To(BeEmpty())
		})

		It("admits deleting an endpoint", func() {
			e := endpoint(ns, "gone")
			_, err := create(e)
			Expect(err).NotTo(HaveOccurred())
			Expect(k8s.Delete(suiteCtx, e)).To(Succeed())
		})
	})

	Context("defaulted", func() {
		It("derives tensorParallelSize, concurrencyThreshold and router replicas from the spec", func() {
			e := endpoint(ns, "big")
			e.Spec.Replicas = ptr.To[int32](20)
			e.Spec.Model.GPUs = ptr.To[int32](4)
			_, err := create(e)
			Expect(err).NotTo(HaveOccurred())

			// What the API server stored, not what the client sent.
			got := &servingv1alpha1.LLMEndpoint{}
			Expect(k8s.Get(suiteCtx, client.ObjectKeyFromObject(e), got)).To(Succeed())
			Expect(got.Spec.Model.TensorParallelSize).To(HaveValue(BeEquivalentTo(4)))
			Expect(got.Spec.Routing.PrefixAware.ConcurrencyThreshold).To(HaveValue(BeEquivalentTo(40)))
			Expect(got.Spec.Router.Replicas).To(HaveValue(BeEquivalentTo(3)))
			// The CRD's own defaults are still there.
			Expect(got.Spec.Routing.Strategy).To(Equal(servingv1alpha1.RoutingStrategyPrefixAware))
			Expect(got.Spec.Routing.PrefixAware.PrefixLength).To(HaveValue(BeEquivalentTo(4096)))
		})

		It("uses the CRD's default of one GPU when gpus is unset", func() {
			e := endpoint(ns, "one-gpu")
			_, err := create(e)
			Expect(err).NotTo(HaveOccurred())
			Expect(e.Spec.Model.TensorParallelSize).To(HaveValue(BeEquivalentTo(1)))
			Expect(e.Spec.Routing.PrefixAware.ConcurrencyThreshold).To(HaveValue(BeEquivalentTo(10)))
			Expect(e.Spec.Router.Replicas).To(HaveValue(BeEquivalentTo(2)))
		})

		It("leaves tensorParallelSize unset on CPU and uses a low concurrency threshold", func() {
			e := endpoint(ns, "cpu")
			e.Spec.Model.GPUs = ptr.To[int32](0)
			_, err := create(e)
			Expect(err).NotTo(HaveOccurred())
			Expect(e.Spec.Model.TensorParallelSize).To(BeNil())
			Expect(e.Spec.Routing.PrefixAware.ConcurrencyThreshold).To(HaveValue(BeEquivalentTo(4)))
		})

		It("keeps values the user chose", func() {
			e := endpoint(ns, "chosen")
			e.Spec.Model.GPUs = ptr.To[int32](4)
			e.Spec.Model.TensorParallelSize = ptr.To[int32](2)
			e.Spec.Routing.PrefixAware.ConcurrencyThreshold = ptr.To[int32](7)
			e.Spec.Router.Replicas = ptr.To[int32](5)
			_, err := create(e)
			Expect(err).NotTo(HaveOccurred())
			Expect(e.Spec.Model.TensorParallelSize).To(HaveValue(BeEquivalentTo(2)))
			Expect(e.Spec.Routing.PrefixAware.ConcurrencyThreshold).To(HaveValue(BeEquivalentTo(7)))
			Expect(e.Spec.Router.Replicas).To(HaveValue(BeEquivalentTo(5)))

			e.Spec.Model.GPUs = ptr.To[int32](8)
			_, err = update(e)
			Expect(err).NotTo(HaveOccurred())
			Expect(e.Spec.Model.TensorParallelSize).To(HaveValue(BeEquivalentTo(2)))
			Expect(e.Spec.Routing.PrefixAware.ConcurrencyThreshold).To(HaveValue(BeEquivalentTo(7)))
		})

		It("derives defaulted fields again when the fields they come from change", func() {
			e := endpoint(ns, "follow")
			e.Spec.Model.GPUs = ptr.To[int32](4)
			_, err := create(e)
			Expect(err).NotTo(HaveOccurred())
			Expect(e.Spec.Model.TensorParallelSize).To(HaveValue(BeEquivalentTo(4)))

			// Without re-deriving, tensorParallelSize 4 > gpus 2 would
			// fail the CRD's CEL rule for a value nobody chose.
			e.Spec.Model.GPUs = ptr.To[int32](2)
			_, err = update(e)
			Expect(err).NotTo(HaveOccurred())
			Expect(e.Spec.Model.TensorParallelSize).To(HaveValue(BeEquivalentTo(2)))
			Expect(e.Spec.Routing.PrefixAware.ConcurrencyThreshold).To(HaveValue(BeEquivalentTo(20)))

			e.Spec.Model.GPUs = ptr.To[int32](0)
			_, err = update(e)
			Expect(err).NotTo(HaveOccurred())
			Expect(e.Spec.Model.TensorParallelSize).To(BeNil())
			Expect(e.Spec.Routing.PrefixAware.ConcurrencyThreshold).To(HaveValue(BeEquivalentTo(4)))
		})
	})

	Context("warned", func() {
		It("warns about one instance with PREFIX_AWARE", func() {
			e := endpoint(ns, "single")
			e.Spec.Replicas = ptr.To[int32](1)
			warnings, err := create(e)
			Expect(err).NotTo(HaveOccurred())
			Expect(warnings).To(ConsistOf(And(HavePrefix("spec.replicas:"), ContainSubstring("PREFIX_AWARE"))))
		})

		It("does not warn about one instance with another strategy, nor about zero", func() {
			e := endpoint(ns, "single-random")
			e.Spec.Replicas = ptr.To[int32](1)
			e.Spec.Routing.Strategy = servingv1alpha1.RoutingStrategyLeastOutstandingRequests
			warnings, err := create(e)
			Expect(err).NotTo(HaveOccurred())
			Expect(warnings).To(BeEmpty())

			z := endpoint(ns, "zero")
			z.Spec.Replicas = ptr.To[int32](0)
			warnings, err = create(z)
			Expect(err).NotTo(HaveOccurred())
			Expect(warnings).To(BeEmpty())
		})

		It("warns when prefixLength is longer than the model's context", func() {
			e := endpoint(ns, "long-prefix")
			e.Spec.Model.MaxModelLen = ptr.To[int32](2048) // ≈ 8192 characters
			e.Spec.Routing.PrefixAware.PrefixLength = ptr.To[int32](16384)
			warnings, err := create(e)
			Expect(err).NotTo(HaveOccurred())
			Expect(warnings).To(ConsistOf(And(HavePrefix("spec.routing.prefixAware.prefixLength:"), ContainSubstring("maxModelLen 2048"))))

			fits := endpoint(ns, "fitting-prefix")
			fits.Spec.Model.MaxModelLen = ptr.To[int32](4096)
			fits.Spec.Routing.PrefixAware.PrefixLength = ptr.To[int32](16384)
			warnings, err = create(fits)
			Expect(err).NotTo(HaveOccurred())
			Expect(warnings).To(BeEmpty())
		})

		It("warns about missing PVCs, once per claim, and never reads the Secret", func() {
			e := endpoint(ns, "dangling")
			e.Spec.Model.URI = "pvc://models/Qwen2.5-0.5B-Instruct"
			e.Spec.Model.HFTokenSecretRef = &servingv1alpha1.SecretKeyRef{Name: "hf-token"}
			e.Spec.LoRAAdapters = []servingv1alpha1.LoRAAdapter{
				{Name: "a", URI: "pvc://adapters/a"},
				{Name: "b", URI: "pvc://adapters/b"},
				{Name: "c", URI: "org/c-lora"},
			}
			warnings, err := create(e)
			Expect(err).NotTo(HaveOccurred())
			// The operator may not read Secrets: a missing one shows in
			// the status, from the pods, not here.
			Expect(warnings).To(ConsistOf(
				And(HavePrefix("spec.model.uri:"), ContainSubstring("PersistentVolumeClaim "+ns+"/models does not exist")),
				And(HavePrefix("spec.loraAdapters[0].uri:"), ContainSubstring("PersistentVolumeClaim "+ns+"/adapters does not exist")),
			))

			// Once they exist, the next update is quiet.
			Expect(k8s.Create(suiteCtx, pvc(ns, "models"))).To(Succeed())
			Expect(k8s.Create(suiteCtx, pvc(ns, "adapters"))).To(Succeed())
			e.Spec.Replicas = ptr.To[int32](3)
			warnings, err = update(e)
			Expect(err).NotTo(HaveOccurred())
			Expect(warnings).To(BeEmpty())
		})

		It("warns about a model cache claim that cannot serve instances on several nodes", func() {
			e := endpoint(ns, "cache-rwo")
			e.Spec.Model.Cache = &servingv1alpha1.ModelCacheSpec{Size: ptr.To(resource.MustParse("20Gi")), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}
			warnings, err := create(e)
			Expect(err).NotTo(HaveOccurred())
			Expect(warnings).To(ConsistOf(And(HavePrefix("spec.model.cache.accessModes:"), ContainSubstring("with 2 instances attaches to one node only"))))

			// One instance needs no sharing.
			e.Spec.Replicas = ptr.To[int32](1)
			warnings, err = update(e)
			Expect(err).NotTo(HaveOccurred())
			Expect(warnings).NotTo(ContainElement(HavePrefix("spec.model.cache")))

			theirs := endpoint(ns, "cache-claim")
			theirs.Spec.Model.Cache = &servingv1alpha1.ModelCacheSpec{ClaimName: "hf-cache"}
			warnings, err = create(theirs)
			Expect(err).NotTo(HaveOccurred())
			Expect(warnings).To(ConsistOf(And(HavePrefix("spec.model.cache.claimName:"), ContainSubstring("hf-cache does not exist"))))

			Expect(k8s.Create(suiteCtx, pvc(ns, "hf-cache"))).To(Succeed()) // ReadOnlyMany
			theirs.Spec.Routing.PrefixAware.PrefixLength = ptr.To[int32](8192)
			warnings, err = update(theirs)
			Expect(err).NotTo(HaveOccurred())
			Expect(warnings).To(ConsistOf(And(HavePrefix("spec.model.cache.claimName:"), ContainSubstring("[ReadOnlyMany]"), ContainSubstring("ReadWriteMany"))))

			// The default, ReadWriteMany, is quiet.
			shared := endpoint(ns, "cache-rwx")
			shared.Spec.Model.Cache = &servingv1alpha1.ModelCacheSpec{Size: ptr.To(resource.MustParse("20Gi"))}
			warnings, err = create(shared)
			Expect(err).NotTo(HaveOccurred())
			Expect(warnings).To(BeEmpty())
		})

		It("warns that a GPU resource in spec.model.resources is ignored", func() {
			e := endpoint(ns, "gpu-resource")
			e.Spec.Model.Resources = &corev1.ResourceRequirements{
				Limits: corev1.ResourceList{gpuResource: resource.MustParse("2")},
			}
			warnings, err := create(e)
			Expect(err).NotTo(HaveOccurred())
			Expect(warnings).To(ConsistOf(HavePrefix("spec.model.resources: nvidia.com/gpu is ignored")))
		})

		It("warns that flow control without auth binds only honest clients, and about tenants the auth never yields", func() {
			e := endpoint(ns, "unauthenticated-flow")
			e.Spec.Router.FlowControl = &servingv1alpha1.FlowControl{Tenants: []servingv1alpha1.TenantFlowEntry{{Name: "team-a"}}}
			warnings, err := create(e)
			Expect(err).NotTo(HaveOccurred())
			Expect(warnings).To(ConsistOf(And(HavePrefix("spec.router.flowControl: without spec.router.auth"), ContainSubstring("honest clients"))))

			e.Spec.Router.Auth = &servingv1alpha1.RouterAuth{Mode: servingv1alpha1.RouterAuthAPIKeys, APIKeys: &servingv1alpha1.APIKeysAuth{SecretName: "team-keys"}}
			e.Spec.Router.FlowControl.Tenants = append(e.Spec.Router.FlowControl.Tenants, servingv1alpha1.TenantFlowEntry{Name: "team b"})
			warnings, err = update(e)
			Expect(err).NotTo(HaveOccurred())
			Expect(warnings).To(ConsistOf(And(HavePrefix(`spec.router.flowControl.tenants[1].name: "team b" can never be a tenant`), ContainSubstring("APIKeys"))))
		})

		It("warns when an adapter asks for more instances than there are", func() {
			e := endpoint(ns, "greedy-adapter")
			e.Spec.LoRAAdapters = []servingv1alpha1.LoRAAdapter{{Name: "sql", URI: "org/sql-lora", Replicas: ptr.To[int32](5)}}
			warnings, err := create(e)
			Expect(err).NotTo(HaveOccurred())
			Expect(warnings).To(ConsistOf(HavePrefix("spec.loraAdapters[0].replicas: 5 is more than the 2 instances")))
		})
	})

	Context("denied", func() {
		It("refuses changing the served model name in place", func() {
			e := endpoint(ns, "renamed")
			_, err := create(e)
			Expect(err).NotTo(HaveOccurred())

			e.Spec.Model.Name = "qwen-1.5b"
			_, err = update(e)
			Expect(causeFields(err)).To(ConsistOf("spec.model.name"))
			Expect(err.Error()).To(ContainSubstring("cannot change in place"))

			stored := &servingv1alpha1.LLMEndpoint{}
			Expect(k8s.Get(suiteCtx, client.ObjectKeyFromObject(e), stored)).To(Succeed())
			Expect(stored.Spec.Model.Name).To(Equal("qwen-0.5b"))
		})

		It("refuses node selector labels Kubernetes would refuse on the pods", func() {
			e := endpoint(ns, "bad-selector")
			e.Spec.Model.NodeSelector = map[string]string{"nvidia.com/gpu product": "L40S", "ok": "not ok!"}
			_, err := create(e)
			Expect(causeFields(err)).To(ConsistOf("spec.model.nodeSelector", "spec.model.nodeSelector"))
		})

		It("refuses requests above their limits, naming each", func() {
			e := endpoint(ns, "bad-resources")
			e.Spec.Model.Resources = &corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Gi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("16Gi")},
			}
			e.Spec.Router.Resources = &corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")},
			}
			_, err := create(e)
			Expect(causeFields(err)).To(ConsistOf("spec.model.resources.requests[memory]", "spec.router.resources.requests[cpu]"))
		})

		It("refuses a trusted tenant header that every pod could set, and warns when the NetworkPolicies are off", func() {
			gated := func(name string) *servingv1alpha1.LLMEndpoint {
				e := endpoint(ns, name)
				e.Spec.Router.Auth = &servingv1alpha1.RouterAuth{Mode: servingv1alpha1.RouterAuthTrustedHeader, TrustedHeader: &servingv1alpha1.TrustedHeaderAuth{Name: "X-Gateway-Tenant"}}
				return e
			}
			_, err := create(gated("open"))
			Expect(causeFields(err)).To(ConsistOf("spec.networkPolicy.routerFrom"))
			Expect(err.Error()).To(ContainSubstring("mode TrustedHeader needs routerFrom"))

			e := gated("behind-gateway")
			e.Spec.NetworkPolicy.RouterFrom = []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "gateway"}}}}
			warnings, err := create(e)
			Expect(err).NotTo(HaveOccurred())
			Expect(warnings).To(BeEmpty())

			off := gated("own-network")
			off.Spec.NetworkPolicy.Enabled = ptr.To(false)
			warnings, err = create(off)
			Expect(err).NotTo(HaveOccurred())
			Expect(warnings).To(ConsistOf(And(HavePrefix("spec.networkPolicy.enabled: false"), ContainSubstring("TrustedHeader"))))
		})

		It("refuses a claim path that leaves the claim, which the CRD's URI rule lets through", func() {
			e := endpoint(ns, "escaping")
			e.Spec.LoRAAdapters = []servingv1alpha1.LoRAAdapter{{Name: "sql", URI: "pvc://adapters/../sql"}}
			_, err := create(e)
			Expect(causeFields(err)).To(ConsistOf("spec.loraAdapters[0].uri"))
			Expect(err.Error()).To(ContainSubstring("no '..'"))
		})

		It("refuses what vLLM would exit on or that weakens its prefix-cache hash, and admits the rest", func() {
			e := endpoint(ns, "old-release")
			e.Spec.Model.Image = "vllm/vllm-openai:v0.11.0"
			e.Spec.Model.MaxLoras = ptr.To[int32](2)
			e.Spec.Model.MaxLoraRank = ptr.To[int32](10)
			e.Spec.Model.Args = []string{"--enforce-eager", "--prefix-caching-hash-algo=xxhash"}
			_, err := create(e)
			Expect(causeFields(err)).To(ConsistOf("spec.model.image", "spec.model.maxLoraRank", "spec.model.args[1]"), "%v", err)
			Expect(err.Error()).To(ContainSubstring("older than " + OldestVLLMRelease))

			e = endpoint(ns, "oldest-release")
			e.Spec.Model.Image = "vllm/vllm-openai:" + OldestVLLMRelease
			e.Spec.Model.MaxLoras = ptr.To[int32](2)
			e.Spec.Model.MaxLoraRank = ptr.To[int32](64)
			e.Spec.Model.Args = []string{"--prefix-caching-hash-algo=sha256_cbor"}
			_, err = create(e)
			Expect(err).NotTo(HaveOccurred())
		})

		// The webhook does not repeat these: the API server refuses them
		// before it calls the webhook, naming the field.
		DescribeTable("still lets the CRD's CEL rules refuse what they cover",
			func(mutate func(*servingv1alpha1.LLMEndpoint), field, message string) {
				e := endpoint(ns, "cel")
				mutate(e)
				_, err := create(e)
				Expect(causeFields(err)).To(ConsistOf(field))
				Expect(err.Error()).To(ContainSubstring(field), "the message names the field")
				Expect(err.Error()).To(ContainSubstring(message))
			},
			Entry("tensorParallelSize above gpus", func(e *servingv1alpha1.LLMEndpoint) {
				e.Spec.Model.GPUs = ptr.To[int32](1)
				e.Spec.Model.TensorParallelSize = ptr.To[int32](2)
			}, "spec.model.tensorParallelSize", "must not exceed spec.model.gpus"),
			Entry("an owned flag in args, underscore spelling", func(e *servingv1alpha1.LLMEndpoint) {
				e.Spec.Model.Args = []string{"--gpu-memory-utilization=0.9", "--shutdown_timeout=600"}
			}, "spec.model.args", "must not set --host"),
			Entry("a config file in args", func(e *servingv1alpha1.LLMEndpoint) {
				e.Spec.Model.Args = []string{"--config", "/etc/vllm.yaml"}
			}, "spec.model.args", "--config"),
			Entry("prefix caching switched off in args", func(e *servingv1alpha1.LLMEndpoint) {
				e.Spec.Model.Args = []string{"--no_enable_prefix_caching"}
			}, "spec.model.args", "must not switch prefix caching or LoRA"),
			Entry("a grace period without room to drain", func(e *servingv1alpha1.LLMEndpoint) {
				e.Spec.Model.TerminationGracePeriodSeconds = ptr.To[int64](20)
			}, "spec.model.terminationGracePeriodSeconds", "greater than or equal to 30"),
			Entry("a model URI of no known shape", func(e *servingv1alpha1.LLMEndpoint) {
				e.Spec.Model.URI = "s3://bucket/llama"
			}, "spec.model.uri", "must be a Hugging Face id"),
			Entry("an empty Hugging Face id", func(e *servingv1alpha1.LLMEndpoint) {
				e.Spec.Model.URI = "hf://"
			}, "spec.model.uri", "must be a Hugging Face id"),
			Entry("a flow-control weight of 0", func(e *servingv1alpha1.LLMEndpoint) {
				e.Spec.Router.FlowControl = &servingv1alpha1.FlowControl{Tenants: []servingv1alpha1.TenantFlowEntry{{Name: "a", TenantFlow: servingv1alpha1.TenantFlow{Weight: ptr.To[int32](0)}}}}
			}, "spec.router.flowControl.tenants[0].weight", "must be between 1 and 1000"),
			Entry("a claim name that is no PVC name", func(e *servingv1alpha1.LLMEndpoint) {
				e.Spec.LoRAAdapters = []servingv1alpha1.LoRAAdapter{{Name: "sql", URI: "pvc://Adapters_1/sql"}}
			}, "spec.loraAdapters[0].uri", "must be a Hugging Face id"),
		)
	})
})

func pvc(ns, name string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany},
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			},
		},
	}
}

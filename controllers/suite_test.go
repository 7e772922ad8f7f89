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
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/internal/inferencepool"
	"github.com/warmroute/warmroute/test/localcluster"
)

// The integration suite runs the reconciler against a real kube-apiserver
// (envtest: etcd and the API server, no controllers, no kubelet), so
// validation, defaulting, the scale subresource and server-side apply are
// the real ones. Pods are created and driven by the tests. The specs in
// localcluster_test.go add kube-controller-manager, kube-scheduler and
// KWOK for what needs them (garbage collection, HPA, running pods).

var (
	testScheme = runtime.NewScheme()
	testEnv    *envtest.Environment
	cfg        *rest.Config
	k8sClient  client.Client
	clientset  *kubernetes.Clientset
	// kubeconfigPath is an admin kubeconfig for kubectl.
	kubeconfigPath string
	writes         *writeCounter
	reconciles     *reconcileCounter
	suiteCtx       context.Context
	suiteCancel    context.CancelFunc
	binDir         string
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(testScheme))
	utilruntime.Must(v1alpha1.AddToScheme(testScheme))
	utilruntime.Must(inferencepool.AddToScheme(testScheme))
}

func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Controllers Suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	SetDefaultEventuallyTimeout(15 * time.Second)
	SetDefaultEventuallyPollingInterval(20 * time.Millisecond)
	SetDefaultConsistentlyDuration(2 * time.Second)

	var err error
	binDir, err = localcluster.BinDir()
	Expect(err).NotTo(HaveOccurred(), "the control plane binaries (hack/build-controlplane.sh)")

	testEnv = &envtest.Environment{
		BinaryAssetsDirectory: binDir,
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred())

	k8sClient, err = client.New(cfg, client.Options{Scheme: testScheme})
	Expect(err).NotTo(HaveOccurred())
	clientset = kubernetes.NewForConfigOrDie(cfg)

	admin, err := testEnv.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, cfg)
	Expect(err).NotTo(HaveOccurred())
	kubeconfig, err := admin.KubeConfig()
	Expect(err).NotTo(HaveOccurred())
	kubeconfigPath = filepath.Join(GinkgoT().TempDir(), "kubeconfig")
	Expect(os.WriteFile(kubeconfigPath, kubeconfig, 0o600)).To(Succeed())

	suiteCtx, suiteCancel = context.WithCancel(context.Background())
	writes, reconciles = startOperator(suiteCtx, cfg)
})

var _ = AfterSuite(func() {
	if suiteCancel != nil {
		suiteCancel()
	}
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// suiteOptions are the settings of the suite's operator, which scrapes
// metrics from warmroute-system.
var suiteOptions = Options{
	VLLMImage:      "vllm/vllm-openai:test",
	RouterImage:    "warmroute-router:test",
	VLLM:           DefaultVLLMIdentity(false),
	MetricsScraper: &scraperPeer,
}

// newTestManager is the operator's manager as the tests run it: no metrics
// or probe listeners, and controller names not checked for uniqueness,
// since several managers (envtest, the local cluster, a restarted
// operator) run in one process.
func newTestManager(cfg *rest.Config) (ctrl.Manager, error) {
	return ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 testScheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  CacheOptions(),
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
}

// startOperator runs the operator's manager against cfg until ctx ends,
// with its client counting writes and its reconciler counting runs.
func startOperator(ctx context.Context, cfg *rest.Config) (*writeCounter, *reconcileCounter) {
	mgr, err := newTestManager(cfg)
	Expect(err).NotTo(HaveOccurred())
	w := &writeCounter{Client: mgr.GetClient(), byNamespace: map[string]int{}}
	// The InferencePool API is looked for every second while missing, so the
	// spec that installs it need not wait the production 30 s.
	r := &LLMEndpointReconciler{Client: w, Options: suiteOptions, Heat: suiteHeat, inferencePoolRecheck: time.Second}
	counted := &reconcileCounter{Reconciler: r, byName: map[types.NamespacedName]int{}}
	Expect(r.setup(mgr, 2, counted)).To(Succeed())
	go func() {
		defer GinkgoRecover()
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	return w, counted
}

// heatTable is the suite's cache heat: what the operator's scraper would
// have measured, per endpoint, set by the specs that need it (the others
// have none, and their deletion costs follow age).
type heatTable struct {
	mu   sync.Mutex
	pods map[types.NamespacedName]map[string]float64
}

var suiteHeat = &heatTable{pods: map[types.NamespacedName]map[string]float64{}}

func (h *heatTable) set(ep types.NamespacedName, pods map[string]float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pods[ep] = pods
}

func (h *heatTable) PodHitTokens(ep types.NamespacedName) (map[string]float64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	pods, ok := h.pods[ep]
	return maps.Clone(pods), ok
}

// writeCounter counts the operator's writes per namespace.
type writeCounter struct {
	client.Client
	mu          sync.Mutex
	byNamespace map[string]int
}

func (w *writeCounter) count(namespace string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.byNamespace[namespace]++
}

// In returns the number of writes to objects in a namespace so far.
func (w *writeCounter) In(namespace string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.byNamespace[namespace]
}

func (w *writeCounter) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	var meta struct {
		Metadata struct {
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	data, _ := json.Marshal(obj)
	_ = json.Unmarshal(data, &meta)
	w.count(meta.Metadata.Namespace)
	return w.Client.Apply(ctx, obj, opts...)
}

func (w *writeCounter) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	w.count(obj.GetNamespace())
	return w.Client.Create(ctx, obj, opts...)
}

func (w *writeCounter) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	w.count(obj.GetNamespace())
	return w.Client.Update(ctx, obj, opts...)
}

func (w *writeCounter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	w.count(obj.GetNamespace())
	return w.Client.Patch(ctx, obj, patch, opts...)
}

func (w *writeCounter) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	w.count(obj.GetNamespace())
	return w.Client.Delete(ctx, obj, opts...)
}

func (w *writeCounter) Status() client.SubResourceWriter {
	return &statusWriteCounter{SubResourceWriter: w.Client.Status(), w: w}
}

type statusWriteCounter struct {
	client.SubResourceWriter
	w *writeCounter
}

func (s *statusWriteCounter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	s.w.count(obj.GetNamespace())
	return s.SubResourceWriter.Update(ctx, obj, opts...)
}

func (s *statusWriteCounter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	s.w.count(obj.GetNamespace())
	return s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// reconcileCounter counts finished reconciles per LLMEndpoint.
type reconcileCounter struct {
	reconcile.Reconciler
	mu     sync.Mutex
	byName map[types.NamespacedName]int
}

func (c *reconcileCounter) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	res, err := c.Reconciler.Reconcile(ctx, req)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byName[req.NamespacedName]++
	return res, err
}

// Of returns how many reconciles of an endpoint have finished.
func (c *reconcileCounter) Of(name types.NamespacedName) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byName[name]
}

// newNamespace creates a namespace for one spec.
func newNamespace() string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-"}}
	Expect(k8sClient.Create(suiteCtx, ns)).To(Succeed())
	return ns.Name
}

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

package podsecurity_test

import (
	"github.com/warmroute/warmroute/test/localcluster"

	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/operator-framework/api/pkg/manifests"

	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/controllers"
	"github.com/warmroute/warmroute/test/podsecurity"
)

var repoRoot = filepath.Join("..", "..")

// restricted is a pod template that restricted-v2 admits.
func restricted() *corev1.PodTemplateSpec {
	return &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:   ptr.To(true),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Containers: []corev1.Container{{
			Name:  "app",
			Image: "app",
			SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			},
		}},
	}}
}

// The checker must refuse what restricted-v2 refuses, or the tests below
// prove nothing.
func TestRestrictedV2Checker(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*corev1.PodTemplateSpec)
		want   string // a substring of one reason; empty: admitted
	}{
		{"admitted", func(*corev1.PodTemplateSpec) {}, ""},
		{"fixed pod UID", func(p *corev1.PodTemplateSpec) { p.Spec.SecurityContext.RunAsUser = ptr.To[int64](1000) }, "pod fixes runAsUser 1000"},
		{"fixed container UID", func(p *corev1.PodTemplateSpec) {
			p.Spec.Containers[0].SecurityContext.RunAsUser = ptr.To[int64](1000)
		}, `container "app" fixes runAsUser`},
		{"fixed fsGroup", func(p *corev1.PodTemplateSpec) { p.Spec.SecurityContext.FSGroup = ptr.To[int64](2000) }, "fsGroup"},
		{"root allowed", func(p *corev1.PodTemplateSpec) { p.Spec.SecurityContext.RunAsNonRoot = nil }, "runAsNonRoot"},
		{"privilege escalation", func(p *corev1.PodTemplateSpec) {
			p.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil
		}, "allowPrivilegeEscalation"},
		{"capabilities kept", func(p *corev1.PodTemplateSpec) { p.Spec.Containers[0].SecurityContext.Capabilities = nil }, "unrestricted capabilities"},
		{"no seccomp", func(p *corev1.PodTemplateSpec) { p.Spec.SecurityContext.SeccompProfile = nil }, "seccompProfile"},
		{"localhost seccomp", func(p *corev1.PodTemplateSpec) {
			p.Spec.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("p.json")}
		}, "only RuntimeDefault"},
		{"host path", func(p *corev1.PodTemplateSpec) {
			p.Spec.Volumes = []corev1.Volume{{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		}, "hostPath"},
		{"unchecked init container", func(p *corev1.PodTemplateSpec) {
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "init"}}
		}, `init container "init" must set allowPrivilegeEscalation`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := restricted()
			tt.modify(p)
			reasons := podsecurity.RestrictedV2(p)
			if tt.want == "" {
				if len(reasons) > 0 {
					t.Fatalf("refused: %s", strings.Join(reasons, "; "))
				}
				return
			}
			for _, r := range reasons {
				if strings.Contains(r, tt.want) {
					return
				}
			}
			t.Fatalf("want a reason containing %q, got %q", tt.want, reasons)
		})
	}
}

func checkTemplate(t *testing.T, what string, p *corev1.PodTemplateSpec) {
	t.Helper()
	for _, r := range podsecurity.RestrictedV2(p) {
		t.Errorf("%s: %s", what, r)
	}
}

// The operator's own pod as `kubectl apply -k config/default` installs it.
func TestManagerFromKustomizeIsRestrictedV2(t *testing.T) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(repoRoot, "config", "default"))
	if err != nil {
		t.Fatalf("kustomize build config/default: %v", err)
	}
	var found int
	for _, r := range res.Resources() {
		if r.GetKind() != "Deployment" {
			continue
		}
		found++
		raw, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		d := &appsv1.Deployment{}
		if err := yaml.UnmarshalStrict(raw, d); err != nil {
			t.Fatal(err)
		}
		checkTemplate(t, "Deployment "+d.Name, &d.Spec.Template)
	}
	if found == 0 {
		t.Fatal("config/default has no Deployment")
	}
}

// The operator's own pod as OLM installs it from the bundle.
func TestManagerFromBundleIsRestrictedV2(t *testing.T) {
	b, err := manifests.GetBundleFromDir(filepath.Join(repoRoot, "bundle", "manifests"))
	if err != nil {
		t.Fatalf("load bundle: %v", err)
	}
	deps := b.CSV.Spec.InstallStrategy.StrategySpec.DeploymentSpecs
	if len(deps) == 0 {
		t.Fatal("the CSV installs no Deployment")
	}
	for _, d := range deps {
		checkTemplate(t, "CSV deployment "+d.Name, &d.Spec.Template)
		// On OpenShift the operator must fix no vLLM UID: it detects the
		// platform itself, unless an argument decides for it.
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, a := range c.Args {
				for _, fixed := range []string{"--platform=kubernetes", "--vllm-run-as-user", "--vllm-run-as-group", "--vllm-fs-group"} {
					if strings.HasPrefix(a, fixed) {
						t.Errorf("CSV deployment %s: %s fixes the vLLM pods' identity on OpenShift", d.Name, a)
					}
				}
			}
		}
	}
}

// Images of the rendered pods, and the user each runs as when neither the
// pod nor the platform sets one: the stock vLLM image runs as root, the
// router image (which also carries the LoRA agent) as its numeric USER.
const (
	vllmTestImage   = "registry.example/vllm:test"
	routerTestImage = "registry.example/router:test"
	// openShiftUID is a UID restricted-v2 assigns from a namespace's range.
	openShiftUID int64 = 1000680000
)

func imageUIDs(t *testing.T) map[string]int64 {
	return map[string]int64{vllmTestImage: 0, routerTestImage: dockerfileUID(t, filepath.Join(repoRoot, "sidecar", "Dockerfile.router"))}
}

// dockerfileUID is the numeric UID of a Dockerfile's last USER line: a
// named user is one the kubelet cannot check against runAsNonRoot.
func dockerfileUID(t *testing.T, path string) int64 {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var user string
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "USER" {
			user = f[1]
		}
	}
	uid, err := strconv.ParseInt(strings.SplitN(user, ":", 2)[0], 10, 64)
	if err != nil {
		t.Fatalf("%s: USER %q is not numeric: the kubelet cannot verify runAsNonRoot", path, user)
	}
	return uid
}

// renderedPods runs the reconciler with opts against a real API server and
// returns the pod templates it applied, by Deployment, for every sample
// and for the variants that change the pod templates.
func renderedPods(t *testing.T, opts controllers.Options) map[string]*corev1.PodTemplateSpec {
	t.Helper()
	endpoints := samples(t)
	cpu := endpoints[0].DeepCopy()
	cpu.Name = "on-cpu"
	cpu.Spec.Model.GPUs = ptr.To[int32](0)
	cpu.Spec.Model.TensorParallelSize = nil
	cpu.Spec.Model.URI = "/models/tiny"
	cpu.Spec.Model.HFTokenSecretRef = nil
	cached := endpoints[0].DeepCopy()
	cached.Name = "cached"
	cached.Spec.Model.Cache = &servingv1alpha1.ModelCacheSpec{Size: ptr.To(resource.MustParse("20Gi"))}
	endpoints = append(endpoints, cpu, cached)

	opts.VLLMImage, opts.RouterImage = vllmTestImage, routerTestImage
	c, stop := startOperator(t, opts)
	defer stop()

	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "podsecurity"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	for _, e := range endpoints {
		e.Namespace = ns.Name
		if err := c.Create(ctx, e); err != nil {
			t.Fatalf("create LLMEndpoint %s: %v", e.Name, err)
		}
	}
	out := map[string]*corev1.PodTemplateSpec{}
	for _, e := range endpoints {
		for _, name := range []string{e.Name + "-vllm", e.Name + "-router"} {
			out[name] = &waitForDeployment(t, c, ns.Name, name).Spec.Template
		}
	}
	return out
}

// On OpenShift the operator fixes no UID: restricted-v2 admits every pod
// and assigns it one, as which the kubelet starts the containers. The same
// pods on a cluster that assigns no UID would not start: the stock vLLM
// image runs as root.
func TestOpenShiftShapeStartsUnderRestrictedV2(t *testing.T) {
	pods := renderedPods(t, controllers.Options{VLLM: controllers.DefaultVLLMIdentity(true)})
	uids := imageUIDs(t)
	var refusedElsewhere int
	for name, p := range pods {
		checkTemplate(t, "Deployment "+name, p)
		for _, r := range podsecurity.KubeletStartsNonRoot(p, uids, ptr.To(openShiftUID)) {
			t.Errorf("Deployment %s on OpenShift: %s", name, r)
		}
		if len(podsecurity.KubeletStartsNonRoot(p, uids, nil)) > 0 {
			refusedElsewhere++
		}
	}
	if refusedElsewhere == 0 {
		t.Error("the OpenShift shape would start on plain Kubernetes too: the kubelet check proves nothing")
	}
}

// Elsewhere the vLLM pods run as the vLLM image's own non-root user with
// a matching fsGroup: the restricted Pod Security Standard admits them and
// the kubelet starts the root image. restricted-v2 would refuse the fixed
// UID, which is why OpenShift gets the other shape.
func TestKubernetesShapeStartsUnderRestricted(t *testing.T) {
	pods := renderedPods(t, controllers.Options{VLLM: controllers.DefaultVLLMIdentity(false)})
	uids := imageUIDs(t)
	for name, p := range pods {
		for _, r := range podsecurity.Restricted(p) {
			t.Errorf("Deployment %s: %s", name, r)
		}
		for _, r := range podsecurity.KubeletStartsNonRoot(p, uids, nil) {
			t.Errorf("Deployment %s on Kubernetes: %s", name, r)
		}
		if strings.HasSuffix(name, "-vllm") {
			sc := p.Spec.SecurityContext
			if sc.FSGroup == nil || *sc.FSGroup != controllers.DefaultVLLMUID {
				t.Errorf("Deployment %s: fsGroup %v, want %d (the model cache must be writable)", name, sc.FSGroup, controllers.DefaultVLLMUID)
			}
			reasons := strings.Join(podsecurity.RestrictedV2(p), "\n")
			if !strings.Contains(reasons, "runAsUser 2000") || !strings.Contains(reasons, "fsGroup 2000") {
				t.Errorf("Deployment %s: a fixed vLLM UID and fsGroup passed the restricted-v2 check: %q", name, reasons)
			}
		}
	}
}

// samples are the LLMEndpoints of config/samples.
func samples(t *testing.T) []*servingv1alpha1.LLMEndpoint {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "config", "samples", "serving_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples: %v", err)
	}
	var out []*servingv1alpha1.LLMEndpoint
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		e := &servingv1alpha1.LLMEndpoint{}
		if err := utilyaml.Unmarshal(raw, e); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, e)
	}
	return out
}

// startOperator starts a real API server and the LLMEndpoint reconciler.
func startOperator(t *testing.T, opts controllers.Options) (client.Client, func()) {
	t.Helper()
	binDir, err := localcluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: binDir,
		CRDDirectoryPaths:     []string{filepath.Join(repoRoot, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start the API server (binaries in %q): %v", binDir, err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := servingv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   controllers.CacheOptions(),
		// Each test starts its own manager in this process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&controllers.LLMEndpointReconciler{Client: mgr.GetClient(), Options: opts}).SetupWithManager(mgr, 2); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
		if err := env.Stop(); err != nil {
			t.Errorf("stop the API server: %v", err)
		}
	}
}

func waitForDeployment(t *testing.T, c client.Client, ns, name string) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{}
	NewWithT(t).Eventually(func() error {
		err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, d)
		if err != nil && !apierrors.IsNotFound(err) {
			return StopTrying("get").Wrap(err) // only absence is worth waiting out
		}
		return err
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed(), "Deployment %s/%s", ns, name)
	return d
}

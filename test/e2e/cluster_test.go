package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/router/policy"
	"github.com/warmroute/warmroute/test/harness"
	"github.com/warmroute/warmroute/test/localcluster"
)

const namespace = "default"

// applySample applies config/samples/<sample> with kubectl.
func applySample(ctx context.Context, sample string) {
	root, err := localcluster.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	_, err = env.ApplyManifest(ctx, filepath.Join(root, "config", "samples", sample))
	Expect(err).NotTo(HaveOccurred())
}

func getEndpoint(ctx context.Context, name string) *servingv1alpha1.LLMEndpoint {
	var ep servingv1alpha1.LLMEndpoint
	Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &ep)).To(Succeed())
	return &ep
}

func available(ctx context.Context, name string) func(Gomega) {
	return func(g Gomega) {
		var ep servingv1alpha1.LLMEndpoint
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &ep)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(ep.Status.Conditions, servingv1alpha1.ConditionAvailable)).To(BeTrue(),
			"conditions: %+v", ep.Status.Conditions)
	}
}

// routingDoc reads the endpoint's routing document from its ConfigMap.
func routingDoc(ctx context.Context, name string) (*routingv1alpha1.Document, error) {
	return env.RoutingDocument(ctx, name)
}

func instanceIDs(doc *routingv1alpha1.Document) []string {
	ids := make([]string, 0, len(doc.Instances))
	for _, in := range doc.Instances {
		ids = append(ids, in.ID)
	}
	return ids
}

// scale sets spec.replicas through the scale subresource, as `kubectl scale`
// and a HorizontalPodAutoscaler do.
func scale(ctx context.Context, name string, replicas int32) {
	ep := getEndpoint(ctx, name)
	s := &autoscalingv1.Scale{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       autoscalingv1.ScaleSpec{Replicas: replicas},
	}
	Expect(env.Client.SubResource("scale").Update(ctx, ep, client.WithSubResourceBody(s))).To(Succeed())
}

func mustMetric(r *harness.Router, name string, labels map[string]string) float64 {
	v, err := harness.Metric(r, name, labels)
	Expect(err).NotTo(HaveOccurred())
	return v
}

// moveCounts is warmroute_router_key_moves_total by reason, summed over
// routers.
type moveCounts map[string]float64

// keyMoves reads the routers' key moves now.
func keyMoves(routers []*harness.Router) moveCounts {
	out := moveCounts{}
	for _, reason := range []string{policy.MoveShare, policy.MoveJoining, policy.MoveHolderLeft} {
		out[reason] = sumMetric(routers, "warmroute_router_key_moves_total", map[string]string{"reason": reason})
	}
	return out
}

// sumMetric is a metric's value summed over the routers.
func sumMetric(routers []*harness.Router, name string, labels map[string]string) float64 {
	sum := 0.0
	for _, r := range routers {
		sum += mustMetric(r, name, labels)
	}
	return sum
}

// minus is the moves counted since earlier.
func (m moveCounts) minus(earlier moveCounts) moveCounts {
	out := moveCounts{}
	for reason, n := range m {
		out[reason] = n - earlier[reason]
	}
	return out
}

func describe(m map[int]string) string {
	counts := map[string]int{}
	for _, v := range m {
		counts[v]++
	}
	return fmt.Sprint(counts)
}

// ensureClaim creates a PersistentVolumeClaim bound to a volume of its own,
// as a cluster's storage would hold adapters or weights: the vLLM pods that
// mount it are scheduled only once it is bound. The simulators take a claim
// to hold whatever path is asked of it.
func ensureClaim(ctx context.Context, name string) {
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-" + name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "e2e-static",
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/nonexistent/" + name}},
		},
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany},
			StorageClassName: &pv.Spec.StorageClassName,
			VolumeName:       pv.Name,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	for _, obj := range []client.Object{pv, pvc} {
		if err := env.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			Expect(err).NotTo(HaveOccurred())
		}
	}
	Eventually(func(g Gomega) {
		var got corev1.PersistentVolumeClaim
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &got)).To(Succeed())
		g.Expect(got.Status.Phase).To(Equal(corev1.ClaimBound))
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

// simulated reports whether a simulator serves the instance (pod) id. The
// backends are live simulators, which gomega must never format (as a
// failed HaveKey on the map would) while they change: formatting a slice
// that grows underneath panics.
func simulated(id string) bool {
	_, ok := env.Agent.Backends()[id]
	return ok
}

// waitRoutable waits until the endpoint's routing document lists n
// instances, each with a simulator serving it.
func waitRoutable(ctx context.Context, name string, n int) {
	Eventually(func(g Gomega) {
		doc, err := routingDoc(ctx, name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(doc.Instances).To(HaveLen(n))
		// Other specs' endpoints may have pods too: look for ours.
		for _, in := range doc.Instances {
			g.Expect(simulated(in.ID)).To(BeTrue(), "no simulator serves instance %s yet (backends that failed to start: %v)", in.ID, env.Agent.Errors())
		}
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

// prefixAwareEndpoint is a PREFIX_AWARE endpoint of n instances of the
// simulated 8B model.
func prefixAwareEndpoint(name, model string, n int32) *servingv1alpha1.LLMEndpoint {
	return &servingv1alpha1.LLMEndpoint{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: servingv1alpha1.LLMEndpointSpec{
			Replicas: ptr.To(n),
			Model: servingv1alpha1.ModelSpec{
				Name: model, URI: "meta-llama/Llama-3.1-8B-Instruct", MaxModelLen: ptr.To(int32(16384)),
			},
			Routing: servingv1alpha1.RoutingSpec{Strategy: servingv1alpha1.RoutingStrategyPrefixAware},
		},
	}
}

// serveEndpoint creates ep (deleted when the spec or container ends),
// waits until it is Available and runs its 2 router pods until then.
func serveEndpoint(ctx context.Context, ep *servingv1alpha1.LLMEndpoint) *harness.RouterPods {
	GinkgoHelper()
	Expect(env.Client.Create(ctx, ep)).To(Succeed())
	DeferCleanup(func() { _ = env.Client.Delete(context.Background(), ep) })
	Eventually(available(ctx, ep.Name)).WithTimeout(90 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	pods, err := env.StartRouterPods(ctx, ep.Name)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(pods.Stop)
	_, err = pods.WaitReady(ctx, 2, 60*time.Second)
	Expect(err).NotTo(HaveOccurred())
	return pods
}

package e2e

import (
	"context"
	"fmt"
	"path/filepath"

	. "github.com/onsi/gomega"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
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

func describe(m map[int]string) string {
	counts := map[string]int{}
	for _, v := range m {
		counts[v]++
	}
	return fmt.Sprint(counts)
}

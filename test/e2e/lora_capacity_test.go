package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/test/objectstore"
)

// An endpoint whose instances cannot hold every adapter twice: 3 instances
// keeping 2 adapters each (maxLoras 2), adapters asking for 2 replicas.
// Half the adapters come from an S3-protocol server on loopback.
const (
	packedEndpoint  = "packed"
	packedInstances = 3
	packedCapacity  = 2
	packedReplicas  = 2
	adapterStore    = "adapter-store"
)

var _ = Describe("LoRA adapters with binding capacity", Ordered, func() {
	var (
		ctx    context.Context
		store  *objectstore.Server
		router string
		system = longText("packed", 2000)
	)

	adapter := func(i int) servingv1alpha1.LoRAAdapter {
		a := servingv1alpha1.LoRAAdapter{Name: fmt.Sprintf("tenant-%d", i), URI: fmt.Sprintf("tenants/lora-%d", i), Replicas: ptr.To[int32](packedReplicas)}
		if i%2 == 0 {
			a.URI = fmt.Sprintf("s3://adapters/tenants/%d", i)
			a.S3 = &servingv1alpha1.S3Source{Endpoint: store.URL, CredentialsSecret: adapterStore}
		}
		return a
	}
	setAdapters := func(n int) {
		list := make([]servingv1alpha1.LoRAAdapter, n)
		for i := range list {
			list[i] = adapter(i)
		}
		patch, err := json.Marshal(map[string]any{"spec": map[string]any{"loraAdapters": list}})
		Expect(err).NotTo(HaveOccurred())
		ep := &servingv1alpha1.LLMEndpoint{ObjectMeta: metav1.ObjectMeta{Name: packedEndpoint, Namespace: namespace}}
		Expect(env.Client.Patch(ctx, ep, rawMergePatch(patch))).To(Succeed())
	}
	// loraStates are the agents' reports, by pod, for failure messages.
	loraStates := func() map[string]string {
		var pods corev1.PodList
		_ = env.Client.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{"serving.warmroute.dev/endpoint": packedEndpoint})
		out := map[string]string{}
		for _, p := range pods.Items {
			out[p.Name] = p.Annotations[routingv1alpha1.AnnotationLoRAState]
		}
		return out
	}
	// settled is each placed adapter's set once every adapter placed is
	// loaded exactly where placed; unplaced adapters are left out.
	settled := func(g Gomega, n int) map[string][]string {
		doc, err := routingDoc(ctx, packedEndpoint)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(doc.Instances).To(HaveLen(packedInstances))
		g.Expect(doc.Adapters).To(HaveLen(n))
		out := map[string][]string{}
		for _, a := range doc.Adapters {
			g.Expect(a.Ready).To(Equal(a.Desired), "adapter %s; the agents report %v", a.Name, loraStates())
			if len(a.Desired) > 0 {
				out[a.Name] = a.Desired
			}
		}
		return out
	}
	podUIDs := func() map[string]types.UID { return vllmPodUIDs(ctx, packedEndpoint) }

	BeforeAll(func() {
		ctx = suiteCtx
		var err error
		store, err = objectstore.Start("tenant-key")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(store.Close)
		for i := 0; i < 8; i += 2 {
			for file, data := range map[string]string{"adapter_config.json": `{"r": 8}`, "adapter_model.safetensors": "weights"} {
				Expect(store.Put("adapters", fmt.Sprintf("tenants/%d/%s", i, file), []byte(data))).To(Succeed())
			}
		}
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: adapterStore, Namespace: namespace},
			StringData: map[string]string{"AWS_ACCESS_KEY_ID": "tenant-key", "AWS_SECRET_ACCESS_KEY": "s3cr3t"},
		}
		Expect(env.Client.Create(ctx, secret)).To(Succeed())
		DeferCleanup(func() { _ = env.Client.Delete(context.Background(), secret) })
		// The grant docs/lora.md asks of the Secret's owner: the operator
		// holds no Secret read, so it cannot give the agents one.
		for _, args := range [][]string{
			{"create", "role", "adapter-store-reader", "--verb=get", "--resource=secrets", "--resource-name=" + adapterStore},
			{"create", "rolebinding", "adapter-store-reader", "--role=adapter-store-reader", "--serviceaccount=" + namespace + ":" + packedEndpoint + "-lora-agent"},
		} {
			out, err := exec.CommandContext(ctx, env.Kubectl(), append([]string{"--kubeconfig", env.Cluster.KubeconfigPath, "--namespace", namespace}, args...)...).CombinedOutput()
			Expect(err).NotTo(HaveOccurred(), string(out))
		}
		DeferCleanup(func() {
			for _, kind := range []string{"rolebinding", "role"} {
				_ = exec.Command(env.Kubectl(), "--kubeconfig", env.Cluster.KubeconfigPath, "--namespace", namespace, "delete", kind, "adapter-store-reader").Run()
			}
		})

		agentCtx, stopAgents := context.WithCancel(suiteCtx)
		DeferCleanup(stopAgents)
		env.StartLoRAAgents(agentCtx)

		ep := &servingv1alpha1.LLMEndpoint{
			ObjectMeta: metav1.ObjectMeta{Name: packedEndpoint, Namespace: namespace},
			Spec: servingv1alpha1.LLMEndpointSpec{
				Replicas: ptr.To[int32](packedInstances),
				Model: servingv1alpha1.ModelSpec{
					Name: "mistral-7b", URI: "mistralai/Mistral-7B-Instruct-v0.3",
					MaxLoras: ptr.To[int32](packedCapacity),
				},
			},
		}
		Expect(env.Client.Create(ctx, ep)).To(Succeed())
		DeferCleanup(func() { _ = env.Client.Delete(context.Background(), ep) })
		Eventually(available(ctx, packedEndpoint)).WithTimeout(90 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		r, err := env.StartRouter(ctx, packedEndpoint)
		Expect(err).NotTo(HaveOccurred())
		Expect(r.WaitReady(ctx, 30*time.Second)).To(Succeed())
		router = r.URL
	})

	It("adds adapters one at a time, each served, moving others within the guarantee, restarting no pod", func() {
		uids := podUIDs()
		Expect(uids).To(HaveLen(packedInstances))
		var d appsv1.Deployment
		Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: packedEndpoint + "-vllm"}, &d)).To(Succeed())
		template := d.Spec.Template.DeepCopy()

		// Room for every adapter once: 3 instances × 2.
		const adapters = packedInstances * packedCapacity
		before := map[string][]string{}
		var steps []string
		for n := 1; n <= adapters; n++ {
			setAdapters(n)
			name := adapter(n - 1).Name
			var after map[string][]string
			Eventually(func(g Gomega) {
				after = settled(g, n)
				g.Expect(after).To(HaveLen(n), "every adapter placed")
			}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

			// Loads of the adapters already there, against the fewest
			// their set sizes need.
			moved, bound := 0, 0
			for a, set := range after {
				if a == name {
					continue
				}
				for _, id := range set {
					if !slices.Contains(before[a], id) {
						moved++
					}
				}
				bound += max(0, len(set)-len(before[a]))
			}
			// The guarantee (controllers/lora): an adapter of r replicas
			// moves at most r − 1 others, each stepping aside for one of
			// its replicas.
			Expect(moved).To(BeNumerically("<=", packedReplicas-1),
				"adding %s: %v → %v", name, before, after)
			steps = append(steps, fmt.Sprintf("+%s: %d other loads (lower bound %d)", name, moved, bound))

			r := chat(ctx, router, name, system, "hello", "", 4)
			Expect(r.ok()).To(BeTrue(), "%s: %d %v %s", name, r.status, r.err, r.body)
			Expect(after[name]).To(ContainElement(r.instance), "%s answered outside its set", name)
			before = after
		}
		AddReportEntry("LoRA moves, adapters added one at a time on 3 instances × 2", strings.Join(steps, "; "))
		GinkgoWriter.Println(strings.Join(steps, "\n"))

		Expect(podUIDs()).To(Equal(uids), "pods were replaced")
		Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: packedEndpoint + "-vllm"}, &d)).To(Succeed())
		Expect(equality.Semantic.DeepEqual(template, &d.Spec.Template)).To(BeTrue(), "the pod template changed")
	})

	It("reports the adapter left out when there is no room for one more", func() {
		const adapters = packedInstances*packedCapacity + 1
		setAdapters(adapters)
		Eventually(func(g Gomega) {
			ep := getEndpoint(ctx, packedEndpoint)
			var unplaced []string
			for _, a := range ep.Status.Adapters {
				if a.Unplaced {
					unplaced = append(unplaced, a.Name)
				}
			}
			g.Expect(unplaced).To(HaveLen(1))
			c := meta.FindStatusCondition(ep.Status.Conditions, servingv1alpha1.ConditionAdaptersReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(servingv1alpha1.ReasonInsufficientAdapterCapacity))
			g.Expect(c.Message).To(HaveSuffix("unplaced: " + unplaced[0]))
			AddReportEntry("AdaptersReady", c.Message)
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	})
})

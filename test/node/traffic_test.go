package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	dto "github.com/prometheus/client_model/go"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	"github.com/warmroute/warmroute/controllers"
	"github.com/warmroute/warmroute/test/promscrape"
)

// loadgenImage is the traffic spec's client (test/node/loadgen).
const loadgenImage = "warmroute.test/loadgen:test"

// loadStats is what test/node/loadgen reports.
type loadStats struct {
	OK       int64    `json:"ok"`
	Failed   int64    `json:"failed"`
	Failures []string `json:"failures"`
	// Answers are by status and error code: "200", "429 tenant_queue_full".
	Answers                  map[string]loadAnswer `json:"answers"`
	Unanswered               int64                 `json:"unanswered"`
	RefusedWithoutRetryAfter int64                 `json:"refusedWithoutRetryAfter"`
}

// loadAnswer is one kind of answer a load client got.
type loadAnswer struct {
	Count        int64       `json:"count"`
	TotalSeconds float64     `json:"totalSeconds"`
	MaxSeconds   float64     `json:"maxSeconds"`
	FirstHeaders http.Header `json:"firstHeaders"`
}

// trafficUnderScaling drives load from a client pod through the router
// Service's DNS name while the endpoint scales 2→3→2 through its scale
// subresource and the picker pod is deleted, and counts every request.
// Between the steps it checks that the routers follow the routing document
// without restarting.
func trafficUnderScaling(ctx SpecContext) {
	startLoadgen(ctx, "loadgen", endpointName, "-model="+modelName, "-workers=4")
	// progress waits until more requests have succeeded than before, so
	// that each step happens under load; it fails at the first failure.
	last := int64(0)
	progress := func(step string) {
		GinkgoHelper()
		var s loadStats
		Eventually(func(g Gomega) {
			s = loadgenStats(ctx, g, "loadgen", "GET", "stats")
			g.Expect(s.OK).To(BeNumerically(">", last+20), "requests answered")
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed(), step)
		Expect(s.Failed).To(BeZero(), "%s: failed requests: %v", step, s.Failures)
		last = s.OK
		AddReportEntry(step, fmt.Sprintf("%d requests answered, %d failed", s.OK, s.Failed))
	}
	progress("load started")

	routers := routerPods(ctx, endpointName)
	Expect(routers).To(HaveLen(2))

	scale := func(replicas int) {
		GinkgoHelper()
		_, err := kubectl(ctx, "", "-n", endpointNamespace, "scale", "llmendpoint/"+endpointName, "--replicas="+strconv.Itoa(replicas))
		Expect(err).NotTo(HaveOccurred())
	}
	start := time.Now()
	scale(3)
	instances := waitRouting(ctx, routers, 3, false)
	AddReportEntry("scaled 2→3: routers on the new document after", time.Since(start).Round(100*time.Millisecond).String())
	// The kubelet's projected copy of the ConfigMap in each router pod
	// follows too (its sync period is 5 s here, about a minute by
	// default); the routers, which also watch the ConfigMap through the
	// API, have applied it by then.
	for _, r := range routers {
		Eventually(func(g Gomega) {
			doc := mountedRouting(ctx, g, r)
			g.Expect(instanceIDs(doc)).To(Equal(instances))
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed(), "the routing volume of %s", r.Name)
	}
	expectSameRouters(ctx, routers)
	progress("scaled 2→3")

	// Scaling down, the operator drains the leaving instance: it stays in
	// the document marked draining for the first part of its preStop
	// sleep, then leaves.
	start = time.Now()
	scale(2)
	Eventually(func(g Gomega) {
		doc := routingDocument(ctx, g, endpointName)
		g.Expect(slices.ContainsFunc(doc.Instances, func(in routingv1alpha1.Instance) bool { return in.Draining })).To(BeTrue())
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(200*time.Millisecond).Should(Succeed(), "an instance marked draining")
	waitRouting(ctx, routers, 2, true)
	AddReportEntry("scaled 3→2: drained instance out of the routers after", time.Since(start).Round(100*time.Millisecond).String())
	expectSameRouters(ctx, routers)
	progress("scaled 3→2")

	// The picker's pod dies (a node drain, an eviction): the other router
	// takes the Lease, the Deployment replaces the pod, and the traffic
	// through the Service goes on.
	picker := pickerPod(ctx, routers)
	start = time.Now()
	Expect(kube.CoreV1().Pods(endpointNamespace).Delete(ctx, picker.Name, metav1.DeleteOptions{})).To(Succeed())
	Eventually(func(g Gomega) {
		lease, err := kube.CoordinationV1().Leases(endpointNamespace).Get(ctx, endpointName+"-router", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ptr.Deref(lease.Spec.HolderIdentity, "")).NotTo(BeEmpty())
		g.Expect(*lease.Spec.HolderIdentity).NotTo(ContainSubstring("@"+picker.Status.PodIP+":"), "still the deleted pod")
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	AddReportEntry("picker pod deleted: Lease moved after", time.Since(start).Round(100*time.Millisecond).String())
	_, err := kubectl(ctx, "", "-n", endpointNamespace, "rollout", "status", "deployment/"+endpointName+"-router", "--timeout=2m")
	Expect(err).NotTo(HaveOccurred(), describePods(ctx, endpointNamespace))
	// The deleted pod drains (not ready, serving what still reaches it)
	// before it exits: the load runs until it is gone.
	Eventually(func() error {
		_, err := kube.CoreV1().Pods(endpointNamespace).Get(ctx, picker.Name, metav1.GetOptions{})
		return err
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Satisfy(apierrors.IsNotFound))
	AddReportEntry("picker pod deleted: gone after", time.Since(start).Round(100*time.Millisecond).String())
	progress("picker pod replaced")

	final := loadgenStats(ctx, Default, "loadgen", "POST", "stop")
	AddReportEntry("load", fmt.Sprintf("%d requests answered, %d failed", final.OK, final.Failed))
	Expect(final.Failed).To(BeZero(), "failed requests: %v", final.Failures)
}

// startLoadgen starts a load client pod (test/node/loadgen, with args
// such as -model and -workers) against an endpoint's router Service by its
// DNS name, deleted when the spec ends.
func startLoadgen(ctx SpecContext, name, endpoint string, args ...string) {
	GinkgoHelper()
	svc, err := kube.CoreV1().Services(endpointNamespace).Get(ctx, endpoint, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	url := fmt.Sprintf("http://%s.%s.svc.cluster.local:%d/v1/chat/completions", endpoint, endpointNamespace, svc.Spec.Ports[0].Port)
	pod := clientPod(name, nil, loadgenImage, append([]string{"-url=" + url}, args...)...)
	pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	_, err = kube.CoreV1().Pods(endpointNamespace).Create(ctx, pod, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func(ctx SpecContext) {
		_ = kube.CoreV1().Pods(endpointNamespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
	})
}

// loadgenStats calls a load client's /stats or /stop through the API
// server's pod proxy.
func loadgenStats(ctx context.Context, g Gomega, pod, verb, path string) loadStats {
	raw, err := kube.CoreV1().RESTClient().Verb(verb).Namespace(endpointNamespace).
		Resource("pods").Name(pod + ":8081").SubResource("proxy").Suffix(path).DoRaw(ctx)
	g.Expect(err).NotTo(HaveOccurred(), "%s %s: %s", verb, path, raw)
	var s loadStats
	g.Expect(json.Unmarshal(raw, &s)).To(Succeed(), string(raw))
	return s
}

func routerPods(ctx context.Context, endpoint string) []corev1.Pod {
	GinkgoHelper()
	return endpointPods(ctx, endpoint, "router")
}

// endpointPods are an endpoint's Running pods of one role that are not
// terminating.
func endpointPods(ctx context.Context, endpoint, role string) []corev1.Pod {
	GinkgoHelper()
	list, err := kube.CoreV1().Pods(endpointNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set{controllers.LabelEndpoint: endpoint, controllers.LabelRole: role}.String(),
	})
	Expect(err).NotTo(HaveOccurred())
	var pods []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			pods = append(pods, p)
		}
	}
	return pods
}

// pickerPod is the router pod the endpoint's Lease names (its identity
// ends in "@<pod IP>:<pick port>").
func pickerPod(ctx context.Context, routers []corev1.Pod) corev1.Pod {
	GinkgoHelper()
	lease, err := kube.CoordinationV1().Leases(endpointNamespace).Get(ctx, endpointName+"-router", metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	for _, p := range routers {
		if strings.Contains(holder, "@"+p.Status.PodIP+":") {
			return p
		}
	}
	Fail(fmt.Sprintf("the Lease holder %q is none of the router pods", holder))
	return corev1.Pod{}
}

// waitRouting waits until the routing document lists the endpoint's want
// Ready vLLM pods (and, with exact, nothing else: no draining instance
// left) and every router serves it: its config_generation is the
// document's and its per-backend series are the document's instances. It
// returns the instances' IDs.
func waitRouting(ctx context.Context, routers []corev1.Pod, want int, exact bool) []string {
	GinkgoHelper()
	var ids []string
	Eventually(func(g Gomega) {
		doc := routingDocument(ctx, g, endpointName)
		ids = instanceIDs(doc)
		var ready []string
		for _, p := range endpointPods(ctx, endpointName, "vllm") {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					ready = append(ready, p.Name)
				}
			}
		}
		g.Expect(ready).To(HaveLen(want), "Ready vLLM pods")
		if exact {
			g.Expect(ids).To(ConsistOf(ready), "instances of the routing document")
		} else {
			g.Expect(ids).To(ContainElements(ready), "instances of the routing document")
		}
		for _, r := range routers {
			fams := routerMetrics(ctx, g, r.Name)
			g.Expect(promscrape.Sum(fams["warmroute_router_config_generation"], nil)).To(BeEquivalentTo(doc.Generation), "config_generation of %s", r.Name)
			g.Expect(keys(promscrape.ByLabel(fams["warmroute_router_backend_healthy"], "backend"))).To(ConsistOf(ids), "backends of %s", r.Name)
		}
	}).WithContext(ctx).WithTimeout(2*time.Minute).WithPolling(time.Second).Should(Succeed(), describePods(ctx, endpointNamespace))
	return ids
}

func routingDocument(ctx context.Context, g Gomega, endpoint string) *routingv1alpha1.Document {
	cm, err := kube.CoreV1().ConfigMaps(endpointNamespace).Get(ctx, endpoint+"-routing", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	doc, err := routingv1alpha1.Decode([]byte(cm.Data[routingv1alpha1.ConfigMapKey]))
	g.Expect(err).NotTo(HaveOccurred())
	return doc
}

// mountedRouting reads the routing document from the kubelet's ConfigMap
// volume of a router pod, on the node: the files the router's --config-dir
// sees.
func mountedRouting(ctx context.Context, g Gomega, pod corev1.Pod) *routingv1alpha1.Document {
	path := fmt.Sprintf("/var/lib/kubelet/pods/%s/volumes/kubernetes.io~configmap/routing/%s", pod.UID, routingv1alpha1.ConfigMapKey)
	raw, err := cluster.Inside(ctx, "cat", path)
	g.Expect(err).NotTo(HaveOccurred())
	doc, err := routingv1alpha1.Decode(raw)
	g.Expect(err).NotTo(HaveOccurred())
	return doc
}

func instanceIDs(doc *routingv1alpha1.Document) []string {
	var ids []string
	for _, in := range doc.Instances {
		ids = append(ids, in.ID)
	}
	slices.Sort(ids)
	return ids
}

func keys(m map[string]float64) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// routerMetrics scrapes a router pod's /metrics through the API server's
// pod proxy.
func routerMetrics(ctx context.Context, g Gomega, pod string) map[string]*dto.MetricFamily {
	raw, err := kube.CoreV1().Pods(endpointNamespace).ProxyGet("http", pod, "9090", "metrics", nil).DoRaw(ctx)
	g.Expect(err).NotTo(HaveOccurred(), "scrape %s", pod)
	fams, err := promscrape.Parse(bytes.NewReader(raw))
	g.Expect(err).NotTo(HaveOccurred())
	return fams
}

// expectSameRouters checks that the routers followed the document as the
// pods they were: same UIDs, no container restart.
func expectSameRouters(ctx context.Context, routers []corev1.Pod) {
	GinkgoHelper()
	for _, r := range routers {
		p, err := kube.CoreV1().Pods(endpointNamespace).Get(ctx, r.Name, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(p.UID).To(Equal(r.UID))
		Expect(p.Status.ContainerStatuses[0].RestartCount).To(BeZero(), "router %s restarted", r.Name)
	}
}

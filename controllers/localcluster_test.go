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
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/test/localcluster"
)

// These specs need what envtest lacks: Deployments that make pods
// (kube-controller-manager), a scheduler, KWOK nodes that run them, the
// HorizontalPodAutoscaler controller and the garbage collector. They run
// in order on one local cluster with its own operator.
var _ = Describe("LLMEndpoint on a local cluster", Ordered, Label("localcluster"), func() {
	const ns, name = "default", "fleet"
	var (
		cluster *localcluster.Cluster
		c       client.Client
		cancel  context.CancelFunc
		ep      *v1alpha1.LLMEndpoint
	)

	BeforeAll(func(ctx SpecContext) {
		var err error
		cluster, err = localcluster.Start(ctx, localcluster.Options{
			BinDir:            binDir,
			CRDDirectoryPaths: []string{filepath.Join("..", "config", "crd", "bases")},
			Nodes:             2,
			GPUsPerNode:       4,
			PodCIDR:           "127.3.0.1/16", // apart from other suites' clusters
			ControllerManager: true,
			Scheduler:         true,
			KWOK:              true,
		})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { Expect(cluster.Stop()).To(Succeed()) })
		c, err = client.New(cluster.Config, client.Options{Scheme: testScheme})
		Expect(err).NotTo(HaveOccurred())
		var opCtx context.Context
		opCtx, cancel = context.WithCancel(context.Background())
		DeferCleanup(func() { cancel() })
		startOperator(opCtx, cluster.Config)
	}, NodeTimeout(3*time.Minute))

	routable := func(g Gomega) []routing.Instance {
		cm := &corev1.ConfigMap{}
		g.Expect(c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: routingConfigMapName(ep)}, cm)).To(Succeed())
		doc, err := routing.Decode([]byte(cm.Data[routing.ConfigMapKey]))
		g.Expect(err).NotTo(HaveOccurred())
		return doc.Instances
	}
	vllmPods := func(g Gomega) (live, terminating []corev1.Pod) {
		var pods corev1.PodList
		g.Expect(c.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{LabelEndpoint: name, LabelRole: roleVLLM})).To(Succeed())
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				terminating = append(terminating, p)
			} else {
				live = append(live, p)
			}
		}
		return live, terminating
	}

	It("runs the instances and routes to each running pod's address", func(ctx SpecContext) {
		ep = minimalEndpoint(ns, name)
		ep.Spec.Replicas = ptr.To[int32](3)
		Expect(c.Create(ctx, ep)).To(Succeed())
		start := time.Now()
		Eventually(func(g Gomega) {
			live, _ := vllmPods(g)
			g.Expect(live).To(HaveLen(3))
			var want []routing.Instance
			for _, p := range live {
				g.Expect(p.Status.PodIP).To(HavePrefix("127.3."))
				want = append(want, routing.Instance{ID: p.Name, Address: p.Status.PodIP + ":8000"})
			}
			slices.SortFunc(want, func(a, b routing.Instance) int { return strings.Compare(a.ID, b.ID) })
			g.Expect(routable(g)).To(Equal(want))
		}).WithTimeout(90 * time.Second).Should(Succeed())
		AddReportEntry("create to 3 routable instances", time.Since(start).Round(time.Millisecond).String())

		Eventually(func(g Gomega) {
			got := &v1alpha1.LLMEndpoint{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(ep), got)).To(Succeed())
			g.Expect(got.Status.ReadyReplicas).To(BeEquivalentTo(3))
			g.Expect(meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionAvailable)).To(HaveField("Status", metav1.ConditionTrue))
			g.Expect(meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionProgressing)).To(HaveField("Status", metav1.ConditionFalse))
		}).WithTimeout(60 * time.Second).Should(Succeed())
	}, SpecTimeout(3*time.Minute))

	It("marks an instance draining when a scale-in makes it terminate, and drops it before its preStop sleep ends", func(ctx SpecContext) {
		scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 2}}
		Expect(c.SubResource("scale").Update(ctx, ep, client.WithSubResourceBody(scale))).To(Succeed())
		// KWOK removes a terminating pod at a random time within its grace
		// period (180 s), so the leaving instance is most likely still
		// there: first draining in the routing document, then out of it
		// before its preStop sleep ends (the envtest spec times that).
		var leaving string
		Eventually(func(g Gomega) {
			live, terminating := vllmPods(g)
			g.Expect(live).To(HaveLen(2))
			g.Expect(terminating).To(HaveLen(1))
			leaving = terminating[0].Name
			draining := map[string]bool{}
			for _, in := range routable(g) {
				draining[in.ID] = in.Draining
			}
			g.Expect(draining).To(Equal(map[string]bool{live[0].Name: false, live[1].Name: false, leaving: true}))
		}).WithTimeout(60 * time.Second).Should(Succeed())
		Eventually(func(g Gomega) {
			ids := []string{}
			for _, in := range routable(g) {
				g.Expect(in.Draining).To(BeFalse())
				ids = append(ids, in.ID)
			}
			g.Expect(ids).To(HaveLen(2))
			g.Expect(ids).NotTo(ContainElement(leaving))
		}).WithTimeout(time.Duration(v1alpha1.PreStopSleepSeconds) * time.Second).Should(Succeed())
	}, SpecTimeout(2*time.Minute))

	It("is driven by a HorizontalPodAutoscaler, which can read its scale", func(ctx SpecContext) {
		hpa := endpointHPA(ns, name) // minReplicas 3
		Expect(c.Create(ctx, hpa)).To(Succeed())
		var able *autoscalingv2.HorizontalPodAutoscalerCondition
		Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(hpa), hpa)).To(Succeed())
			able = nil
			for i := range hpa.Status.Conditions {
				if hpa.Status.Conditions[i].Type == autoscalingv2.AbleToScale {
					able = &hpa.Status.Conditions[i]
				}
			}
			g.Expect(able).NotTo(BeNil())
			g.Expect(able.Status).To(Equal(corev1.ConditionTrue), "%s: %s", able.Reason, able.Message)
		}).WithTimeout(60 * time.Second).Should(Succeed())
		AddReportEntry("HPA AbleToScale", fmt.Sprintf("%s (%s: %s)", able.Status, able.Reason, able.Message))
		// The HPA raises the endpoint to its minimum, and the fleet follows.
		Eventually(func(g Gomega) {
			got := &v1alpha1.LLMEndpoint{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(ep), got)).To(Succeed())
			g.Expect(*got.Spec.Replicas).To(BeEquivalentTo(3))
			g.Expect(routable(g)).To(HaveLen(3))
		}).WithTimeout(60 * time.Second).Should(Succeed())
		Expect(c.Delete(ctx, hpa)).To(Succeed())
	}, SpecTimeout(2*time.Minute))

	It("has everything it made removed by the garbage collector when deleted", func(ctx SpecContext) {
		Expect(c.Delete(ctx, ep)).To(Succeed())
		Eventually(func(g Gomega) {
			for _, obj := range ownedObjects(ep) {
				err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%T %s still exists", obj, obj.GetName())
			}
		}).WithTimeout(90 * time.Second).WithPolling(time.Second).Should(Succeed())
	}, SpecTimeout(2*time.Minute))
})

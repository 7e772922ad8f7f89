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
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

func TestDecideIdle(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	const period = 10 * time.Minute
	tests := []struct {
		name string
		in   idleInput
		want idleDecision
	}{
		{"no period: never", idleInput{replicas: 2},
			idleDecision{replicas: 2}},
		{"no period at zero: demand does not wake", idleInput{replicas: 0, demand: ago(time.Second)},
			idleDecision{replicas: 0}},
		{"a request within the period keeps it up", idleInput{after: period, replicas: 2, woke: ago(2 * time.Hour), lastRequest: ago(4 * time.Minute)},
			idleDecision{replicas: 2, recheck: 6 * time.Minute}},
		{"no request for the period: to zero", idleInput{after: period, replicas: 2, woke: ago(2 * time.Hour), lastRequest: ago(period)},
			idleDecision{replicas: 0, reason: v1alpha1.ReasonIdle}},
		{"unused a period after the wake: to zero", idleInput{after: period, replicas: 3, woke: ago(period + time.Second)},
			idleDecision{replicas: 0, reason: v1alpha1.ReasonIdle}},
		{"first seen with the setting: the period starts now", idleInput{after: period, replicas: 2, lastRequest: ago(time.Hour)},
			idleDecision{replicas: 2, recordWake: true, recheck: period}},
		{"held demand counts as use", idleInput{after: period, replicas: 1, woke: ago(2 * time.Hour), lastRequest: ago(time.Hour), demand: ago(time.Minute)},
			idleDecision{replicas: 1, recheck: 9 * time.Minute}},
		{"woken: the period runs from the wake", idleInput{after: period, replicas: 1, woke: ago(2 * time.Minute)},
			idleDecision{replicas: 1, recheck: 8 * time.Minute}},
		{"demand at zero wakes it", idleInput{after: period, replicas: 0, woke: ago(2 * time.Hour), lastRequest: ago(time.Hour), scaledToZero: ago(50 * time.Minute), demand: ago(time.Second)},
			idleDecision{replicas: 1, reason: v1alpha1.ReasonActivated}},
		{"demand older than the scale-down does not", idleInput{after: period, replicas: 0, woke: ago(2 * time.Hour), scaledToZero: ago(time.Minute), demand: ago(20 * time.Minute)},
			idleDecision{replicas: 0}},
		{"demand already served does not (a user's own scale to 0)", idleInput{after: period, replicas: 0, woke: ago(2 * time.Hour), lastRequest: ago(time.Minute), demand: ago(2 * time.Minute)},
			idleDecision{replicas: 0}},
		{"no stamps at zero: stays", idleInput{after: period, replicas: 0},
			idleDecision{replicas: 0}},
		{"scaled up by another hand: the wake is recorded", idleInput{after: period, replicas: 2, scaledToZero: ago(30 * time.Minute)},
			idleDecision{replicas: 2, recordWake: true, recheck: period}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.now = now
			if got := decideIdle(tt.in); got != tt.want {
				t.Fatalf("decideIdle = %+v, want %+v", got, tt.want)
			}
		})
	}
}

var _ = Describe("Scale to zero", func() {
	It("scales an idle endpoint to zero and a held request back to one", func() {
		ns := newNamespace()
		ep := minimalEndpoint(ns, "idle")
		ep.Spec.Replicas = ptr.To[int32](2)
		ep.Spec.Scaling.ScaleToZeroAfter = &metav1.Duration{Duration: 30 * time.Second}
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())
		key := client.ObjectKeyFromObject(ep)
		leaseKey := client.ObjectKey{Namespace: ns, Name: routerLeaseName(ep)}

		By("leaving it unused for spec.scaling.scaleToZeroAfter")
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(suiteCtx, key, ep)).To(Succeed())
			g.Expect(ep.Spec.Replicas).To(HaveValue(BeEquivalentTo(0)))
		}).WithTimeout(45 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		asleep := stamp(ep.Annotations, v1alpha1.AnnotationScaledToZeroAt)
		Expect(asleep.Sub(ep.CreationTimestamp.Time)).To(BeNumerically(">=", 29*time.Second),
			"scaled to zero before the idle period had passed") // creationTimestamp has whole seconds
		Expect(ep.Annotations).NotTo(HaveKey(v1alpha1.AnnotationWokeAt))
		Eventually(func(g Gomega) {
			g.Expect(getDeployment(g, ns, vllmName(ep)).Spec.Replicas).To(HaveValue(BeEquivalentTo(0)))
			g.Expect(eventReasons(g, ns, ep.Name)).To(ContainElement(v1alpha1.ReasonIdle))
			g.Expect(k8sClient.Get(suiteCtx, key, ep)).To(Succeed())
			c := meta.FindStatusCondition(ep.Status.Conditions, v1alpha1.ConditionAvailable)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonScaledToZero))
			g.Expect(c.Message).To(ContainSubstring("the next request scales it to 1"))
		}).Should(Succeed())

		By("a router stamping demand on its Lease, as a held request does")
		demand := time.Now()
		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			lease := &coordinationv1.Lease{}
			if err := k8sClient.Get(suiteCtx, leaseKey, lease); err != nil {
				return err
			}
			if lease.Annotations == nil {
				lease.Annotations = map[string]string{}
			}
			lease.Annotations[routingv1alpha1.DemandAnnotation] = demand.UTC().Format(time.RFC3339Nano)
			return k8sClient.Update(suiteCtx, lease)
		})).To(Succeed())
		var woke time.Duration
		Eventually(func(g Gomega) {
			d := &appsv1.Deployment{}
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: vllmName(ep)}, d)).To(Succeed())
			g.Expect(d.Spec.Replicas).To(HaveValue(BeEquivalentTo(1)))
			woke = time.Since(demand)
		}).WithPolling(10 * time.Millisecond).Should(Succeed())
		GinkgoWriter.Printf("demand stamp to a vLLM Deployment of 1 replica: %s\n", woke)
		AddReportEntry("demand to 1 replica", woke.String())
		Expect(k8sClient.Get(suiteCtx, key, ep)).To(Succeed())
		Expect(ep.Spec.Replicas).To(HaveValue(BeEquivalentTo(1)))
		Expect(ep.Annotations).To(HaveKey(v1alpha1.AnnotationWokeAt))
		Expect(ep.Annotations).NotTo(HaveKey(v1alpha1.AnnotationScaledToZeroAt))
		Eventually(func(g Gomega) {
			g.Expect(eventReasons(g, ns, ep.Name)).To(ContainElement(v1alpha1.ReasonActivated))
			g.Expect(k8sClient.Get(suiteCtx, key, ep)).To(Succeed())
			c := meta.FindStatusCondition(ep.Status.Conditions, v1alpha1.ConditionProgressing)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonActivated))
		}).Should(Succeed())

		By("the same demand again: it stays at one, with no second wake")
		Consistently(func(g Gomega) {
			g.Expect(k8sClient.Get(suiteCtx, key, ep)).To(Succeed())
			g.Expect(ep.Spec.Replicas).To(HaveValue(BeEquivalentTo(1)))
		}).Should(Succeed())
	})
})

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
	"net/http/httptest"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/router/picker"
	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// routerClient acts as the endpoint's router pods: their ServiceAccount.
func routerClient(ep *v1alpha1.LLMEndpoint) *kubernetes.Clientset {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ep.Namespace + ":" + routerName(ep),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ep.Namespace, "system:authenticated"},
	}
	return kubernetes.NewForConfigOrDie(c)
}

var _ = Describe("Router picker election", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("creates the Lease and the pick key once, and the routers elect one picker with that Lease alone", func() {
		ep := minimalEndpoint(ns, "chat")
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())
		key := &corev1.Secret{}
		lease := &coordinationv1.Lease{}
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: pickKeySecretName(ep)}, key)).To(Succeed())
			g.Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: routerLeaseName(ep)}, lease)).To(Succeed())
			g.Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: routerName(ep)}, &rbacv1.RoleBinding{})).To(Succeed())
		}).Should(Succeed())
		Expect(key.Data[cacheSaltKey]).To(HaveLen(pickKeyBytes))
		Expect(metav1.GetControllerOf(key)).To(HaveField("UID", ep.UID))
		Expect(metav1.GetControllerOf(lease)).To(HaveField("UID", ep.UID))
		waitSettled(ns, "chat")

		// The routers renew the Lease through the installed ClusterRole
		// the operator binds.
		installClusterRoles()
		keys, err := picker.DeriveKeys(key.Data[cacheSaltKey])
		Expect(err).NotTo(HaveOccurred())
		client := routerClient(ep)
		cfgDoc := policy.Config{Strategy: policy.PrefixAware, Model: "m", HashSeed: keys.HashSeed, PrefixLength: 1024, ConcurrencyThreshold: 8,
			Instances: []policy.Instance{{ID: "vllm-0", Address: "10.0.0.1:8000"}, {ID: "vllm-1", Address: "10.0.0.2:8000"}}}
		type replica struct {
			p      *picker.Picker
			cancel context.CancelFunc
			done   chan struct{}
		}
		start := func(name string) *replica {
			p := picker.New(picker.Options{Replica: name, Keys: keys, Own: policy.New(policy.Tuning{})})
			Expect(p.Update(cfgDoc)).To(Succeed())
			srv := httptest.NewServer(p.Handler())
			DeferCleanup(srv.Close)
			ctx, cancel := context.WithCancel(suiteCtx)
			r := &replica{p: p, cancel: cancel, done: make(chan struct{})}
			go func() {
				defer close(r.done)
				defer GinkgoRecover()
				Expect(p.Elect(ctx, picker.Election{Client: client, Namespace: ns, Lease: routerLeaseName(ep), Name: name,
					Address: strings.TrimPrefix(srv.URL, "http://")})).To(Succeed())
			}()
			DeferCleanup(func() { cancel(); <-r.done })
			return r
		}
		a, b := start("router-a"), start("router-b")
		leaders := func() []*replica {
			var out []*replica
			for _, r := range []*replica{a, b} {
				if r.p.Leading() {
					out = append(out, r)
				}
			}
			return out
		}
		By("electing exactly one picker")
		Eventually(leaders, 10*time.Second, 50*time.Millisecond).Should(HaveLen(1))
		Consistently(leaders, 2*time.Second, 100*time.Millisecond).Should(HaveLen(1))
		leader := leaders()[0]
		follower := map[*replica]*replica{a: b, b: a}[leader]

		By("the follower asking the leader")
		ask := func(r *replica, text string) string {
			t, err := r.p.Pick(suiteCtx, policy.New(policy.Tuning{}).Key(policy.Request{Text: []byte(text), WindowBytes: len(text)}), picker.Sender{})
			Expect(err).NotTo(HaveOccurred())
			defer t.Done()
			return t.Spill
		}
		Eventually(func() string { return ask(follower, "a question") }, 5*time.Second, 50*time.Millisecond).ShouldNot(Equal(policy.SpillFallback))

		By("a graceful step-down: the other replica leads within the retry period, warm")
		stepped := time.Now()
		leader.p.StepDown()
		Eventually(func() bool { return follower.p.Leading() }, 5*time.Second, 20*time.Millisecond).Should(BeTrue())
		GinkgoWriter.Printf("new picker %s after step-down\n", time.Since(stepped).Round(time.Millisecond))
		Expect(time.Since(stepped)).To(BeNumerically("<", picker.DefaultLeaseDuration))
		Expect(testutil.ToFloat64(leader.p.Metrics().Handoffs.WithLabelValues("sent", "ok"))).To(Equal(1.0), "the old leader did not hand its state over")
		Expect(testutil.ToFloat64(follower.p.Metrics().Handoffs.WithLabelValues("received", "restored"))).To(Equal(1.0), "the successor did not restore the old leader's state")

		By("the routers' identity reaching no other Lease")
		other := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "someone-elses"}}
		Expect(k8sClient.Create(suiteCtx, other)).To(Succeed())
		_, err = client.CoordinationV1().Leases(ns).Get(suiteCtx, "someone-elses", metav1.GetOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "get another Lease: %v", err)
		_, err = client.CoordinationV1().Leases(ns).Create(suiteCtx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "new"}}, metav1.CreateOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "create a Lease: %v", err)
	})
})

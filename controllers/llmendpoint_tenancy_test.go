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
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

func TestRouterTenancy(t *testing.T) {
	salt := cacheSaltSecretName(newEndpoint())
	for _, tc := range []struct {
		name        string
		auth        *v1alpha1.RouterAuth
		wantArgs    []string
		wantSecrets []string
	}{
		{"no auth: salts only", nil, []string{"--cache-salt-key-file=/etc/warmroute/cache-salt/key"}, []string{salt}},
		{"API keys", &v1alpha1.RouterAuth{Mode: v1alpha1.RouterAuthAPIKeys, APIKeys: &v1alpha1.APIKeysAuth{SecretName: "keys"}},
			[]string{"--cache-salt-key-file=/etc/warmroute/cache-salt/key", "--api-keys-dir=/etc/warmroute/api-keys"}, []string{salt, "keys"}},
		{"trusted header", &v1alpha1.RouterAuth{Mode: v1alpha1.RouterAuthTrustedHeader, TrustedHeader: &v1alpha1.TrustedHeaderAuth{Name: "X-Tenant"}},
			[]string{"--cache-salt-key-file=/etc/warmroute/cache-salt/key", "--tenant-header=X-Tenant"}, []string{salt}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := buildRouterDeployment(newEndpoint(func(ep *v1alpha1.LLMEndpoint) { ep.Spec.Router.Auth = tc.auth }), testOptions)
			ps := d.Spec.Template.Spec
			c := ps.Containers[0]
			for _, a := range tc.wantArgs {
				if !containsString(c.Args, a) {
					t.Errorf("args %v lack %s", c.Args, a)
				}
			}
			var secrets []string
			for _, v := range ps.Volumes {
				if v.Secret != nil {
					secrets = append(secrets, v.Secret.SecretName)
					mounted := false
					for _, m := range c.VolumeMounts {
						mounted = mounted || (m.Name == v.Name && m.ReadOnly && m.SubPath == "")
					}
					if !mounted {
						t.Errorf("Secret %s not mounted read-only as a directory", v.Secret.SecretName)
					}
				}
			}
			// Every router mounts its pick key too (llmendpoint_picker.go).
			want := append([]string{pickKeySecretName(newEndpoint())}, tc.wantSecrets...)
			if len(secrets) != len(want) || !containsAll(secrets, want) {
				t.Errorf("Secret volumes %v, want %v", secrets, want)
			}
		})
	}
	s, err := buildCacheSaltSecret(newEndpoint())
	if err != nil || len(s.Data[cacheSaltKey]) != 32 || s.Name != cacheSaltSecretName(newEndpoint()) || metav1.GetControllerOf(s) == nil {
		t.Fatalf("salt Secret %+v: %v", s, err)
	}
	s2, _ := buildCacheSaltSecret(newEndpoint())
	if bytes.Equal(s.Data[cacheSaltKey], s2.Data[cacheSaltKey]) {
		t.Fatal("two salt keys are equal")
	}
}

// TestRouterGetsVLLMAPIKey: with router auth on, the router gets vLLM's
// key under its own name from wherever vLLM gets it, a Secret reference
// staying a reference; with auth off, it does not get it at all.
func TestRouterGetsVLLMAPIKey(t *testing.T) {
	apiKeys := &v1alpha1.RouterAuth{Mode: v1alpha1.RouterAuthAPIKeys, APIKeys: &v1alpha1.APIKeysAuth{SecretName: "keys"}}
	trusted := &v1alpha1.RouterAuth{Mode: v1alpha1.RouterAuthTrustedHeader, TrustedHeader: &v1alpha1.TrustedHeaderAuth{Name: "X-Tenant"}}
	ref := &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "vllm-key"}, Key: "key"}}
	fromSecret := []corev1.EnvVar{{Name: "VLLM_API_KEY", ValueFrom: ref}}
	for _, tc := range []struct {
		name string
		auth *v1alpha1.RouterAuth
		args []string
		env  []corev1.EnvVar
		want *corev1.EnvVar
	}{
		{name: "API keys, vLLM without a key", auth: apiKeys},
		{name: "API keys, --api-key", auth: apiKeys, args: []string{"--api-key", "k1"}, want: &corev1.EnvVar{Name: "WARMROUTE_UPSTREAM_API_KEY", Value: "k1"}},
		{name: "trusted header, key from a Secret", auth: trusted, env: fromSecret, want: &corev1.EnvVar{Name: "WARMROUTE_UPSTREAM_API_KEY", ValueFrom: ref}},
		{name: "auth off: no key for the router", args: []string{"--api-key=k1"}, env: fromSecret},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
				ep.Spec.Router.Auth = tc.auth
				ep.Spec.Model.Args, ep.Spec.Model.Env = tc.args, tc.env
			})
			var got *corev1.EnvVar
			c := buildRouterDeployment(ep, testOptions).Spec.Template.Spec.Containers[0]
			for i, e := range c.Env {
				if e.Name == "WARMROUTE_UPSTREAM_API_KEY" {
					got = &c.Env[i]
				}
				if e.Name == "VLLM_API_KEY" {
					t.Errorf("router has VLLM_API_KEY")
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("router's WARMROUTE_UPSTREAM_API_KEY (-want +got):\n%s", diff)
			}
			if slices.ContainsFunc(c.Args, func(a string) bool { return strings.Contains(a, "k1") }) {
				t.Errorf("the key is in the router's args %v", c.Args)
			}
		})
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func containsAll(list, want []string) bool {
	for _, w := range want {
		if !containsString(list, w) {
			return false
		}
	}
	return true
}

var _ = Describe("Router tenancy", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	getSecret := func(g Gomega, name string) *corev1.Secret {
		s := &corev1.Secret{}
		g.Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: name}, s)).To(Succeed())
		return s
	}

	It("creates the cache salt Secret once, owned by the endpoint, mounts it, and never overwrites it", func() {
		ep := minimalEndpoint(ns, "chat")
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())
		var secret *corev1.Secret
		Eventually(func(g Gomega) { secret = getSecret(g, cacheSaltSecretName(ep)) }).Should(Succeed())
		Expect(secret.Data["key"]).To(HaveLen(32))
		Expect(metav1.GetControllerOf(secret)).To(HaveField("UID", ep.UID))
		Expect(secret.Labels).To(HaveKeyWithValue(LabelEndpoint, "chat"))

		Eventually(func(g Gomega) {
			ps := getDeployment(g, ns, routerName(ep)).Spec.Template.Spec
			g.Expect(ps.Volumes).To(ContainElement(And(HaveField("Name", "cache-salt"), HaveField("Secret.SecretName", cacheSaltSecretName(ep)))))
			g.Expect(ps.Containers[0].VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "cache-salt", MountPath: routerCacheSaltDir, ReadOnly: true}))
			g.Expect(ps.Containers[0].Args).To(ContainElement("--cache-salt-key-file=/etc/warmroute/cache-salt/key"))
		}).Should(Succeed())

		// reconcileForgetting reconciles again with nothing remembered of
		// the Secret, by a spec change the router Deployment shows.
		reconcileForgetting := func(routers int32) {
			reconciles.Reconciler.(*LLMEndpointReconciler).saltSecrets.Delete(types.NamespacedName{Namespace: ns, Name: "chat"})
			// The operator records its default images on the endpoint
			// meanwhile (a patch), so the update may meet a newer version.
			Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
				if err := k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: "chat"}, ep); err != nil {
					return err
				}
				ep.Spec.Router.Replicas = ptr.To(routers)
				return k8sClient.Update(suiteCtx, ep)
			})).To(Succeed())
			Eventually(func(g Gomega) {
				g.Expect(*getDeployment(g, ns, routerName(ep)).Spec.Replicas).To(Equal(routers))
			}).Should(Succeed())
		}

		By("rotating the key by hand, then reconciling with nothing remembered")
		rotated := bytes.Repeat([]byte{7}, 32)
		secret.Data["key"] = rotated
		Expect(k8sClient.Update(suiteCtx, secret)).To(Succeed())
		reconcileForgetting(3)
		waitSettled(ns, "chat")
		Expect(getSecret(Default, cacheSaltSecretName(ep)).Data["key"]).To(Equal(rotated), "the operator replaced a rotated key")
		Expect(getDeployment(Default, ns, routerName(ep)).Spec.Template.Spec.Volumes).To(ContainElement(HaveField("Secret.SecretName", cacheSaltSecretName(ep))))

		By("re-creating a deleted Secret")
		Expect(k8sClient.Delete(suiteCtx, secret)).To(Succeed())
		reconcileForgetting(2)
		Eventually(func(g Gomega) {
			g.Expect(getSecret(g, cacheSaltSecretName(ep)).Data["key"]).To(And(HaveLen(32), Not(Equal(rotated))))
		}).Should(Succeed())
	})

	It("uses a salt Secret the user made first, as it is", func() {
		ep := minimalEndpoint(ns, "chat")
		mine := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cacheSaltSecretName(ep)},
			Data:       map[string][]byte{"key": bytes.Repeat([]byte{9}, 40)},
		}
		Expect(k8sClient.Create(suiteCtx, mine)).To(Succeed())
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())
		waitSettled(ns, "chat")
		Expect(getSecret(Default, cacheSaltSecretName(ep)).Data["key"]).To(Equal(mine.Data["key"]))
	})

	It("mounts the user's API keys Secret, hands the router vLLM's key, and passes a trusted header", func() {
		ep := minimalEndpoint(ns, "keyed")
		ep.Spec.Router.Auth = &v1alpha1.RouterAuth{Mode: v1alpha1.RouterAuthAPIKeys, APIKeys: &v1alpha1.APIKeysAuth{SecretName: "tenant-keys"}}
		vllmKey := &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "vllm-key"}, Key: "key"}}
		ep.Spec.Model.Env = []corev1.EnvVar{{Name: "VLLM_API_KEY", ValueFrom: vllmKey}}
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())
		Eventually(func(g Gomega) {
			ps := getDeployment(g, ns, routerName(ep)).Spec.Template.Spec
			g.Expect(ps.Volumes).To(ContainElement(And(HaveField("Name", "api-keys"), HaveField("Secret.SecretName", "tenant-keys"))))
			g.Expect(ps.Containers[0].Args).To(ContainElement("--api-keys-dir=/etc/warmroute/api-keys"))
			g.Expect(ps.Containers[0].Env).To(ContainElement(corev1.EnvVar{Name: routerUpstreamAPIKeyEnv, ValueFrom: vllmKey}))
		}).Should(Succeed())

		gw := minimalEndpoint(ns, "gated")
		gw.Spec.Router.Auth = &v1alpha1.RouterAuth{Mode: v1alpha1.RouterAuthTrustedHeader, TrustedHeader: &v1alpha1.TrustedHeaderAuth{Name: "X-Gateway-Tenant"}}
		Expect(k8sClient.Create(suiteCtx, gw)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(getDeployment(g, ns, routerName(gw)).Spec.Template.Spec.Containers[0].Args).To(ContainElement("--tenant-header=X-Gateway-Tenant"))
		}).Should(Succeed())
	})

	DescribeTable("refuses invalid auth",
		func(auth v1alpha1.RouterAuth, wantInMessage ...string) {
			ep := minimalEndpoint(ns, "bad")
			ep.Spec.Router.Auth = &auth
			err := k8sClient.Create(suiteCtx, ep)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
			for _, want := range wantInMessage {
				Expect(err.Error()).To(ContainSubstring(want))
			}
		},
		Entry("unknown mode", v1alpha1.RouterAuth{Mode: "OIDC"}, "spec.router.auth.mode", `Unsupported value: "OIDC"`, `"APIKeys"`, `"TrustedHeader"`),
		Entry("APIKeys without a Secret", v1alpha1.RouterAuth{Mode: v1alpha1.RouterAuthAPIKeys}, "mode APIKeys needs apiKeys"),
		Entry("APIKeys with a header too", v1alpha1.RouterAuth{Mode: v1alpha1.RouterAuthAPIKeys, APIKeys: &v1alpha1.APIKeysAuth{SecretName: "k"}, TrustedHeader: &v1alpha1.TrustedHeaderAuth{Name: "X-T"}}, "mode APIKeys needs apiKeys and no trustedHeader"),
		Entry("TrustedHeader without a header", v1alpha1.RouterAuth{Mode: v1alpha1.RouterAuthTrustedHeader}, "mode TrustedHeader needs trustedHeader"),
		Entry("a header name with a space", v1alpha1.RouterAuth{Mode: v1alpha1.RouterAuthTrustedHeader, TrustedHeader: &v1alpha1.TrustedHeaderAuth{Name: "X Tenant"}}, "spec.router.auth.trustedHeader.name"),
		Entry("a Secret name that is no name", v1alpha1.RouterAuth{Mode: v1alpha1.RouterAuthAPIKeys, APIKeys: &v1alpha1.APIKeysAuth{SecretName: "Keys!"}}, "spec.router.auth.apiKeys.secretName"),
	)
})

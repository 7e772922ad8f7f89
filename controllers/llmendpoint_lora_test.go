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
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

func withLoRAState(pod corev1.Pod, st routing.LoRAState) corev1.Pod {
	metav1.SetMetaDataAnnotation(&pod.ObjectMeta, routing.AnnotationLoRAState, st.Encode())
	return pod
}

// TestPlaceAdapters checks where an adapter is Ready as the agents report
// loads: only where loaded, and, while it moves, still where it was until
// every instance placed to hold it has it.
func TestPlaceAdapters(t *testing.T) {
	now := time.Now()
	ep := newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
		ep.Spec.LoRAAdapters = []v1alpha1.LoRAAdapter{{Name: "sql", URI: "org/sql", Replicas: ptr.To[int32](1)}}
	})
	// With instances a and b, sql is placed on a (fixed by the hash seed).
	a := newPod("chat-vllm-a", "10.0.0.1", podReady, now)
	b := newPod("chat-vllm-b", "10.0.0.2", podReady, now)
	loaded := routing.LoRAState{Loaded: []string{"sql"}}
	tests := []struct {
		name string
		pods []corev1.Pod
		want adapterPlacement
		cond string
	}{{
		name: "not loaded yet: no traffic",
		pods: []corev1.Pod{a, b},
		want: adapterPlacement{name: "sql", uri: "org/sql", desired: []string{"chat-vllm-a"}},
		cond: v1alpha1.ReasonAdaptersLoading,
	}, {
		name: "loaded where placed",
		pods: []corev1.Pod{withLoRAState(a, loaded), b},
		want: adapterPlacement{name: "sql", uri: "org/sql", desired: []string{"chat-vllm-a"}, ready: []string{"chat-vllm-a"}},
		cond: v1alpha1.ReasonAdaptersLoaded,
	}, {
		name: "moving: the old holder serves until the new one has it",
		pods: []corev1.Pod{a, withLoRAState(b, loaded)},
		want: adapterPlacement{name: "sql", uri: "org/sql", desired: []string{"chat-vllm-a"}, ready: []string{"chat-vllm-b"}},
		cond: v1alpha1.ReasonAdaptersLoading,
	}, {
		name: "moved: the old holder leaves the set",
		pods: []corev1.Pod{withLoRAState(a, loaded), withLoRAState(b, loaded)},
		want: adapterPlacement{name: "sql", uri: "org/sql", desired: []string{"chat-vllm-a"}, ready: []string{"chat-vllm-a"}},
		cond: v1alpha1.ReasonAdaptersLoaded,
	}, {
		name: "load failed: reported with the reason",
		pods: []corev1.Pod{withLoRAState(a, routing.LoRAState{Failed: []routing.LoRAFailure{{Name: "sql", Reason: "404 no such adapter"}}}), b},
		want: adapterPlacement{name: "sql", uri: "org/sql", desired: []string{"chat-vllm-a"},
			failed: []v1alpha1.AdapterFailure{{Instance: "chat-vllm-a", Reason: "404 no such adapter"}}},
		cond: v1alpha1.ReasonAdapterLoadFailed,
	}, {
		name: "an unready instance is neither placed nor routed",
		pods: []corev1.Pod{withLoRAState(newPod("chat-vllm-a", "10.0.0.1", podUnready, now), loaded), b},
		want: adapterPlacement{name: "sql", uri: "org/sql", desired: []string{"chat-vllm-b"}},
		cond: v1alpha1.ReasonAdaptersLoading,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := placeAdapters(ep, tt.pods, nil)
			if len(got) != 1 {
				t.Fatalf("%d placements", len(got))
			}
			if diff := cmp.Diff(tt.want, got[0], cmp.AllowUnexported(adapterPlacement{})); diff != "" {
				t.Errorf("placement (-want +got):\n%s", diff)
			}
			if c := adaptersCondition(got, loraCapacity(ep), readyCount(tt.pods)); c.Reason != tt.cond {
				t.Errorf("AdaptersReady reason %s (%s), want %s", c.Reason, c.Message, tt.cond)
			}
		})
	}
}

// TestPlacementFromTheRoutingDocument: the placement in force is the one
// the stored routing ConfigMap records, so an operator that reads it back
// (after a restart, say) keeps it: placing again moves nothing, and a new
// instance takes its share without moving adapters between the others.
func TestPlacementFromTheRoutingDocument(t *testing.T) {
	now := time.Now()
	ep := newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
		ep.Spec.Model.MaxLoras = ptr.To[int32](3)
		for i := range 8 {
			name := fmt.Sprintf("tenant-%d", i)
			ep.Spec.LoRAAdapters = append(ep.Spec.LoRAAdapters, v1alpha1.LoRAAdapter{Name: name, URI: "org/" + name})
		}
	})
	var pods []corev1.Pod
	for i, name := range []string{"chat-vllm-a", "chat-vllm-b", "chat-vllm-c"} {
		pods = append(pods, newPod(name, fmt.Sprintf("10.0.0.%d", i+1), podReady, now))
	}
	stored := func(placements []adapterPlacement) map[string][]string {
		doc := buildRoutingDocument(ep, pods, placements, time.Now())
		data, err := doc.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return storedPlacement(buildRoutingConfigMap(ep, data))
	}
	desired := func(placements []adapterPlacement) map[string][]string {
		out := map[string][]string{}
		for _, p := range placements {
			out[p.name] = p.desired
		}
		return out
	}

	first := placeAdapters(ep, pods, nil)
	if diff := cmp.Diff(desired(first), desired(placeAdapters(ep, pods, stored(first)))); diff != "" {
		t.Errorf("placing again from the stored document moved adapters (-before +after):\n%s", diff)
	}
	pods = append(pods, newPod("chat-vllm-d", "10.0.0.4", podReady, now))
	grown := placeAdapters(ep, pods, stored(first))
	moved := 0
	for _, p := range grown {
		for _, id := range p.desired {
			if !slices.Contains(desired(first)[p.name], id) {
				if id != "chat-vllm-d" {
					t.Errorf("%s moved onto %s, which was there before", p.name, id)
				}
				moved++
			}
		}
	}
	// 8 adapters on 4 instances: the new one takes 2, its fair share.
	if moved != 2 {
		t.Errorf("adding an instance moved %d adapters, want 2", moved)
	}
	if storedPlacement(&corev1.ConfigMap{Data: map[string]string{routing.ConfigMapKey: "not yaml: ["}}) != nil {
		t.Error("an unreadable document gave a placement")
	}
}

func readyCount(pods []corev1.Pod) int {
	n := 0
	for i := range pods {
		if isRoutable(&pods[i]) {
			n++
		}
	}
	return n
}

// TestAdaptersShortOfRoom: three adapters on two instances that keep one
// each leave one out, named in status and in the condition, not "loading".
func TestAdaptersShortOfRoom(t *testing.T) {
	now := time.Now()
	ep := newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
		ep.Spec.Model.MaxLoras = ptr.To[int32](1)
		for _, n := range []string{"a", "b", "c"} {
			ep.Spec.LoRAAdapters = append(ep.Spec.LoRAAdapters, v1alpha1.LoRAAdapter{Name: n, URI: "org/" + n, Replicas: ptr.To[int32](2)})
		}
	})
	pods := []corev1.Pod{newPod("chat-vllm-a", "10.0.0.1", podReady, now), newPod("chat-vllm-b", "10.0.0.2", podReady, now)}
	got := placeAdapters(ep, pods, nil)
	var unplaced []string
	for _, st := range adapterStatuses(got, 2) {
		if st.Unplaced != (len(st.Desired) == 0) {
			t.Errorf("%s: unplaced %v with desired %v", st.Name, st.Unplaced, st.Desired)
		}
		if st.Unplaced {
			unplaced = append(unplaced, st.Name)
		}
	}
	if len(unplaced) != 1 {
		t.Fatalf("unplaced %v, want one of three", unplaced)
	}
	c := adaptersCondition(got, loraCapacity(ep), 2)
	if c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonInsufficientAdapterCapacity {
		t.Fatalf("AdaptersReady %s %s, want False %s", c.Status, c.Reason, v1alpha1.ReasonInsufficientAdapterCapacity)
	}
	if want := "3 adapters, room for 2: 2 ready instances × 1 adapters each"; !strings.HasPrefix(c.Message, want) || !strings.HasSuffix(c.Message, "unplaced: "+unplaced[0]) {
		t.Errorf("message %q, want it to start %q and name %s", c.Message, want, unplaced[0])
	}
	// No ready instance: nothing is placed, and that is waiting, not
	// a lack of room.
	if c := adaptersCondition(placeAdapters(ep, nil, nil), 1, 0); c.Reason != v1alpha1.ReasonAdaptersLoading {
		t.Errorf("with no ready instance: %s, want %s", c.Reason, v1alpha1.ReasonAdaptersLoading)
	}
}

func TestLoRACapacity(t *testing.T) {
	withArgs := func(maxLoras *int32, args ...string) *v1alpha1.LLMEndpoint {
		return newEndpoint(func(ep *v1alpha1.LLMEndpoint) { ep.Spec.Model.MaxLoras, ep.Spec.Model.Args = maxLoras, args })
	}
	tests := []struct {
		name string
		ep   *v1alpha1.LLMEndpoint
		want int
	}{
		{"unset: vLLM's default --max-loras, which --max-cpu-loras follows", withArgs(nil), 1},
		{"maxLoras", withArgs(ptr.To[int32](4)), 4},
		{"--max-cpu-loras=N wins", withArgs(ptr.To[int32](4), "--max-cpu-loras=12"), 12},
		{"--max-cpu-loras N", withArgs(ptr.To[int32](4), "--dtype", "half", "--max-cpu-loras", "12"), 12},
		{"--max_cpu_loras N", withArgs(nil, "--max_cpu_loras", "6"), 6},
		{"the last occurrence wins, as in vLLM", withArgs(nil, "--max-cpu-loras=3", "--max-cpu-loras", "9"), 9},
		{"a flag where the value should be", withArgs(ptr.To[int32](4), "--max-cpu-loras", "--dtype=half"), 4},
		{"not a number", withArgs(ptr.To[int32](4), "--max-cpu-loras=many"), 4},
	}
	for _, tt := range tests {
		if got := loraCapacity(tt.ep); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
	}
}

// TestLoRAAgentRoleGrantsNoSecret: the operator, which reads no Secret,
// cannot grant one (RBAC refuses an escalation), so the agent's Role names
// none even when adapters name credentials Secrets.
func TestLoRAAgentRoleGrantsNoSecret(t *testing.T) {
	ep := newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
		ep.Spec.LoRAAdapters = []v1alpha1.LoRAAdapter{{Name: "a", URI: "s3://bucket/a", S3: &v1alpha1.S3Source{CredentialsSecret: "s3-creds"}}}
	})
	for _, r := range buildLoRAAgentRole(ep).Rules {
		if slices.Contains(r.Resources, "secrets") {
			t.Errorf("the agent's Role grants %+v", r)
		}
	}
}

// TestLoRAAgentGetsVLLMAPIKey: the agent gets vLLM's key from wherever
// the user gave it to vLLM, a Secret reference staying a reference.
func TestLoRAAgentGetsVLLMAPIKey(t *testing.T) {
	fromSecret := corev1.EnvVar{Name: "VLLM_API_KEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "vllm-key"}, Key: "key",
	}}}
	for _, tt := range []struct {
		name string
		args []string
		env  []corev1.EnvVar
		want *corev1.EnvVar
	}{
		{name: "no key"},
		{name: "flag with =", args: []string{"--dtype=half", "--api-key=k1"}, want: &corev1.EnvVar{Name: "VLLM_API_KEY", Value: "k1"}},
		{name: "flag and value", args: []string{"--api-key", "k1", "k2", "--dtype=half"}, want: &corev1.EnvVar{Name: "VLLM_API_KEY", Value: "k1"}},
		{name: "underscore spelling", args: []string{"--api_key=k1"}, want: &corev1.EnvVar{Name: "VLLM_API_KEY", Value: "k1"}},
		{name: "Secret in env", env: []corev1.EnvVar{{Name: "OTHER", Value: "x"}, fromSecret}, want: &fromSecret},
		{name: "flag wins over env, as in vLLM", args: []string{"--api-key=k1"}, env: []corev1.EnvVar{fromSecret}, want: &corev1.EnvVar{Name: "VLLM_API_KEY", Value: "k1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ep := newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
				ep.Spec.Model.MaxLoras = ptr.To[int32](2)
				ep.Spec.Model.Args, ep.Spec.Model.Env = tt.args, tt.env
			})
			var got *corev1.EnvVar
			for _, c := range buildVLLMDeployment(ep, testOptions).Spec.Template.Spec.Containers {
				for i, e := range c.Env {
					if c.Name == loraAgentContainer && e.Name == "VLLM_API_KEY" {
						got = &c.Env[i]
					}
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("agent's VLLM_API_KEY (-want +got):\n%s", diff)
			}
		})
	}
}

var _ = Describe("LoRA adapters short of room", func() {
	// Five adapters on two instances that keep two each (--max-cpu-loras
	// given as "--flag N"): one is left out, and the endpoint says which
	// in its status, its condition and an event, until a third instance
	// makes room.
	It("reports the unplaced adapter in status and events, and places it when room comes", func() {
		ns := newNamespace()
		ep := minimalEndpoint(ns, "tenants")
		ep.Spec.Model.MaxLoras = ptr.To[int32](1)
		ep.Spec.Model.Args = []string{"--max-cpu-loras", "2"}
		for _, n := range []string{"acme", "globex", "hooli", "initech", "umbrella"} {
			ep.Spec.LoRAAdapters = append(ep.Spec.LoRAAdapters, v1alpha1.LoRAAdapter{Name: n, URI: "org/" + n})
		}
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())
		a := createInstancePod(ns, "tenants", "tenants-vllm-a")
		b := createInstancePod(ns, "tenants", "tenants-vllm-b")
		setPodReady(a, "10.1.0.1", true, time.Now())
		setPodReady(b, "10.1.0.2", true, time.Now())
		DeferCleanup(releasePods, ns)

		var unplaced string
		Eventually(func(g Gomega) {
			got := &v1alpha1.LLMEndpoint{}
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(ep), got)).To(Succeed())
			g.Expect(got.Status.ReadyReplicas).To(BeEquivalentTo(2))
			var out []string
			for _, st := range got.Status.Adapters {
				g.Expect(st.Unplaced).To(Equal(len(st.Desired) == 0), "adapter %s", st.Name)
				if st.Unplaced {
					out = append(out, st.Name)
				}
			}
			g.Expect(out).To(HaveLen(1))
			unplaced = out[0]
			c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionAdaptersReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonInsufficientAdapterCapacity))
			g.Expect(c.Message).To(And(ContainSubstring("5 adapters, room for 4"), HaveSuffix("unplaced: "+unplaced)))

			doc := routingDocument(g, ep)
			for _, ad := range doc.Adapters {
				g.Expect(ad.Desired).To(HaveLen(map[bool]int{true: 0, false: 1}[ad.Name == unplaced]), "adapter %s", ad.Name)
			}
			g.Expect(endpointEvents(g, ns, "tenants")).To(ContainElement(And(
				HaveField("Type", corev1.EventTypeWarning),
				HaveField("Reason", v1alpha1.ReasonInsufficientAdapterCapacity),
				HaveField("Note", ContainSubstring("unplaced: "+unplaced)))))
		}).Should(Succeed())
		GinkgoWriter.Printf("left out on 2 instances × 2: %s\n", unplaced)

		before := map[string][]string{}
		for _, ad := range routingDocument(Default, ep).Adapters {
			before[ad.Name] = ad.Desired
		}

		By("a third instance makes room: every adapter placed, none reported unplaced, none moved")
		c := createInstancePod(ns, "tenants", "tenants-vllm-c")
		setPodReady(c, "10.1.0.3", true, time.Now())
		Eventually(func(g Gomega) {
			got := &v1alpha1.LLMEndpoint{}
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(ep), got)).To(Succeed())
			g.Expect(got.Status.Adapters).To(HaveLen(5))
			for _, st := range got.Status.Adapters {
				g.Expect(st.Unplaced).To(BeFalse(), "adapter %s", st.Name)
				g.Expect(st.Desired).To(HaveLen(1), "adapter %s", st.Name)
			}
			// The placement in force (the routing document) is kept: the
			// new instance takes the adapter left out, and nothing moves.
			for _, ad := range routingDocument(g, ep).Adapters {
				if ad.Name == unplaced {
					g.Expect(ad.Desired).To(Equal([]string{"tenants-vllm-c"}))
				} else {
					g.Expect(ad.Desired).To(Equal(before[ad.Name]), "adapter %s", ad.Name)
				}
			}
			// Nothing loads them in this test (no agent): loading, not short.
			c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionAdaptersReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonAdaptersLoading))
		}).Should(Succeed())
	})
})

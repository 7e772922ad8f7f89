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
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

func vllmContainer(t *testing.T, d *appsv1.Deployment) corev1.Container {
	t.Helper()
	cs := d.Spec.Template.Spec.Containers
	if n := len(cs); n < 1 || n > 2 || cs[0].Name != "vllm" {
		t.Fatalf("containers %d, first %q: want vllm (and the LoRA agent with LoRA)", n, cs[0].Name)
	}
	return cs[0]
}

func envValue(c corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

func TestBuildVLLMDeployment(t *testing.T) {
	tests := []struct {
		name  string
		ep    *v1alpha1.LLMEndpoint
		opts  Options
		check func(t *testing.T, d *appsv1.Deployment, c corev1.Container)
	}{{
		name: "defaults",
		ep:   newEndpoint(),
		opts: testOptions,
		check: func(t *testing.T, d *appsv1.Deployment, c corev1.Container) {
			if got := *d.Spec.Replicas; got != 2 {
				t.Errorf("replicas = %d, want 2", got)
			}
			if c.Image != testOptions.VLLMImage {
				t.Errorf("image = %q, want the operator's default %q", c.Image, testOptions.VLLMImage)
			}
			want := []string{"meta-llama/Llama-3.1-8B-Instruct", "--host=0.0.0.0", "--port=8000", "--served-model-name=llama", "--enable-prefix-caching", "--tensor-parallel-size=1", "--shutdown-timeout=160"}
			if diff := cmp.Diff(want, c.Args); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
			if !slices.Equal(c.Command, []string{"vllm", "serve"}) {
				t.Errorf("command = %v", c.Command)
			}
			if q := c.Resources.Limits[resourceGPU]; q.Value() != 1 {
				t.Errorf("GPU limit = %v, want 1", q.String())
			}
			if _, ok := envValue(c, "VLLM_ALLOW_RUNTIME_LORA_UPDATING"); ok {
				t.Error("runtime LoRA updating is on without adapters")
			}
			if got := *d.Spec.Template.Spec.TerminationGracePeriodSeconds; got != v1alpha1.DefaultTerminationGracePeriodSeconds {
				t.Errorf("terminationGracePeriodSeconds = %d", got)
			}
			if d.Spec.Template.Spec.SecurityContext.RunAsUser != nil {
				t.Error("a UID is fixed without the operator asking")
			}
		},
	}, {
		name: "image, TP from GPUs, context length, extra args",
		ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Replicas = ptr.To[int32](5)
			ep.Spec.Model.Image = "my/vllm:1"
			ep.Spec.Model.GPUs = ptr.To[int32](4)
			ep.Spec.Model.MaxModelLen = ptr.To[int32](32768)
			ep.Spec.Model.Args = []string{"--gpu-memory-utilization=0.9"}
		}),
		opts: testOptions,
		check: func(t *testing.T, d *appsv1.Deployment, c corev1.Container) {
			if *d.Spec.Replicas != 5 || c.Image != "my/vllm:1" {
				t.Errorf("replicas %d image %q", *d.Spec.Replicas, c.Image)
			}
			for _, a := range []string{"--tensor-parallel-size=4", "--max-model-len=32768"} {
				if !slices.Contains(c.Args, a) {
					t.Errorf("args %v lack %s", c.Args, a)
				}
			}
			// vLLM lets the last of a repeated flag win: the operator's
			// flags come after the user's.
			if c.Args[1] != "--gpu-memory-utilization=0.9" {
				t.Errorf("user args not right after the model: %v", c.Args)
			}
			if q := c.Resources.Limits[resourceGPU]; q.Value() != 4 {
				t.Errorf("GPU limit = %s, want 4", q.String())
			}
		},
	}, {
		name: "explicit tensor parallel size",
		ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Model.GPUs = ptr.To[int32](4)
			ep.Spec.Model.TensorParallelSize = ptr.To[int32](2)
		}),
		check: func(t *testing.T, _ *appsv1.Deployment, c corev1.Container) {
			if !slices.Contains(c.Args, "--tensor-parallel-size=2") {
				t.Errorf("args %v", c.Args)
			}
		},
	}, {
		name: "weights from a PVC",
		ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Model.URI = "pvc://models/llama/8b"
		}),
		check: func(t *testing.T, d *appsv1.Deployment, c corev1.Container) {
			if c.Args[0] != "/mnt/models/llama/8b" {
				t.Errorf("model arg = %q", c.Args[0])
			}
			i := slices.IndexFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "model" })
			if i < 0 {
				t.Fatal("no model volume")
			}
			pvc := d.Spec.Template.Spec.Volumes[i].PersistentVolumeClaim
			if pvc == nil || pvc.ClaimName != "models" || !pvc.ReadOnly {
				t.Errorf("model volume = %+v", d.Spec.Template.Spec.Volumes[i])
			}
			if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.Name == "model" && m.MountPath == v1alpha1.ModelMountPath && m.ReadOnly
			}) {
				t.Errorf("mounts %v lack the read-only model", c.VolumeMounts)
			}
		},
	}, {
		name: "whole PVC",
		ep:   newEndpoint(func(ep *v1alpha1.LLMEndpoint) { ep.Spec.Model.URI = "pvc://models" }),
		check: func(t *testing.T, _ *appsv1.Deployment, c corev1.Container) {
			if c.Args[0] != v1alpha1.ModelMountPath {
				t.Errorf("model arg = %q", c.Args[0])
			}
		},
	}, {
		name: "grace period sets vLLM's drain",
		ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Model.TerminationGracePeriodSeconds = ptr.To[int64](60)
		}),
		check: func(t *testing.T, d *appsv1.Deployment, c corev1.Container) {
			// 60 = 15 s preStop + 40 s drain + 5 s for vLLM to exit.
			if !slices.Contains(c.Args, "--shutdown-timeout=40") {
				t.Errorf("args %v lack --shutdown-timeout=40", c.Args)
			}
			grace := *d.Spec.Template.Spec.TerminationGracePeriodSeconds
			preStop := c.Lifecycle.PreStop.Sleep.Seconds
			if grace != 60 || grace < preStop+40 {
				t.Errorf("grace %d cannot hold preStop %d + drain 40", grace, preStop)
			}
		},
	}, {
		name: "adapters on their own claims",
		ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Model.URI = "pvc://models/llama"
			ep.Spec.LoRAAdapters = []v1alpha1.LoRAAdapter{
				{Name: "b", URI: "pvc://adapters/b"},
				{Name: "a", URI: "pvc://adapters/a"},
				{Name: "m", URI: "pvc://models/lora/m"},
				{Name: "h", URI: "org/h"},
			}
		}),
		check: func(t *testing.T, d *appsv1.Deployment, c corev1.Container) {
			claims := map[string]string{} // volume → claim
			for _, v := range d.Spec.Template.Spec.Volumes {
				if pvc := v.PersistentVolumeClaim; pvc != nil {
					if !pvc.ReadOnly {
						t.Errorf("volume %s is writable", v.Name)
					}
					claims[v.Name] = pvc.ClaimName
				}
			}
			if len(claims) != 2 {
				t.Errorf("claim volumes %v, want models and adapters once each", claims)
			}
			mounted := map[string]string{} // mount path → claim
			for _, m := range c.VolumeMounts {
				if claim, ok := claims[m.Name]; ok {
					if !m.ReadOnly {
						t.Errorf("mount %s is writable", m.MountPath)
					}
					mounted[m.MountPath] = claim
				}
			}
			want := map[string]string{"/mnt/models": "models", "/mnt/adapters/adapters": "adapters", "/mnt/adapters/models": "models"}
			if diff := cmp.Diff(want, mounted); diff != "" {
				t.Errorf("claim mounts (-want +got):\n%s", diff)
			}
			// Each adapter's load path lies under its claim's mount.
			for _, a := range []struct{ uri, path string }{
				{"pvc://adapters/b", "/mnt/adapters/adapters/b"},
				{"pvc://models/lora/m", "/mnt/adapters/models/lora/m"},
			} {
				if got, _ := v1alpha1.AdapterLoadPath(a.uri); got != a.path {
					t.Errorf("AdapterLoadPath(%q) = %q, want %q", a.uri, got, a.path)
				}
			}
		},
	}, {
		name: "hf:// prefix",
		ep:   newEndpoint(func(ep *v1alpha1.LLMEndpoint) { ep.Spec.Model.URI = "hf://Qwen/Qwen3-8B" }),
		check: func(t *testing.T, d *appsv1.Deployment, c corev1.Container) {
			if c.Args[0] != "Qwen/Qwen3-8B" {
				t.Errorf("model arg = %q", c.Args[0])
			}
			if slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "model" }) {
				t.Error("a model volume for a Hugging Face model")
			}
		},
	}, {
		name: "LoRA adapters",
		ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.LoRAAdapters = []v1alpha1.LoRAAdapter{{Name: "a", URI: "org/a", Replicas: ptr.To[int32](1)}}
			ep.Spec.Model.MaxLoras = ptr.To[int32](4)
			ep.Spec.Model.MaxLoraRank = ptr.To[int32](64)
		}),
		check: func(t *testing.T, d *appsv1.Deployment, c corev1.Container) {
			ps := d.Spec.Template.Spec
			if len(ps.Containers) != 2 || ps.Containers[1].Name != loraAgentContainer || ps.ServiceAccountName != "chat-lora-agent" {
				t.Errorf("no LoRA agent sidecar: containers %d, serviceAccountName %q", len(ps.Containers), ps.ServiceAccountName)
			}
			if ptr.Deref(ps.AutomountServiceAccountToken, true) {
				t.Error("the service-account token is mounted into vLLM too")
			}
			for _, m := range c.VolumeMounts {
				if m.MountPath == serviceAccountDir {
					t.Error("vLLM mounts the agent's token")
				}
			}
			for _, a := range []string{"--enable-lora", "--max-loras=4", "--max-lora-rank=64"} {
				if !slices.Contains(c.Args, a) {
					t.Errorf("args %v lack %s", c.Args, a)
				}
			}
			if e, ok := envValue(c, "VLLM_ALLOW_RUNTIME_LORA_UPDATING"); !ok || e.Value != "True" {
				t.Errorf("VLLM_ALLOW_RUNTIME_LORA_UPDATING = %+v", e)
			}
		},
	}, {
		name: "CPU only",
		ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Model.GPUs = ptr.To[int32](0)
			ep.Spec.Model.Resources = &corev1.ResourceRequirements{
				Limits: corev1.ResourceList{resourceGPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi")},
			}
		}),
		check: func(t *testing.T, _ *appsv1.Deployment, c corev1.Container) {
			if _, ok := c.Resources.Limits[resourceGPU]; ok {
				t.Errorf("GPU limit with gpus 0: %v", c.Resources.Limits)
			}
			if _, ok := c.Resources.Requests[resourceGPU]; ok {
				t.Errorf("GPU request with gpus 0: %v", c.Resources.Requests)
			}
			if q := c.Resources.Limits[corev1.ResourceMemory]; q.String() != "8Gi" {
				t.Errorf("memory limit = %s, want the user's 8Gi", q.String())
			}
			if !slices.Contains(c.Args, "--tensor-parallel-size=1") {
				t.Errorf("args %v", c.Args)
			}
		},
	}, {
		name: "token, user env, placement, grace, UID",
		ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Model.HFTokenSecretRef = &v1alpha1.SecretKeyRef{Name: "hf", Key: "tok"}
			ep.Spec.Model.Env = []corev1.EnvVar{{Name: "HOME", Value: "/home/me"}, {Name: "EXTRA", Value: "1"}}
			ep.Spec.Model.NodeSelector = map[string]string{"gpu": "l40s"}
			ep.Spec.Model.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}}
			ep.Spec.Model.TerminationGracePeriodSeconds = ptr.To[int64](600)
		}),
		opts: Options{VLLMImage: "x", VLLMRunAsUser: ptr.To[int64](1000)},
		check: func(t *testing.T, d *appsv1.Deployment, c corev1.Container) {
			tok, ok := envValue(c, "HF_TOKEN")
			if !ok || tok.ValueFrom == nil || tok.ValueFrom.SecretKeyRef.Name != "hf" || tok.ValueFrom.SecretKeyRef.Key != "tok" {
				t.Errorf("HF_TOKEN = %+v", tok)
			}
			if home, _ := envValue(c, "HOME"); home.Value != "/home/me" {
				t.Errorf("HOME = %q, want the user's", home.Value)
			}
			if n := len(slices.DeleteFunc(slices.Clone(c.Env), func(e corev1.EnvVar) bool { return e.Name != "HOME" })); n != 1 {
				t.Errorf("HOME set %d times", n)
			}
			if extra, _ := envValue(c, "EXTRA"); extra.Value != "1" {
				t.Error("user env EXTRA missing")
			}
			ps := d.Spec.Template.Spec
			if ps.NodeSelector["gpu"] != "l40s" || len(ps.Tolerations) != 1 {
				t.Errorf("placement: %v %v", ps.NodeSelector, ps.Tolerations)
			}
			if *ps.TerminationGracePeriodSeconds != 600 {
				t.Errorf("grace = %d", *ps.TerminationGracePeriodSeconds)
			}
			if ps.SecurityContext.RunAsUser == nil || *ps.SecurityContext.RunAsUser != 1000 {
				t.Errorf("runAsUser = %v", ps.SecurityContext.RunAsUser)
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.ep.DeepCopy()
			d := buildVLLMDeployment(tt.ep, tt.opts)
			if diff := cmp.Diff(before, tt.ep); diff != "" {
				t.Fatalf("the builder changed the LLMEndpoint:\n%s", diff)
			}
			c := vllmContainer(t, d)
			checkVLLMInvariants(t, tt.ep, d, c)
			tt.check(t, d, c)
		})
	}
}

// checkVLLMInvariants holds for every vLLM Deployment, whatever the spec.
func checkVLLMInvariants(t *testing.T, ep *v1alpha1.LLMEndpoint, d *appsv1.Deployment, c corev1.Container) {
	t.Helper()
	if d.Name != "chat-vllm" || d.Namespace != "team" {
		t.Errorf("name %s/%s", d.Namespace, d.Name)
	}
	ref := metav1.GetControllerOf(d)
	if ref == nil || ref.UID != ep.UID || ref.Kind != "LLMEndpoint" || !ptr.Deref(ref.BlockOwnerDeletion, false) {
		t.Errorf("controller reference = %+v", ref)
	}
	if n := strings.Count(strings.Join(c.Args, " "), "--enable-prefix-caching"); n != 1 {
		t.Errorf("--enable-prefix-caching appears %d times in %v", n, c.Args)
	}
	for k, v := range d.Spec.Selector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("template labels %v do not match selector %v", d.Spec.Template.Labels, d.Spec.Selector.MatchLabels)
		}
	}
	if d.Spec.Template.Labels["app.kubernetes.io/instance"] != "chat" || d.Spec.Template.Labels[LabelEndpoint] != "chat" {
		t.Errorf("template labels %v do not identify the endpoint", d.Spec.Template.Labels)
	}
	if len(d.Spec.Template.Annotations) != 0 {
		t.Errorf("template annotations %v: nothing but the spec may roll the instances", d.Spec.Template.Annotations)
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != vllmPort {
		t.Errorf("ports %v", c.Ports)
	}
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/health" {
			t.Errorf("%s probe = %+v", name, p)
		}
	}
	if budget := c.StartupProbe.PeriodSeconds * c.StartupProbe.FailureThreshold; budget < 900 {
		t.Errorf("startup probe allows %d s for loading the model", budget)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Error("no preStop pause for the routers to drop the instance")
	} else if pause := c.Lifecycle.PreStop.Sleep.Seconds; pause >= *d.Spec.Template.Spec.TerminationGracePeriodSeconds {
		t.Errorf("preStop %d s leaves no time to drain within the grace period", pause)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/dev/shm" }) {
		t.Error("no /dev/shm")
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == cacheMountPath }) {
		t.Error("no model cache volume")
	}
	ps := d.Spec.Template.Spec
	if len(ps.TopologySpreadConstraints) == 0 || ps.TopologySpreadConstraints[0].TopologyKey != corev1.LabelHostname {
		t.Errorf("not spread over nodes: %+v", ps.TopologySpreadConstraints)
	}
	checkRestricted(t, ps, c)
}

// checkRestricted checks the restricted pod security standard.
func checkRestricted(t *testing.T, ps corev1.PodSpec, c corev1.Container) {
	t.Helper()
	if ps.SecurityContext == nil || !ptr.Deref(ps.SecurityContext.RunAsNonRoot, false) ||
		ps.SecurityContext.SeccompProfile == nil || ps.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context = %+v", ps.SecurityContext)
	}
	sc := c.SecurityContext
	if sc == nil || ptr.Deref(sc.AllowPrivilegeEscalation, true) || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 || ptr.Deref(sc.Privileged, false) {
		t.Errorf("container security context = %+v", sc)
	}
}

// TestVLLMPodTemplateIgnoresAdapterList: with maxLoras set, adding or
// removing adapters must not roll the instances (it would drop their caches).
func TestVLLMPodTemplateIgnoresAdapterList(t *testing.T) {
	withLoRA := func(ep *v1alpha1.LLMEndpoint) { ep.Spec.Model.MaxLoras = ptr.To[int32](2) }
	none := buildVLLMDeployment(newEndpoint(withLoRA), testOptions)
	two := buildVLLMDeployment(newEndpoint(withLoRA, func(ep *v1alpha1.LLMEndpoint) {
		ep.Spec.LoRAAdapters = []v1alpha1.LoRAAdapter{{Name: "a", URI: "org/a"}, {Name: "b", URI: "/adapters/b"}}
	}), testOptions)
	if diff := cmp.Diff(none.Spec.Template, two.Spec.Template); diff != "" {
		t.Errorf("pod template depends on the adapter list (-none +two):\n%s", diff)
	}
}

func TestBuildVLLMService(t *testing.T) {
	ep := newEndpoint()
	svc := buildVLLMService(ep)
	if svc.Name != "chat-vllm" || svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("service %s clusterIP %q, want headless chat-vllm", svc.Name, svc.Spec.ClusterIP)
	}
	if diff := cmp.Diff(selectorLabels(ep, roleVLLM), svc.Spec.Selector); diff != "" {
		t.Errorf("selector (-want +got):\n%s", diff)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != vllmPort {
		t.Errorf("ports %+v", svc.Spec.Ports)
	}
	if metav1.GetControllerOf(svc) == nil {
		t.Error("no controller reference")
	}
}

func TestPodDeletionCost(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		pod      corev1.Pod
		wantCost int32
		wantNext time.Duration
	}{
		{"unready", newPod("p", "10.0.0.1", podUnready, now.Add(-time.Hour)), 0, 0},
		{"just ready", newPod("p", "10.0.0.1", podReady, now), 0, time.Minute},
		{"ready 30 s", newPod("p", "10.0.0.1", podReady, now.Add(-30*time.Second)), 0, 30 * time.Second},
		{"ready 1 min", newPod("p", "10.0.0.1", podReady, now.Add(-time.Minute)), 1, 2 * time.Minute},
		{"ready 5 min", newPod("p", "10.0.0.1", podReady, now.Add(-5*time.Minute)), 2, 2 * time.Minute},
		{"ready 1 h", newPod("p", "10.0.0.1", podReady, now.Add(-time.Hour)), 5, 3 * time.Minute},
		{"ready 2 days", newPod("p", "10.0.0.1", podReady, now.Add(-48*time.Hour)), maxDeletionCostStep, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cost, next := podDeletionCost(&tt.pod, now)
			if cost != tt.wantCost || next != tt.wantNext {
				t.Errorf("podDeletionCost = %d, %v; want %d, %v", cost, next, tt.wantCost, tt.wantNext)
			}
		})
	}
	// Warmer is never cheaper.
	var last int32
	for m := 0; m < 3000; m += 7 {
		pod := newPod("p", "10.0.0.1", podReady, now.Add(-time.Duration(m)*time.Minute))
		cost, _ := podDeletionCost(&pod, now)
		if cost < last {
			t.Fatalf("cost fell from %d to %d at %d minutes", last, cost, m)
		}
		last = cost
	}
}

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
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// update rewrites the golden files instead of comparing with them:
// go test ./controllers -run TestBuildVLLMDeployment -update
var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// vllmShapes are the endpoint shapes whose vLLM Deployment is kept as a
// golden file, testdata/vllm-deployment/<name>.yaml.
var vllmShapes = []struct {
	name string
	ep   *v1alpha1.LLMEndpoint
	// identity is the operator's VLLM identity (testOptions' none, as on
	// OpenShift, otherwise).
	identity PodIdentity
}{
	{name: "defaults", ep: newEndpoint()},
	{name: "image-tp-from-gpus-context-length-args", ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
		ep.Spec.Replicas = ptr.To[int32](5)
		ep.Spec.Model.Image = "my/vllm:1"
		ep.Spec.Model.GPUs = ptr.To[int32](4)
		ep.Spec.Model.MaxModelLen = ptr.To[int32](32768)
		ep.Spec.Model.Args = []string{"--gpu-memory-utilization=0.9"}
	})},
	{name: "explicit-tensor-parallel", ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
		ep.Spec.Model.GPUs = ptr.To[int32](4)
		ep.Spec.Model.TensorParallelSize = ptr.To[int32](2)
	})},
	{name: "weights-on-pvc", ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
		ep.Spec.Model.URI = "pvc://models/llama/8b"
	})},
	{name: "whole-pvc", ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) { ep.Spec.Model.URI = "pvc://models" })},
	{name: "grace-period", ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
		// 60 = 15 s preStop + 40 s drain (--shutdown-timeout) + 5 s to exit.
		ep.Spec.Model.TerminationGracePeriodSeconds = ptr.To[int64](60)
	})},
	{name: "adapters-on-claims", ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
		ep.Spec.Model.URI = "pvc://models/llama"
		ep.Spec.LoRAAdapters = []v1alpha1.LoRAAdapter{
			{Name: "b", URI: "pvc://adapters/b"},
			{Name: "a", URI: "pvc://adapters/a"},
			{Name: "m", URI: "pvc://models/lora/m"},
			{Name: "h", URI: "org/h"},
		}
	})},
	{name: "hf-prefix", ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) { ep.Spec.Model.URI = "hf://Qwen/Qwen3-8B" })},
	{name: "lora-adapters", ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
		ep.Spec.LoRAAdapters = []v1alpha1.LoRAAdapter{{Name: "a", URI: "org/a", Replicas: ptr.To[int32](1)}}
		ep.Spec.Model.MaxLoras = ptr.To[int32](4)
		ep.Spec.Model.MaxLoraRank = ptr.To[int32](64)
	})},
	{name: "weak-hash-overridden", ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
		// The webhook refuses it; without the webhook the operator's
		// sha256, which comes last, wins.
		ep.Spec.Model.Args = []string{"--prefix-caching-hash-algo=xxhash"}
	})},
	{name: "user-sha256-cbor", ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
		ep.Spec.Model.Args = []string{"--prefix_caching_hash_algo", "sha256_cbor"}
	})},
	{name: "cpu-only", ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
		// gpus 0 drops the user's GPU limit, keeps the rest.
		ep.Spec.Model.GPUs = ptr.To[int32](0)
		ep.Spec.Model.Resources = &corev1.ResourceRequirements{
			Limits: corev1.ResourceList{resourceGPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi")},
		}
	})},
	{name: "token-env-placement-grace-uid", ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
		ep.Spec.Model.HFTokenSecretRef = &v1alpha1.SecretKeyRef{Name: "hf", Key: "tok"}
		// HOME replaces the operator's entry, EXTRA is appended.
		ep.Spec.Model.Env = []corev1.EnvVar{{Name: "HOME", Value: "/home/me"}, {Name: "EXTRA", Value: "1"}}
		ep.Spec.Model.NodeSelector = map[string]string{"gpu": "l40s"}
		ep.Spec.Model.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}}
		ep.Spec.Model.TerminationGracePeriodSeconds = ptr.To[int64](600)
	}), identity: PodIdentity{RunAsUser: ptr.To[int64](1000)}},
	{name: "kubernetes-identity", ep: newEndpoint(), identity: DefaultVLLMIdentity(false)},
	{name: "model-cache-provisioned", ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
		ep.Spec.Model.Cache = &v1alpha1.ModelCacheSpec{Size: ptr.To(resource.MustParse("40Gi"))}
	}), identity: DefaultVLLMIdentity(false)},
	{name: "model-cache-claim", ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
		ep.Spec.Model.URI = "pvc://models/llama"
		ep.Spec.Model.Cache = &v1alpha1.ModelCacheSpec{ClaimName: "shared-hf-cache"}
	})},
	{name: "rollout-with-surge", ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
		ep.Spec.Rollout = v1alpha1.RolloutSpec{MaxSurge: ptr.To(intstr.FromString("25%")), MaxUnavailable: ptr.To(intstr.FromInt32(0))}
	})},
	{name: "recorded-images", ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
		// The images an older operator recorded win over testOptions'.
		ep.Annotations = map[string]string{v1alpha1.AnnotationVLLMImage: "vllm/vllm-openai:recorded", v1alpha1.AnnotationLoRAAgentImage: "router:recorded"}
		ep.Spec.Model.MaxLoras = ptr.To[int32](2)
	})},
}

// TestBuildVLLMDeployment compares the vLLM Deployment of each shape with
// its golden file, byte for byte, and checks what must hold for every shape.
func TestBuildVLLMDeployment(t *testing.T) {
	for _, tt := range vllmShapes {
		t.Run(tt.name, func(t *testing.T) {
			opts := testOptions
			opts.VLLM = tt.identity
			before := tt.ep.DeepCopy()
			d := buildVLLMDeployment(tt.ep, opts)
			if diff := cmp.Diff(before, tt.ep); diff != "" {
				t.Fatalf("the builder changed the LLMEndpoint:\n%s", diff)
			}
			checkGolden(t, filepath.Join("testdata", "vllm-deployment", tt.name+".yaml"), d)
			checkVLLMInvariants(t, tt.ep, d)
		})
	}
}

// checkGolden compares obj as YAML with the golden file at path, or
// rewrites the file under -update.
func checkGolden(t *testing.T, path string, obj any) {
	t.Helper()
	got, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	checkGoldenBytes(t, path, got)
}

// checkGoldenBytes compares got with the golden file at path, or rewrites
// the file under -update.
func checkGoldenBytes(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(want, got) {
		lines := func(b []byte) []string { return strings.Split(string(b), "\n") }
		t.Errorf("%s differs (-want +got; run with -update if the change is meant):\n%s", path, cmp.Diff(lines(want), lines(got)))
	}
}

// checkVLLMInvariants holds for every vLLM Deployment, whatever the spec:
// properties a golden file shows for one shape but does not state.
func checkVLLMInvariants(t *testing.T, ep *v1alpha1.LLMEndpoint, d *appsv1.Deployment) {
	t.Helper()
	ps := d.Spec.Template.Spec
	c := ps.Containers[0]
	if c.Name != "vllm" {
		t.Fatalf("first container %q, want vllm", c.Name)
	}
	if d.Name != vllmName(ep) || d.Namespace != ep.Namespace {
		t.Errorf("name %s/%s", d.Namespace, d.Name)
	}
	ref := metav1.GetControllerOf(d)
	if ref == nil || ref.UID != ep.UID || ref.Kind != "LLMEndpoint" || !ptr.Deref(ref.BlockOwnerDeletion, false) {
		t.Errorf("controller reference = %+v", ref)
	}
	// vLLM lets the last of a repeated flag win: the user's flags come
	// right after the model, the operator's after them.
	if user := ep.Spec.Model.Args; !slices.Equal(c.Args[1:1+len(user)], user) {
		t.Errorf("user args %v not right after the model: %v", user, c.Args)
	}
	if n := slices.Index(c.Args, "--enable-prefix-caching"); n < 0 || slices.Contains(c.Args[n+1:], "--enable-prefix-caching") {
		t.Errorf("--enable-prefix-caching not exactly once in %v", c.Args)
	}
	// The prefix cache's block hash the operator passes after the user's
	// args, so it wins, is collision-resistant.
	user := len(ep.Spec.Model.Args)
	if set := v1alpha1.PrefixCachingHashAlgoArgs(c.Args); len(set) == 0 || set[len(set)-1].Index <= user ||
		!slices.Contains(v1alpha1.CollisionResistantHashAlgos, set[len(set)-1].Value) {
		t.Errorf("no collision-resistant --prefix-caching-hash-algo after the user's args in %v", c.Args)
	}
	for k, v := range d.Spec.Selector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("template labels %v do not match selector %v", d.Spec.Template.Labels, d.Spec.Selector.MatchLabels)
		}
	}
	if len(d.Spec.Template.Annotations) != 0 {
		t.Errorf("template annotations %v: nothing but the spec may roll the instances", d.Spec.Template.Annotations)
	}
	if budget := c.StartupProbe.PeriodSeconds * c.StartupProbe.FailureThreshold; budget < 900 {
		t.Errorf("startup probe allows %d s for loading the model", budget)
	}
	// The grace period holds the preStop pause (the routers drop the
	// instance) and vLLM's drain.
	grace := *ps.TerminationGracePeriodSeconds
	drain := v1alpha1.ShutdownTimeoutSeconds(ep)
	if !slices.Contains(c.Args, "--shutdown-timeout="+strconv.FormatInt(drain, 10)) || grace < int64(c.Lifecycle.PreStop.Sleep.Seconds)+drain {
		t.Errorf("grace %d cannot hold preStop %d + drain %d (args %v)", grace, c.Lifecycle.PreStop.Sleep.Seconds, drain, c.Args)
	}
	// Env entries are unique: the user's replace the operator's.
	seen := map[string]bool{}
	for _, e := range c.Env {
		if seen[e.Name] {
			t.Errorf("env %s set twice", e.Name)
		}
		seen[e.Name] = true
	}
	// Weights are read-only, and vLLM never sees the LoRA agent's token.
	if ptr.Deref(ps.AutomountServiceAccountToken, true) {
		t.Error("the service-account token is mounted into every container")
	}
	for _, v := range ps.Volumes {
		if pvc := v.PersistentVolumeClaim; pvc != nil && !pvc.ReadOnly && v.Name != modelCacheVolume {
			t.Errorf("claim volume %s is writable", v.Name)
		}
	}
	// The model cache is where Hugging Face looks.
	if ep.Spec.Model.Cache != nil {
		i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == modelCacheVolume })
		j := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "HF_HOME" })
		if i < 0 || j < 0 || c.VolumeMounts[i].MountPath != c.Env[j].Value || c.VolumeMounts[i].ReadOnly {
			t.Errorf("model cache mounts %v, env %v: not writable at HF_HOME", c.VolumeMounts, c.Env)
		}
	}
	// No surge instance unless the spec asks: it would need a spare GPU.
	if ep.Spec.Rollout.MaxSurge == nil {
		if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 0 {
			t.Errorf("strategy %+v surges", d.Spec.Strategy)
		}
	}
	for _, m := range c.VolumeMounts {
		if strings.HasPrefix(m.MountPath, "/mnt/") && !m.ReadOnly {
			t.Errorf("weights mount %s is writable", m.MountPath)
		}
		if m.MountPath == serviceAccountDir {
			t.Error("vLLM mounts the agent's token")
		}
	}
	// Each adapter on a claim loads from under that claim's mount.
	for _, a := range ep.Spec.LoRAAdapters {
		src, err := v1alpha1.ParseWeightsURI(a.URI)
		if err != nil || !src.OnClaim() {
			continue
		}
		p, _ := v1alpha1.AdapterLoadPath(a.URI)
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return strings.HasPrefix(p, m.MountPath+"/") }) {
			t.Errorf("adapter %s loads from %s, under no mount of %v", a.Name, p, c.VolumeMounts)
		}
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
// removing adapters (from Hugging Face, the image or object storage, with
// its credentials) must not roll the instances (it would drop their caches).
func TestVLLMPodTemplateIgnoresAdapterList(t *testing.T) {
	withLoRA := func(ep *v1alpha1.LLMEndpoint) { ep.Spec.Model.MaxLoras = ptr.To[int32](2) }
	none := buildVLLMDeployment(newEndpoint(withLoRA), testOptions)
	two := buildVLLMDeployment(newEndpoint(withLoRA, func(ep *v1alpha1.LLMEndpoint) {
		ep.Spec.LoRAAdapters = []v1alpha1.LoRAAdapter{{Name: "a", URI: "org/a"}, {Name: "b", URI: "/adapters/b"},
			{Name: "c", URI: "s3://tenants/c", S3: &v1alpha1.S3Source{Endpoint: "http://minio:9000", CredentialsSecret: "s3-creds"}}}
	}), testOptions)
	if diff := cmp.Diff(none.Spec.Template, two.Spec.Template); diff != "" {
		t.Errorf("pod template depends on the adapter list (-none +two):\n%s", diff)
	}
}

func TestBuildVLLMService(t *testing.T) {
	ep := newEndpoint()
	svc := buildVLLMService(ep)
	if svc.Name != vllmName(ep) || svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("service %s clusterIP %q, want headless %s", svc.Name, svc.Spec.ClusterIP, vllmName(ep))
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
			cost, next := podDeletionCost(&tt.pod, now, nil)
			if cost != tt.wantCost || next != tt.wantNext {
				t.Errorf("podDeletionCost = %d, %v; want %d, %v", cost, next, tt.wantCost, tt.wantNext)
			}
		})
	}
	// With heat measured, the hits set the cost, whatever the age.
	heat := map[string]float64{"p": 5000, "cold": 0}
	for _, tt := range []struct {
		name     string
		pod      corev1.Pod
		wantCost int32
	}{
		{"hot, young", newPod("p", "10.0.0.1", podReady, now.Add(-time.Minute)), 13},
		{"no hits, old", newPod("cold", "10.0.0.2", podReady, now.Add(-48*time.Hour)), 1},
		{"not measured yet", newPod("new", "10.0.0.3", podReady, now.Add(-48*time.Hour)), 0},
		{"hot but unready", newPod("p", "10.0.0.1", podUnready, now.Add(-time.Hour)), 0},
	} {
		if cost, next := podDeletionCost(&tt.pod, now, heat); cost != tt.wantCost || next != 0 {
			t.Errorf("%s: podDeletionCost by heat = %d, %v; want %d, 0", tt.name, cost, next, tt.wantCost)
		}
	}
	// More hits never cost less.
	var lastHeat int32
	for hits := 0.0; hits < 1e9; hits = hits*1.3 + 1 {
		pod := newPod("p", "10.0.0.1", podReady, now)
		cost, _ := podDeletionCost(&pod, now, map[string]float64{"p": hits})
		if cost < lastHeat {
			t.Fatalf("cost fell from %d to %d at %v hits", lastHeat, cost, hits)
		}
		lastHeat = cost
	}
	// Warmer is never cheaper.
	var last int32
	for m := 0; m < 3000; m += 7 {
		pod := newPod("p", "10.0.0.1", podReady, now.Add(-time.Duration(m)*time.Minute))
		cost, _ := podDeletionCost(&pod, now, nil)
		if cost < last {
			t.Fatalf("cost fell from %d to %d at %d minutes", last, cost, m)
		}
		last = cost
	}
}

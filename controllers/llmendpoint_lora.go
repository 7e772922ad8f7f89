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
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/controllers/lora"
)

// The LoRA agent's interface (sidecar/cmd/lora-agent), shipped in the
// router image.
const (
	loraAgentContainer = "lora-agent"
	loraAgentBinary    = "/lora-agent"
	loraAgentConfigDir = "/etc/warmroute/routing"
	// serviceAccountDir is where client-go looks for in-cluster credentials.
	serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
)

// adapterPlacement is one adapter's placement and where it is loaded.
type adapterPlacement struct {
	name, uri string
	s3        *routing.S3Source
	// desired are the instances placed to hold it; ready those the routers
	// send its requests to; failed the desired ones that could not load it.
	desired, ready []string
	failed         []v1alpha1.AdapterFailure
}

// vLLM's default --max-loras (LoRAConfig.max_loras): one adapter per
// batch, and --max-cpu-loras follows it.
const vllmDefaultMaxLoras = 1

// loraCapacity is how many adapters an instance keeps loaded. vLLM's
// /v1/load_lora_adapter registers an adapter and preloads it into the
// worker's LRU cache of --max-cpu-loras adapters (default: --max-loras,
// whose default is 1); registering more evicts the least recently used,
// which is then read from disk again on every request that needs it. So
// the capacity is --max-cpu-loras from spec.model.args when given, else
// spec.model.maxLoras, else vLLM's default.
func loraCapacity(ep *v1alpha1.LLMEndpoint) int {
	if v, ok := vllmFlagValue(ep.Spec.Model.Args, "--max-cpu-loras"); ok {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return n
		}
	}
	return int(ptr.Deref(ep.Spec.Model.MaxLoras, vllmDefaultMaxLoras))
}

// vllmFlagValue is the value args give flag (in any spelling vLLM reads:
// --flag=v, --flag v, underscores for dashes), from its last occurrence,
// as vLLM's parser lets the last win; of a flag taking several values, the
// first.
func vllmFlagValue(args []string, flag string) (string, bool) {
	value, found := "", false
	for i, a := range args {
		if v1alpha1.CanonicalVLLMFlag(a) != flag {
			continue
		}
		if _, v, ok := strings.Cut(a, "="); ok {
			value, found = v, true
		} else if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			value, found = args[i+1], true
		}
	}
	return value, found
}

// currentPlacement is the placement in force: the desired instances of
// each adapter in the stored routing document, which the LoRA agents act
// on. It lives in the cluster, so a restarted operator, or another
// replica, places from the same one. Nil when there is no document or it
// cannot be read; placement then starts afresh in rendezvous order.
func (r *LLMEndpointReconciler) currentPlacement(ctx context.Context, ep *v1alpha1.LLMEndpoint) (map[string][]string, error) {
	if len(ep.Spec.LoRAAdapters) == 0 {
		return nil, nil
	}
	var cm corev1.ConfigMap
	if err := r.Get(ctx, client.ObjectKey{Namespace: ep.Namespace, Name: routingConfigMapName(ep)}, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get routing ConfigMap: %w", err)
	}
	return storedPlacement(&cm), nil
}

// storedPlacement is each adapter's desired instances in a routing
// ConfigMap; nil if its document does not decode.
func storedPlacement(cm *corev1.ConfigMap) map[string][]string {
	doc, err := routing.Decode([]byte(cm.Data[routing.ConfigMapKey]))
	if err != nil {
		return nil
	}
	out := make(map[string][]string, len(doc.Adapters))
	for _, a := range doc.Adapters {
		out[a.Name] = a.Desired
	}
	return out
}

// placeAdapters places the endpoint's adapters on the routable instances,
// moving as little of the current placement as it can (see package lora),
// and works out from each instance's reported LoRA state where each adapter
// may receive traffic. An adapter is ready on a desired instance once
// loaded there; an instance it is moving away from keeps serving it until
// every desired instance has it (make before break), and only then does the
// agent there unload it.
func placeAdapters(ep *v1alpha1.LLMEndpoint, pods []corev1.Pod, current map[string][]string) []adapterPlacement {
	if len(ep.Spec.LoRAAdapters) == 0 {
		return nil
	}
	var ids []string
	states := map[string]routing.LoRAState{}
	for i := range pods {
		pod := &pods[i]
		if !isRoutable(pod) {
			continue
		}
		ids = append(ids, pod.Name)
		// An unreadable report counts as nothing loaded.
		states[pod.Name], _ = routing.ParseLoRAState(pod.Annotations[routing.AnnotationLoRAState])
	}
	slices.Sort(ids)
	demands := make([]lora.Demand, len(ep.Spec.LoRAAdapters))
	for i, a := range ep.Spec.LoRAAdapters {
		demands[i] = lora.Demand{Name: a.Name, Replicas: int(ptr.Deref(a.Replicas, 1))}
	}
	placed := lora.Place(demands, ids, loraCapacity(ep), hashSeed(ep), current)

	out := make([]adapterPlacement, 0, len(ep.Spec.LoRAAdapters))
	for _, a := range ep.Spec.LoRAAdapters {
		p := adapterPlacement{name: a.Name, uri: a.URI, s3: routingS3Source(a.S3), desired: placed[a.Name]}
		var lingering []string
		for _, id := range ids {
			st := states[id]
			loaded := slices.Contains(st.Loaded, a.Name)
			desired := slices.Contains(p.desired, id)
			switch {
			case loaded && desired:
				p.ready = append(p.ready, id)
			case loaded:
				lingering = append(lingering, id)
			case desired:
				for _, f := range st.Failed {
					if f.Name == a.Name {
						p.failed = append(p.failed, v1alpha1.AdapterFailure{Instance: id, Reason: truncate(f.Reason, 1024)})
					}
				}
			}
		}
		if len(p.ready) < len(p.desired) {
			p.ready = append(p.ready, lingering...)
			slices.Sort(p.ready)
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b adapterPlacement) int { return strings.Compare(a.name, b.name) })
	return out
}

// unplaced is whether placement found no room for the adapter on ready
// instances: with any ready instance, every adapter gets one while room
// lasts.
func (p adapterPlacement) unplaced(ready int) bool { return ready > 0 && len(p.desired) == 0 }

// routingS3Source is an adapter's S3 options as the agent reads them.
func routingS3Source(s *v1alpha1.S3Source) *routing.S3Source {
	if s == nil {
		return nil
	}
	return &routing.S3Source{Endpoint: s.Endpoint, Region: s.Region, CredentialsSecret: s.CredentialsSecret}
}

// adapterStatuses are the placements on ready instances as status.adapters.
func adapterStatuses(placements []adapterPlacement, ready int) []v1alpha1.AdapterStatus {
	var out []v1alpha1.AdapterStatus
	for _, p := range placements {
		out = append(out, v1alpha1.AdapterStatus{
			Name: p.name, Desired: p.desired, Loaded: p.ready, Failed: p.failed,
			Unplaced: p.unplaced(ready),
		})
	}
	return out
}

// adaptersCondition is AdaptersReady for the placements on ready
// instances that hold capacity adapters each. A fleet too small for every
// adapter says so first: those adapters are not loading, and will not be
// until the fleet or its capacity grows.
func adaptersCondition(placements []adapterPlacement, capacity, ready int) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionAdaptersReady}
	var unplaced, failed, loading []string
	for _, p := range placements {
		switch {
		case p.unplaced(ready):
			unplaced = append(unplaced, p.name)
		case len(p.failed) > 0:
			failed = append(failed, fmt.Sprintf("%s on %s: %s", p.name, p.failed[0].Instance, p.failed[0].Reason))
		case len(p.desired) == 0 || !subset(p.desired, p.ready):
			loading = append(loading, p.name)
		}
	}
	switch {
	case len(unplaced) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonInsufficientAdapterCapacity
		c.Message = truncate(fmt.Sprintf("%d adapters, room for %d: %d ready instances × %d adapters each (--max-cpu-loras, else maxLoras, else vLLM's default %d); unplaced: %s",
			len(placements), ready*capacity, ready, capacity, vllmDefaultMaxLoras, strings.Join(unplaced, ", ")), 1024)
	case len(failed) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonAdapterLoadFailed
		c.Message = truncate(strings.Join(failed, "; "), 1024)
	case len(loading) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonAdaptersLoading
		c.Message = truncate("not yet loaded on every desired instance: "+strings.Join(loading, ", "), 1024)
	default:
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonAdaptersLoaded
		c.Message = fmt.Sprintf("%d adapters loaded where placed", len(placements))
	}
	return c
}

func subset(small, big []string) bool {
	for _, s := range small {
		if !slices.Contains(big, s) {
			return false
		}
	}
	return true
}

// loraAgentName names the vLLM pods' ServiceAccount, Role and RoleBinding,
// which only the LoRA agent uses.
func loraAgentName(ep *v1alpha1.LLMEndpoint) string { return ep.Name + "-lora-agent" }

func buildLoRAAgentServiceAccount(ep *v1alpha1.LLMEndpoint) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: objectMeta(ep, loraAgentName(ep), roleVLLM, "vllm"),
		// Only the agent container mounts a token (see loraAgentVolume).
		AutomountServiceAccountToken: ptr.To(false),
	}
}

// buildLoRAAgentRole lets the agent read the routing ConfigMap through the
// API and report its state on its pod. RBAC cannot name a pod that does not
// exist yet, so the grant covers the namespace's pods; it is get and patch
// only. It grants no Secret, not even those adapters in object storage
// name: to grant one the operator would have to read Secrets itself (RBAC
// lets no one grant what it does not hold), and it reads none. The owner
// of a credentials Secret grants the agent's ServiceAccount get on it
// (docs/lora.md, "Adapters in object storage").
func buildLoRAAgentRole(ep *v1alpha1.LLMEndpoint) *rbacv1.Role {
	return newRole(objectMeta(ep, loraAgentName(ep), roleVLLM, "vllm"), readRoutingConfigMap(ep), rbacv1.PolicyRule{
		APIGroups: []string{""},
		Resources: []string{"pods"},
		Verbs:     []string{"get", "patch"},
	})
}

func buildLoRAAgentRoleBinding(ep *v1alpha1.LLMEndpoint) *rbacv1.RoleBinding {
	return newRoleBinding(objectMeta(ep, loraAgentName(ep), roleVLLM, "vllm"))
}

// loraDownloadsVolume is the pod's adapter directory: the agent downloads
// adapters from object storage into it, and vLLM loads them from there.
// It is there whenever LoRA is, so that an adapter from object storage
// never changes the pod template. An emptyDir: each pod fetches the
// adapters placed on it, and they go with the pod.
const loraDownloadsVolume = "lora-downloads"

// loraDownloadsMount is the adapter directory's mount in the vLLM
// container (read-only) or the agent's.
func loraDownloadsMount(readOnly bool) corev1.VolumeMount {
	return corev1.VolumeMount{Name: loraDownloadsVolume, MountPath: v1alpha1.AdapterDownloadRoot, ReadOnly: readOnly}
}

// loraAgentVolumes are the routing ConfigMap (a directory mount, which the
// kubelet keeps current), the adapter directory, and a service-account
// token projected for the agent alone: vLLM itself gets no credentials.
func loraAgentVolumes(ep *v1alpha1.LLMEndpoint) []corev1.Volume {
	return []corev1.Volume{routingConfigMapVolume(ep), {
		Name:         loraDownloadsVolume,
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}},
	}, {
		Name: "lora-agent-token",
		VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To(int64(3607))}},
			{ConfigMap: &corev1.ConfigMapProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
			}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{
				Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"},
			}}}},
		}}},
	}}
}

// buildLoRAAgentContainer is the sidecar that loads and unloads the pod's
// adapters through vLLM's runtime API on localhost. It depends on the
// endpoint's name only, so the adapter list never changes the pod template.
func buildLoRAAgentContainer(ep *v1alpha1.LLMEndpoint, opts Options) corev1.Container {
	return corev1.Container{
		Name:    loraAgentContainer,
		Image:   loraAgentImage(ep, opts),
		Command: []string{loraAgentBinary},
		Args: []string{
			"--config-dir=" + loraAgentConfigDir,
			"--configmap=" + ep.Namespace + "/" + routingConfigMapName(ep),
			"--vllm-url=http://127.0.0.1:" + strconv.Itoa(vllmPort),
			// No --download-dir: the agent finds the adapter volume at its
			// default path, and an older recorded agent image, which
			// knows no such flag, still starts.
		},
		Env: loraAgentEnv(ep),
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("10m"),
			corev1.ResourceMemory: resource.MustParse("32Mi"),
		}},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "routing", MountPath: loraAgentConfigDir, ReadOnly: true},
			{Name: "lora-agent-token", MountPath: serviceAccountDir, ReadOnly: true},
			loraDownloadsMount(false),
		},
		SecurityContext:          readOnlyRootSecurityContext(),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

// loraAgentEnv names the agent's pod for its report and hands it vLLM's
// API key, if vLLM has one: vLLM refuses the agent's /v1 calls without it.
func loraAgentEnv(ep *v1alpha1.LLMEndpoint) []corev1.EnvVar {
	env := []corev1.EnvVar{fieldEnv("POD_NAME", "metadata.name"), fieldEnv("POD_NAMESPACE", "metadata.namespace")}
	if key := vllmAPIKeyEnv(ep); key != nil {
		env = append(env, *key)
	}
	return env
}

// vllmAPIKeyEnv is vLLM's API key as the agent's VLLM_API_KEY (the router
// gets it under its own name, see routerUpstreamKeyEnv), taken from
// where vLLM takes it: --api-key in spec.model.args (which wins in vLLM),
// else the VLLM_API_KEY of spec.model.env, copied whole so that a Secret
// reference stays a reference. vLLM accepts several keys after --api-key;
// the first serves. Nil when vLLM runs without a key.
func vllmAPIKeyEnv(ep *v1alpha1.LLMEndpoint) *corev1.EnvVar {
	const name = "VLLM_API_KEY"
	if value, ok := vllmFlagValue(ep.Spec.Model.Args, "--api-key"); ok && value != "" {
		return &corev1.EnvVar{Name: name, Value: value}
	}
	for _, e := range ep.Spec.Model.Env {
		if e.Name == name {
			return e.DeepCopy()
		}
	}
	return nil
}

// reconcileLoRAAgentRBAC applies the agent's ServiceAccount, Role and
// RoleBinding when LoRA is enabled (before the Deployment whose pods use
// them).
func (r *LLMEndpointReconciler) reconcileLoRAAgentRBAC(ctx context.Context, ep *v1alpha1.LLMEndpoint) error {
	if !loraEnabled(ep) {
		return nil
	}
	return r.applyInOrder(ctx, ep,
		buildLoRAAgentServiceAccount(ep),
		buildLoRAAgentRole(ep),
		buildLoRAAgentRoleBinding(ep),
	)
}

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
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

const (
	// vllmPort is the port of vLLM's OpenAI-compatible server.
	vllmPort = 8000
	// resourceGPU is the extended resource of NVIDIA's device plugin.
	resourceGPU corev1.ResourceName = "nvidia.com/gpu"

	cacheMountPath = "/cache"

	// startupSeconds bounds model download and loading before the startup
	// probe gives up and the kubelet restarts the container.
	startupSeconds       = 1800
	startupProbeInterval = 10

	// annotationPodDeletionCost ranks pods for a ReplicaSet's scale-in:
	// the lowest cost goes first.
	annotationPodDeletionCost = "controller.kubernetes.io/pod-deletion-cost"
	// maxDeletionCostStep caps the cost at about 17 hours of readiness
	// (2^10 - 1 minutes); older caches are all considered equally warm.
	maxDeletionCostStep = 10
)

// loraEnabled is whether vLLM runs with LoRA and runtime adapter loading.
// It depends on maxLoras as well as the adapter list, so that a user who
// sets maxLoras can add the first adapter without restarting instances.
func loraEnabled(ep *v1alpha1.LLMEndpoint) bool {
	return len(ep.Spec.LoRAAdapters) > 0 || ep.Spec.Model.MaxLoras != nil
}

// modelVolume is the volume of the model's claim, mounted read-only at
// v1alpha1.ModelMountPath.
const modelVolume = "model"

// weightsVolumes are the model's and the adapters' claims as volumes, each
// claim once, and the vLLM container's mounts of them: the model's claim at
// v1alpha1.ModelMountPath, every claim an adapter names at
// v1alpha1.AdapterClaimMountPath (a claim both use is one volume mounted
// twice). Adding an adapter on a claim not mounted yet changes the pod
// template, so it restarts the instances; adapters from Hugging Face or on
// mounted claims do not. URIs that do not parse (the webhook refuses them)
// are skipped here and fail to load, which status reports.
func weightsVolumes(ep *v1alpha1.LLMEndpoint) ([]corev1.Volume, []corev1.VolumeMount) {
	var volumes []corev1.Volume
	var mounts []corev1.VolumeMount
	byClaim := map[string]string{} // claim → volume name
	volumeFor := func(claim, name string) string {
		if v, ok := byClaim[claim]; ok {
			return v
		}
		byClaim[claim] = name
		volumes = append(volumes, corev1.Volume{
			Name: name,
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{
				ClaimName: claim,
				ReadOnly:  true,
			}},
		})
		return name
	}
	if src, err := v1alpha1.ParseWeightsURI(ep.Spec.Model.URI); err == nil && src.OnClaim() {
		mounts = append(mounts, corev1.VolumeMount{Name: volumeFor(src.Claim, modelVolume), MountPath: v1alpha1.ModelMountPath, ReadOnly: true})
	}
	var claims []string
	for _, a := range ep.Spec.LoRAAdapters {
		if src, err := v1alpha1.ParseWeightsURI(a.URI); err == nil && src.OnClaim() && !slices.Contains(claims, src.Claim) {
			claims = append(claims, src.Claim)
		}
	}
	// Sorted, so the order of spec.loraAdapters never changes the template.
	slices.Sort(claims)
	for _, c := range claims {
		mounts = append(mounts, corev1.VolumeMount{Name: volumeFor(c, adapterVolumeName(c)), MountPath: v1alpha1.AdapterClaimMountPath(c), ReadOnly: true})
	}
	return volumes, mounts
}

// adapterVolumeName names an adapter claim's volume: claim names may be
// longer than a volume name may be, so it is a hash.
func adapterVolumeName(claim string) string {
	sum := sha256.Sum256([]byte(claim))
	return "lora-" + hex.EncodeToString(sum[:6])
}

// vllmArgs are the arguments of `vllm serve`: the model, the user's flags,
// then the flags the operator owns. vLLM's parser lets the last of a
// repeated flag win, so the operator's come last (the API refuses user args
// that set them anyway).
func vllmArgs(ep *v1alpha1.LLMEndpoint) []string {
	m := ep.Spec.Model
	model := m.URI
	if src, err := v1alpha1.ParseWeightsURI(m.URI); err == nil {
		model = src.LoadPath(v1alpha1.ModelMountPath)
	}
	args := append([]string{model}, m.Args...)
	args = append(args,
		"--host=0.0.0.0",
		"--port="+strconv.Itoa(vllmPort),
		"--served-model-name="+m.Name,
		// Prefix-aware routing is pointless without it; it is never off.
		"--enable-prefix-caching",
		// Tenants share the cache and are kept apart by their salts in
		// the block hashes, so the hash must be collision-resistant; the
		// operator's flag comes last and so wins over any user spelling.
		"--prefix-caching-hash-algo="+v1alpha1.PrefixCachingHashAlgo(m.Args),
		"--tensor-parallel-size="+strconv.Itoa(int(v1alpha1.TensorParallelSize(ep))),
		// Without it vLLM aborts every running request on SIGTERM.
		"--shutdown-timeout="+strconv.FormatInt(v1alpha1.ShutdownTimeoutSeconds(ep), 10),
	)
	if m.MaxModelLen != nil {
		args = append(args, "--max-model-len="+strconv.Itoa(int(*m.MaxModelLen)))
	}
	if loraEnabled(ep) {
		args = append(args, "--enable-lora")
		if m.MaxLoras != nil {
			args = append(args, "--max-loras="+strconv.Itoa(int(*m.MaxLoras)))
		}
		if m.MaxLoraRank != nil {
			args = append(args, "--max-lora-rank="+strconv.Itoa(int(*m.MaxLoraRank)))
		}
	}
	return args
}

// vllmEnv is the operator's environment for vLLM, with the user's entries
// replacing those of the same name and the rest appended.
func vllmEnv(ep *v1alpha1.LLMEndpoint) []corev1.EnvVar {
	env := []corev1.EnvVar{
		// Any UID can write the caches: the image's HOME may belong to root.
		{Name: "HOME", Value: cacheMountPath},
		// Torch names its compile cache after getpass.getuser(), which
		// fails for a UID without a passwd entry (OpenShift's, or any but
		// the image's own) unless USER is set.
		{Name: "USER", Value: "vllm"},
		{Name: "XDG_CACHE_HOME", Value: cacheMountPath},
		{Name: "HF_HOME", Value: hfHome},
		{Name: "VLLM_CACHE_ROOT", Value: cacheMountPath + "/vllm"},
		{Name: "VLLM_NO_USAGE_STATS", Value: "1"},
	}
	if loraEnabled(ep) {
		env = append(env, corev1.EnvVar{Name: "VLLM_ALLOW_RUNTIME_LORA_UPDATING", Value: "True"})
	}
	if ref := ep.Spec.Model.HFTokenSecretRef; ref != nil {
		key := ref.Key
		if key == "" {
			key = "token"
		}
		env = append(env, corev1.EnvVar{Name: "HF_TOKEN", ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: ref.Name},
				Key:                  key,
			},
		}})
	}
	index := make(map[string]int, len(env))
	for i, e := range env {
		index[e.Name] = i
	}
	for _, e := range ep.Spec.Model.Env {
		if i, ok := index[e.Name]; ok {
			env[i] = *e.DeepCopy()
			continue
		}
		env = append(env, *e.DeepCopy())
	}
	return env
}

// vllmResources are the user's resources with the GPU count from gpus.
func vllmResources(ep *v1alpha1.LLMEndpoint) corev1.ResourceRequirements {
	var res corev1.ResourceRequirements
	if ep.Spec.Model.Resources != nil {
		res = *ep.Spec.Model.Resources.DeepCopy()
	}
	delete(res.Limits, resourceGPU)
	delete(res.Requests, resourceGPU)
	if n := v1alpha1.GPUs(ep); n > 0 {
		q := *resource.NewQuantity(int64(n), resource.DecimalSI)
		if res.Limits == nil {
			res.Limits = corev1.ResourceList{}
		}
		if res.Requests == nil {
			res.Requests = corev1.ResourceList{}
		}
		res.Limits[resourceGPU] = q
		res.Requests[resourceGPU] = q
	}
	if len(res.Limits) == 0 {
		res.Limits = nil
	}
	if len(res.Requests) == 0 {
		res.Requests = nil
	}
	return res
}

// restrictedContainerSecurityContext is the container half of the
// restricted pod security standard.
func restrictedContainerSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		RunAsNonRoot:             ptr.To(true),
	}
}

// readOnlyRootSecurityContext is restrictedContainerSecurityContext with a
// read-only root filesystem, for the operator's own binaries (the router
// and the LoRA agent), which write nothing to disk.
func readOnlyRootSecurityContext() *corev1.SecurityContext {
	sc := restrictedContainerSecurityContext()
	sc.ReadOnlyRootFilesystem = ptr.To(true)
	return sc
}

// restrictedPodSecurityContext is the pod half of the restricted pod
// security standard; runAsUser may be nil (the image's user).
func restrictedPodSecurityContext(runAsUser *int64) *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      runAsUser,
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// newDeployment is the Deployment of an endpoint's pods of one role, named
// and labelled like the role's other objects, selecting by selectorLabels.
// It adds to pod what every pod of the operator has: no service links (an
// endpoint's namespace may hold many Services) and a spread over nodes.
func newDeployment(ep *v1alpha1.LLMEndpoint, name, role, app string, replicas int32, pod corev1.PodSpec) *appsv1.Deployment {
	pod.EnableServiceLinks = ptr.To(false)
	pod.TopologySpreadConstraints = spreadOverNodes(ep, role)
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: objectMeta(ep, name, role, app),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: selectorLabels(ep, role)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: objectLabels(ep, role, app)},
				Spec:       pod,
			},
		},
	}
}

// spreadOverNodes spreads an endpoint's pods of one role over nodes, and
// then over zones, so that losing a node or a zone loses as few instances
// (or routers) as possible. Both are preferences: a cluster of one node or
// zone still schedules everything.
func spreadOverNodes(ep *v1alpha1.LLMEndpoint, role string) []corev1.TopologySpreadConstraint {
	var out []corev1.TopologySpreadConstraint
	for _, key := range []string{corev1.LabelHostname, corev1.LabelTopologyZone} {
		out = append(out, corev1.TopologySpreadConstraint{
			MaxSkew:           1,
			TopologyKey:       key,
			WhenUnsatisfiable: corev1.ScheduleAnyway,
			LabelSelector:     &metav1.LabelSelector{MatchLabels: selectorLabels(ep, role)},
			MatchLabelKeys:    []string{appsv1.DefaultDeploymentUniqueLabelKey},
		})
	}
	return out
}

func httpProbe(path, port string, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: path, Port: intstr.FromString(port),
		}},
		PeriodSeconds:    period,
		TimeoutSeconds:   3,
		FailureThreshold: failures,
	}
}

// buildVLLMDeployment is the Deployment of the endpoint's vLLM instances.
func buildVLLMDeployment(ep *v1alpha1.LLMEndpoint, opts Options) *appsv1.Deployment {
	m := ep.Spec.Model

	volumes := []corev1.Volume{
		// vLLM's workers share tensors through /dev/shm, which the
		// container runtime limits to 64Mi by default.
		{Name: "dshm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
		{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	mounts := []corev1.VolumeMount{
		{Name: "dshm", MountPath: "/dev/shm"},
		{Name: "cache", MountPath: cacheMountPath},
	}
	cache, cacheMounts := modelCacheVolumes(ep)
	volumes = append(volumes, cache...)
	mounts = append(mounts, cacheMounts...)
	weights, weightMounts := weightsVolumes(ep)
	volumes = append(volumes, weights...)
	mounts = append(mounts, weightMounts...)

	container := corev1.Container{
		Name:    "vllm",
		Image:   vllmImage(ep, opts),
		Command: []string{"vllm", "serve"},
		Args:    vllmArgs(ep),
		Env:     vllmEnv(ep),
		Ports: []corev1.ContainerPort{{
			Name: "http", ContainerPort: vllmPort, Protocol: corev1.ProtocolTCP,
		}},
		Resources:    vllmResources(ep),
		VolumeMounts: mounts,
		StartupProbe: httpProbe("/health", "http", startupProbeInterval, startupSeconds/startupProbeInterval),
		// Readiness decides routing: an instance that stops answering
		// leaves the routing configuration after two failures.
		ReadinessProbe: httpProbe("/health", "http", 5, 2),
		LivenessProbe:  httpProbe("/health", "http", 15, 4),
		Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
			Sleep: &corev1.SleepAction{Seconds: v1alpha1.PreStopSleepSeconds},
		}},
		SecurityContext:          restrictedContainerSecurityContext(),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}

	containers := []corev1.Container{container}
	var serviceAccount string
	if loraEnabled(ep) {
		containers[0].VolumeMounts = append(containers[0].VolumeMounts, loraDownloadsMount(true))
		containers = append(containers, buildLoRAAgentContainer(ep, opts))
		volumes = append(volumes, loraAgentVolumes(ep)...)
		serviceAccount = loraAgentName(ep)
	}

	d := newDeployment(ep, vllmName(ep), roleVLLM, "vllm", v1alpha1.Replicas(ep), corev1.PodSpec{
		Containers:         containers,
		Volumes:            volumes,
		ServiceAccountName: serviceAccount,
		// The API server copies serviceAccountName into this deprecated
		// field and back when one is empty: owning both is what lets the
		// apply that turns LoRA off clear them, rather than leave the pods
		// naming the agent's pruned ServiceAccount.
		DeprecatedServiceAccount: serviceAccount,
		// A leaving instance finishes the requests it has: preStop covers
		// the routers' reload, vLLM's --shutdown-timeout the longest
		// generation.
		TerminationGracePeriodSeconds: ptr.To(v1alpha1.TerminationGracePeriodSeconds(ep)),
		AutomountServiceAccountToken:  ptr.To(false),
		SecurityContext:               vllmPodSecurityContext(opts),
		NodeSelector:                  m.NodeSelector,
		Tolerations:                   m.Tolerations,
	})
	// Each instance holds whole GPUs: a surge instance needs a spare one,
	// and without it the rollout waits on a Pending pod forever.
	d.Spec.Strategy = appsv1.DeploymentStrategy{
		Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{
			MaxSurge:       ptr.To(v1alpha1.MaxSurge(ep)),
			MaxUnavailable: ptr.To(v1alpha1.MaxUnavailable(ep)),
		},
	}
	return d
}

// buildVLLMService is the headless Service of the vLLM instances: stable
// DNS names for debugging and for tools that address one instance.
func buildVLLMService(ep *v1alpha1.LLMEndpoint) *corev1.Service {
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: objectMeta(ep, vllmName(ep), roleVLLM, "vllm"),
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  selectorLabels(ep, roleVLLM),
			Ports: []corev1.ServicePort{{
				Name: "http", Port: vllmPort, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP,
			}},
		},
	}
}

// reconcileVLLM applies the vLLM Deployment and its headless Service.
func (r *LLMEndpointReconciler) reconcileVLLM(ctx context.Context, ep *v1alpha1.LLMEndpoint) error {
	desired := buildVLLMDeployment(ep, r.Options)
	prev, _, err := r.apply(ctx, ep, desired)
	if err != nil {
		return err
	}
	if prev, ok := prev.(*appsv1.Deployment); ok && prev.Spec.Replicas != nil && *prev.Spec.Replicas != *desired.Spec.Replicas {
		r.Recorder.Eventf(ep, prev, corev1.EventTypeNormal, "Scaled", "Scale",
			"vLLM instances %d → %d", *prev.Spec.Replicas, *desired.Spec.Replicas)
	}
	if _, _, err := r.apply(ctx, ep, buildVLLMService(ep)); err != nil {
		return err
	}
	return nil
}

// podDeletionCost is what losing a ready instance costs in cached traffic,
// as a pod-deletion-cost, so that a scale-in removes the instance whose
// loss costs the fewest cache hits.
//
// When the endpoint's heat is known (the hit tokens each pod served
// recently, from vLLM's own prefix-cache counters: see
// internal/custommetrics.Heat), the cost is 1 + log2(1 + hit tokens): an
// instance that served twice the hits costs one step more, so the
// annotation changes when a pod's hits double or halve rather than on
// every scrape, and any instance with hits outranks one without. A ready
// pod without a figure yet (scraped once, or not at all) is new and
// cold: 0.
//
// Without heat (the operator's metrics scraper is off, or has not read the
// endpoint twice yet), the cache is assumed to grow warmer the longer an
// instance serves: log2 of the minutes since it became ready (capped), and
// next is when the cost next rises (0: never).
//
// Instances that are not ready cost 0, and the ReplicaSet removes them
// first anyway.
func podDeletionCost(pod *corev1.Pod, now time.Time, heat map[string]float64) (cost int32, next time.Duration) {
	since, ready := readySince(pod)
	if !ready {
		return 0, 0
	}
	if heat != nil {
		hits, ok := heat[pod.Name]
		if !ok {
			return 0, 0
		}
		return 1 + int32(math.Floor(math.Log2(1+max(hits, 0)))), 0
	}
	minutes := max(now.Sub(since).Minutes(), 0)
	step := min(int(math.Floor(math.Log2(minutes+1))), maxDeletionCostStep)
	if step == maxDeletionCostStep {
		return int32(step), 0
	}
	nextAt := since.Add(time.Duration((1<<(step+1))-1) * time.Minute)
	return int32(step), nextAt.Sub(now)
}

// readySince is when the pod last became Ready, if it is.
func readySince(pod *corev1.Pod) (time.Time, bool) {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.LastTransitionTime.Time, c.Status == corev1.ConditionTrue
		}
	}
	return time.Time{}, false
}

// heatRefresh is how often deletion costs by heat are recomputed: a few
// scrapes (10 s apart by default), well inside heat's 5-minute half-life.
const heatRefresh = time.Minute

// reconcileDeletionCosts annotates each ready, non-terminating instance with
// its deletion cost, so that a scale-in removes the instance whose cache is
// coldest. It returns when the next cost changes.
func (r *LLMEndpointReconciler) reconcileDeletionCosts(ctx context.Context, ep *v1alpha1.LLMEndpoint, pods []corev1.Pod, now time.Time) (time.Duration, error) {
	var heat map[string]float64
	var next time.Duration
	if r.Heat != nil {
		if pods, ok := r.Heat.PodHitTokens(client.ObjectKeyFromObject(ep)); ok {
			heat, next = pods, heatRefresh
		}
	}
	var errs []error
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil {
			continue
		}
		cost, after := podDeletionCost(pod, now, heat)
		if after > 0 && (next == 0 || after < next) {
			next = after
		}
		want := strconv.Itoa(int(cost))
		got, ok := pod.Annotations[annotationPodDeletionCost]
		if got == want || (!ok && cost == 0) {
			continue
		}
		// A merge patch, not an apply: the pod belongs to its ReplicaSet,
		// and a pod deleted meanwhile must not be re-created.
		annotated := pod.DeepCopy()
		metav1.SetMetaDataAnnotation(&annotated.ObjectMeta, annotationPodDeletionCost, want)
		if err := r.Patch(ctx, annotated, client.MergeFrom(pod), client.FieldOwner(FieldOwner)); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("annotate pod %s: %w", pod.Name, err))
		}
	}
	return next, errors.Join(errs...)
}

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

package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The bounds and defaults below repeat constants of the routing document
// (api/routing/v1alpha1) because kubebuilder markers must be literals;
// TestCRDBoundsMatchRoutingDocument keeps the generated CRD and those
// constants in step.

// LLMEndpoint is one model served by a fleet of vLLM instances (prefix
// caching always on) behind a prefix-aware router. The operator creates the
// vLLM Deployment, the router Deployment, the Services and the routing
// ConfigMap, and keeps them true to the spec.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=llme,categories=warmroute
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`,description="vLLM instances that are ready and receive traffic"
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`,description="Desired vLLM instances"
// +kubebuilder:printcolumn:name="Strategy",type=string,JSONPath=`.spec.routing.strategy`,description="Routing strategy"
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`,description="In-cluster URL clients call"
// +kubebuilder:printcolumn:name="Load",type=string,JSONPath=`.status.load.inFlightPerInstance`,description="Requests in flight per ready instance"
// +kubebuilder:printcolumn:name="Hit%",type=integer,JSONPath=`.status.load.prefixCacheHitPercent`,description="Prefix-cache hit rate over the last minute, percent"
// +kubebuilder:printcolumn:name="Available",type=string,JSONPath=`.status.conditions[?(@.type=="Available")].status`,priority=1
// +kubebuilder:printcolumn:name="MaxQueued",type=integer,JSONPath=`.spec.router.flowControl.maxQueued`,description="Requests queued over all tenants at most when the fleet is full (spec.router.flowControl); empty: flow control off",priority=1
// +kubebuilder:printcolumn:name="Shed/min",type=string,JSONPath=`.status.load.shedPerMinute`,description="Requests flow control shed per minute over the last 5 minutes (status.load.shedTenants names the tenants); empty: flow control off",priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 55",message="metadata.name must be at most 55 characters: it prefixes the names of the objects the operator creates"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter): it names the endpoint's Service"
// +kubebuilder:validation:XValidation:rule="!self.metadata.name.endsWith('-vllm')",message="metadata.name must not end in '-vllm': that suffix names the instances' headless Service"
type LLMEndpoint struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired endpoint.
	// +required
	Spec LLMEndpointSpec `json:"spec"`

	// status is what the operator observed, rebuilt from the cluster on every
	// reconcile.
	// +optional
	Status LLMEndpointStatus `json:"status,omitempty"`
}

// LLMEndpointSpec is the desired state of an LLMEndpoint.
//
// +kubebuilder:validation:XValidation:rule="!has(self.loraAdapters) || self.loraAdapters.all(a, a.name != self.model.name)",message="spec.loraAdapters[].name must differ from spec.model.name: clients select an adapter by sending its name as the model",fieldPath=".loraAdapters"
type LLMEndpointSpec struct {
	// replicas is the number of vLLM instances. Prefix-aware routing needs at
	// least two to matter; with one the endpoint reports Degraded. It is the
	// scale subresource's spec.replicas, so `kubectl scale` and a
	// HorizontalPodAutoscaler can drive it. Defaults to 2.
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=512
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// model is the base model every instance serves and how vLLM runs it.
	// +required
	Model ModelSpec `json:"model"`

	// rollout is how the instances are replaced when their pod template
	// changes: by default one at a time, with no surge instance (which
	// would need a spare GPU).
	// +optional
	Rollout RolloutSpec `json:"rollout,omitempty"`

	// scaling is how the endpoint scales by itself: to zero when idle, and
	// back on demand.
	// +optional
	Scaling ScalingSpec `json:"scaling,omitempty"`

	// routing is how the router spreads requests over the instances.
	// +kubebuilder:default={}
	// +optional
	Routing RoutingSpec `json:"routing,omitempty"`

	// loraAdapters are LoRA adapters served on top of the base model; clients
	// select one by sending its name as the model. Each is placed on
	// `replicas` instances and loaded there at runtime, so adding or removing
	// an adapter restarts no instance.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	// +optional
	LoRAAdapters []LoRAAdapter `json:"loraAdapters,omitempty"`

	// router is the prefix-aware router in front of the instances.
	// +kubebuilder:default={}
	// +optional
	Router RouterSpec `json:"router,omitempty"`

	// networkPolicy is the network boundary the operator draws around the
	// endpoint's pods with NetworkPolicies. It needs a network plugin that
	// enforces NetworkPolicy; without one the objects exist and do nothing.
	// +kubebuilder:default={}
	// +optional
	NetworkPolicy NetworkPolicySpec `json:"networkPolicy,omitempty"`
}

// NetworkPolicySpec configures the endpoint's NetworkPolicies: one lets
// only this endpoint's routers (and monitoringFrom) reach the vLLM
// instances, so no pod bypasses the router or loads and unloads adapters;
// the other limits who reaches the routers. Both restrict ingress only.
type NetworkPolicySpec struct {
	// enabled creates the NetworkPolicies; false removes them. Defaults to
	// true.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// monitoringFrom are the peers (typically Prometheus: a namespaceSelector
	// and a podSelector) allowed to scrape metrics: vLLM's port, where vLLM
	// serves /metrics beside its API (a NetworkPolicy cannot tell paths
	// apart, so these peers can reach the API too), and the routers'
	// metrics port. Empty: nothing outside the endpoint scrapes them.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(p, has(p.podSelector) || has(p.namespaceSelector) || has(p.ipBlock))",message="spec.networkPolicy.monitoringFrom[] entries must set podSelector, namespaceSelector or ipBlock"
	// +listType=atomic
	// +optional
	MonitoringFrom []networkingv1.NetworkPolicyPeer `json:"monitoringFrom,omitempty"`

	// routerFrom are the peers allowed to reach the routers' client port.
	// Empty: any source, as a Service of type LoadBalancer or NodePort
	// needs; list your clients' namespaces or pods to narrow it.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(p, has(p.podSelector) || has(p.namespaceSelector) || has(p.ipBlock))",message="spec.networkPolicy.routerFrom[] entries must set podSelector, namespaceSelector or ipBlock"
	// +listType=atomic
	// +optional
	RouterFrom []networkingv1.NetworkPolicyPeer `json:"routerFrom,omitempty"`
}

// ModelSpec describes the base model and the vLLM server that serves it.
//
// +kubebuilder:validation:XValidation:rule="!has(self.tensorParallelSize) || self.tensorParallelSize <= (has(self.gpus) ? self.gpus : 1)",message="spec.model.tensorParallelSize must not exceed spec.model.gpus: each tensor-parallel rank needs its own GPU",fieldPath=".tensorParallelSize"
// +kubebuilder:validation:XValidation:rule="!has(self.maxLoraRank) || has(self.maxLoras)",message="spec.model.maxLoraRank needs spec.model.maxLoras (which enables LoRA)",fieldPath=".maxLoraRank"
type ModelSpec struct {
	// name is the served model name: what clients send as "model".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][-A-Za-z0-9_.:/]*$`
	// +required
	Name string `json:"name"`

	// uri is where the weights come from: a Hugging Face repository id
	// ("org/model", optionally "hf://org/model"), "pvc://claim/path" for a
	// PersistentVolumeClaim in the endpoint's namespace (mounted read-only),
	// or an absolute path inside the image.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/') || self.matches('^pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?(/.*)?$') || self.matches('^(hf://)?[A-Za-z0-9][-A-Za-z0-9_.]*(/[A-Za-z0-9][-A-Za-z0-9_.]*)?$')",message="spec.model.uri must be a Hugging Face id (org/model or hf://org/model), pvc://claim/path, or an absolute path in the image"
	// +required
	URI string `json:"uri"`

	// image is the vLLM server image. Defaults to the operator's pinned vLLM
	// image (flag --vllm-image).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// gpus is the number of GPUs per instance (the nvidia.com/gpu limit).
	// 0 runs on CPU. Defaults to 1.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=16
	// +optional
	GPUs *int32 `json:"gpus,omitempty"`

	// tensorParallelSize is vLLM's --tensor-parallel-size. Defaults to gpus
	// (1 on CPU).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	// +optional
	TensorParallelSize *int32 `json:"tensorParallelSize,omitempty"`

	// maxModelLen is vLLM's --max-model-len, the context length in tokens.
	// Defaults to the model's own.
	// +kubebuilder:validation:Minimum=128
	// +kubebuilder:validation:Maximum=10485760
	// +optional
	MaxModelLen *int32 `json:"maxModelLen,omitempty"`

	// maxLoras is vLLM's --max-loras, how many LoRA adapters an instance
	// keeps in GPU memory at once. Setting it enables LoRA with runtime
	// adapter loading even before spec.loraAdapters lists any, so that the
	// first adapter restarts no instance; set it on any endpoint that may
	// get adapters later. The cost: vLLM reserves GPU memory for maxLoras
	// adapters of maxLoraRank (less KV cache, so fewer concurrent requests)
	// and runs its LoRA kernels on every batch, even with no adapter loaded.
	// When unset, LoRA is enabled only while adapters are listed, so the
	// first adapter added and the last removed restart every instance.
	// Adding an adapter on a claim no other adapter uses also restarts them
	// (the pods mount the new claim); adapters from Hugging Face or on a
	// mounted claim never do.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=256
	// +optional
	MaxLoras *int32 `json:"maxLoras,omitempty"`

	// maxLoraRank is vLLM's --max-lora-rank, the highest adapter rank the
	// instances accept.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=512
	// +optional
	MaxLoraRank *int32 `json:"maxLoraRank,omitempty"`

	// args are extra vLLM flags. The operator's own flags come after them
	// (vLLM's parser lets the last of a repeated flag win), and args that
	// set an option the operator owns are refused, in either spelling
	// (--max_model_len is --max-model-len): --host, --port, --model,
	// --served-model-name, --tensor-parallel-size, --max-model-len, prefix
	// caching, the LoRA switches (--enable-lora, --max-loras,
	// --max-lora-rank), --shutdown-timeout, and --config (a file could set
	// any of them).
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.all(a, !a.matches('^(--(host|port|model|served[-_]model[-_]name|tensor[-_]parallel[-_]size|max[-_]model[-_]len|max[-_]loras|max[-_]lora[-_]rank|shutdown[-_]timeout|config)|-tp)(=.*)?$'))",message="spec.model.args must not set --host, --port, --model, --served-model-name, --tensor-parallel-size, --max-model-len, --max-loras, --max-lora-rank, --shutdown-timeout or --config: the operator sets them from spec.model (name, uri, tensorParallelSize, maxModelLen, maxLoras, maxLoraRank, terminationGracePeriodSeconds)"
	// +kubebuilder:validation:XValidation:rule="self.all(a, !a.matches('^--(no[-_])?enable[-_](prefix[-_]caching|lora)(=.*)?$'))",message="spec.model.args must not switch prefix caching or LoRA: warmroute always enables prefix caching, and enables LoRA from spec.model.maxLoras or spec.loraAdapters"
	// +listType=atomic
	// +optional
	Args []string `json:"args,omitempty"`

	// env are extra environment variables for the vLLM container; one with
	// the name of a variable the operator sets replaces it.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`

	// resources are the vLLM container's CPU and memory requests and limits.
	// The nvidia.com/gpu limit comes from gpus and overrides any set here.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// cache is a persistent model cache shared by the instances; without it
	// every instance downloads the weights into an emptyDir each time it
	// starts.
	// +optional
	Cache *ModelCacheSpec `json:"cache,omitempty"`

	// hfTokenSecretRef names a Secret key holding a Hugging Face token, given
	// to vLLM as HF_TOKEN to download gated models.
	// +optional
	HFTokenSecretRef *SecretKeyRef `json:"hfTokenSecretRef,omitempty"`

	// nodeSelector constrains the instances to nodes with these labels.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// tolerations let the instances run on tainted (typically GPU) nodes.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// terminationGracePeriodSeconds is how long a leaving instance has to
	// finish the requests it runs. It leaves the routing configuration as
	// soon as it is terminating, keeps serving through a 15 s preStop sleep
	// while the routers drop it, and is then told to stop: vLLM's
	// --shutdown-timeout, which the operator sets to this minus 20 s (the
	// preStop and 5 s for vLLM to exit), is how long it waits for running
	// generations before aborting them. Set it above your longest
	// generation plus 20 s. At least 30 (a 10 s drain); defaults to 180.
	// +kubebuilder:validation:Minimum=30
	// +kubebuilder:validation:Maximum=3600
	// +optional
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds,omitempty"`
}

// SecretKeyRef selects a key of a Secret in the LLMEndpoint's namespace.
type SecretKeyRef struct {
	// name is the Secret's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`

	// key is the key within the Secret. Defaults to "token".
	// +kubebuilder:default=token
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Key string `json:"key,omitempty"`
}

// RoutingStrategy is how the router picks an instance for a request. The
// names follow Amazon SageMaker's RoutingStrategy.
// +kubebuilder:validation:Enum=RANDOM;LEAST_OUTSTANDING_REQUESTS;PREFIX_AWARE
type RoutingStrategy string

const (
	// RoutingStrategyRandom sends each request to a uniformly random instance.
	RoutingStrategyRandom RoutingStrategy = "RANDOM"
	// RoutingStrategyLeastOutstandingRequests sends each request to the
	// instance with the fewest requests in flight.
	RoutingStrategyLeastOutstandingRequests RoutingStrategy = "LEAST_OUTSTANDING_REQUESTS"
	// RoutingStrategyPrefixAware sends requests that share a prompt prefix to
	// the same instance, where vLLM's prefix cache already holds it.
	RoutingStrategyPrefixAware RoutingStrategy = "PREFIX_AWARE"
)

// RoutingSpec configures the router.
type RoutingSpec struct {
	// strategy is RANDOM, LEAST_OUTSTANDING_REQUESTS or PREFIX_AWARE.
	// Defaults to PREFIX_AWARE.
	// +kubebuilder:default=PREFIX_AWARE
	// +optional
	Strategy RoutingStrategy `json:"strategy,omitempty"`

	// prefixAware tunes the PREFIX_AWARE strategy and the overload guard.
	// +kubebuilder:default={}
	// +optional
	PrefixAware PrefixAwareSpec `json:"prefixAware,omitempty"`
}

// PrefixAwareSpec tunes prefix-aware routing.
type PrefixAwareSpec struct {
	// prefixLength is how much of a request forms its routing key: bytes of
	// the raw body, or characters of message text on the OpenAI API. Longer
	// keys separate requests that share a short prefix; shorter keys group
	// more requests. 1024 to 65536, defaults to 4096.
	// +kubebuilder:default=4096
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=65536
	// +optional
	PrefixLength *int32 `json:"prefixLength,omitempty"`

	// concurrencyThreshold is the most requests in flight the preferred
	// instance may have before a request overflows to the next instance in
	// its order. 1 to 1024; when unset, 10 per GPU of an instance
	// (spec.model.gpus), or 4 for instances without GPUs.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	// +optional
	ConcurrencyThreshold *int32 `json:"concurrencyThreshold,omitempty"`
}

// LoRAAdapter is a LoRA adapter served on a subset of the instances.
//
// +kubebuilder:validation:XValidation:rule="!has(self.s3) || self.uri.startsWith('s3://')",message="spec.loraAdapters[].s3 applies only to an s3:// uri",fieldPath=".s3"
type LoRAAdapter struct {
	// name is what clients send as "model" to use the adapter.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][-A-Za-z0-9_.:/]*$`
	// +required
	Name string `json:"name"`

	// uri is where the adapter's weights come from: a Hugging Face id,
	// pvc://claim/path, s3://bucket/prefix (downloaded by the LoRA agent
	// into the pod; see s3), or an absolute path inside the image. A
	// claim no other adapter or the model uses changes the pods' volumes
	// and so restarts every instance; the other sources never do.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/') || self.matches('^pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?(/.*)?$') || self.matches('^s3://[a-z0-9][-a-z0-9.]{1,61}[a-z0-9](/.*)?$') || self.matches('^(hf://)?[A-Za-z0-9][-A-Za-z0-9_.]*(/[A-Za-z0-9][-A-Za-z0-9_.]*)?$')",message="spec.loraAdapters[].uri must be a Hugging Face id (org/adapter or hf://org/adapter), pvc://claim/path, s3://bucket/prefix, or an absolute path in the image"
	// +required
	URI string `json:"uri"`

	// s3 is how to reach the bucket of an s3:// uri: the Secret holding
	// credentials and, for S3-compatible stores, the endpoint. Without it
	// the agent asks AWS S3 anonymously.
	// +optional
	S3 *S3Source `json:"s3,omitempty"`

	// replicas is how many instances should hold the adapter; it is capped
	// at the number of instances. Defaults to 1.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=512
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
}

// S3Source is how the LoRA agent reaches an S3 bucket. It reads the Secret
// through the API when it downloads, so adding an adapter, or a Secret,
// restarts no pod.
type S3Source struct {
	// endpoint is the URL of an S3-compatible store (MinIO, Ceph RGW, a
	// cloud's S3 API), e.g. https://minio.storage.svc:9000; objects are
	// addressed path-style there. Defaults to AWS S3 for the region.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^https?://[^/?#]+/?$`
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// region is the bucket's region. Defaults to us-east-1 (which AWS S3
	// redirects from).
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Region string `json:"region,omitempty"`

	// credentialsSecret names a Secret in the endpoint's namespace with
	// the keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and, for
	// temporary credentials, AWS_SESSION_TOKEN). The LoRA agent reads it
	// as the ServiceAccount <endpoint>-lora-agent, which its owner grants
	// get on it: the operator reads no Secret, so it can grant none.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +optional
	CredentialsSecret string `json:"credentialsSecret,omitempty"`
}

// RouterSpec configures the router Deployment and the client-facing Service.
//
// +kubebuilder:validation:XValidation:rule="!has(self.inferencePool) || (has(self.mode) && self.mode == 'InferencePool')",message="spec.router.inferencePool applies only to spec.router.mode InferencePool",fieldPath=".inferencePool"
// +kubebuilder:validation:XValidation:rule="!has(self.mode) || self.mode != 'InferencePool' || !has(self.serviceType) || self.serviceType == 'ClusterIP'",message="spec.router.serviceType must be ClusterIP with spec.router.mode InferencePool: the Gateway is the endpoint's front door, and the routers serve only the picker protocol to it",fieldPath=".serviceType"
// +kubebuilder:validation:XValidation:rule="!has(self.mode) || self.mode != 'InferencePool' || !has(self.auth) || !has(self.inferencePool) || !has(self.inferencePool.failureMode) || self.inferencePool.failureMode != 'FailOpen'",message="spec.router.inferencePool.failureMode must be FailClose with spec.router.auth: with FailOpen the Gateway sends requests past the picker, unauthenticated",fieldPath=".inferencePool.failureMode"
type RouterSpec struct {
	// mode is how clients reach the endpoint: Standalone (the default: the
	// routers are the front door, behind the endpoint's Service) or
	// InferencePool (a Gateway API Inference Extension Gateway is the front
	// door; the operator creates an InferencePool whose endpoint picker is
	// the routers, which then serve only the Endpoint Picker Protocol).
	// serviceType and port apply to Standalone only.
	// +kubebuilder:default=Standalone
	// +optional
	Mode RouterMode `json:"mode,omitempty"`

	// inferencePool configures the InferencePool of mode InferencePool.
	// +optional
	InferencePool *InferencePoolOptions `json:"inferencePool,omitempty"`

	// replicas is the number of router instances; they share the routing
	// configuration and agree on placement. The operator uses 2 when unset.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// image is the router image. Defaults to the operator's router image
	// (flag --router-image).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// resources are the router container's requests and limits. Defaults to
	// requests of 100m CPU and 128Mi memory and limits of 2 CPUs and 1Gi
	// memory. The router buffers request bodies up to half the memory limit
	// and sets GOMEMLIMIT to 90% of it; without a memory limit it buffers
	// up to 1 GiB.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// serviceType is the type of the client-facing Service: ClusterIP,
	// NodePort or LoadBalancer. Defaults to ClusterIP. Mode InferencePool
	// has no client-facing Service: it must be ClusterIP there.
	// +kubebuilder:default=ClusterIP
	// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
	// +optional
	ServiceType corev1.ServiceType `json:"serviceType,omitempty"`

	// port is the client-facing Service's port. Defaults to 80. Unused in
	// mode InferencePool.
	// +kubebuilder:default=80
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port *int32 `json:"port,omitempty"`

	// auth authenticates tenants (RouterAuth). Unset: tenant ids are
	// whatever clients claim.
	// +optional
	Auth *RouterAuth `json:"auth,omitempty"`

	// flowControl shares the endpoint between tenants when it is full
	// (FlowControl): weights, priorities, rate limits and a queue per
	// tenant. Unset: no queue and no limits.
	// +optional
	FlowControl *FlowControl `json:"flowControl,omitempty"`
}

// Condition types of an LLMEndpoint.
const (
	// ConditionAvailable is True when the router is up and at least one
	// instance is ready to serve.
	ConditionAvailable = "Available"
	// ConditionProgressing is True while instances or routers are being
	// created, rolled out or scaled.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when the endpoint serves below what its spec
	// asks for, or the operator cannot make it so.
	ConditionDegraded = "Degraded"
	// ConditionAdaptersReady is True when every LoRA adapter is loaded on
	// every instance placed to hold it; present only when adapters are
	// listed.
	ConditionAdaptersReady = "AdaptersReady"
	// ConditionLoRAAgentConfined is True, on an endpoint with LoRA, when the
	// ValidatingAdmissionPolicy of config/admission confines each LoRA agent
	// to its own pod's state annotation; False (AdmissionPolicyMissing)
	// when it or its binding is not installed.
	ConditionLoRAAgentConfined = "LoRAAgentConfined"
	// ConditionInferencePoolReady is True, in spec.router.mode
	// InferencePool, when the endpoint's InferencePool is applied; False
	// (InferencePoolCRDMissing) when the API server does not serve
	// inference.networking.k8s.io/v1 InferencePools. Absent in mode
	// Standalone.
	ConditionInferencePoolReady = "InferencePoolReady"
)

// Condition reasons of an LLMEndpoint.
const (
	ReasonInstancesReady    = "InstancesReady"
	ReasonNoReadyInstances  = "NoReadyInstances"
	ReasonRouterUnavailable = "RouterUnavailable"
	ReasonScaledToZero      = "ScaledToZero"
	// ReasonIdle: the operator set spec.replicas to 0 after
	// spec.scaling.scaleToZeroAfter without a request (an event).
	ReasonIdle = "Idle"
	// ReasonActivated: a request held at zero instances made the operator
	// set spec.replicas to 1 (an event; Progressing while it loads).
	ReasonActivated         = "Activated"
	ReasonRollingOut        = "RollingOut"
	ReasonScaling           = "Scaling"
	ReasonRolloutComplete   = "RolloutComplete"
	ReasonReconcileFailed   = "ReconcileFailed"
	ReasonSingleInstance    = "SingleInstance"
	ReasonInstancesUnready  = "InstancesUnready"
	ReasonAsExpected        = "AsExpected"
	ReasonAdaptersLoaded    = "AdaptersLoaded"
	ReasonAdaptersLoading   = "AdaptersLoading"
	ReasonAdapterLoadFailed = "AdapterLoadFailed"
	// Reasons of InferencePoolReady.
	ReasonInferencePoolApplied    = "InferencePoolApplied"
	ReasonInferencePoolCRDMissing = "InferencePoolCRDMissing"
	ReasonInferencePoolFailed     = "InferencePoolApplyFailed"
	// ReasonInsufficientAdapterCapacity: the ready instances cannot hold
	// every adapter once (more adapters than instances × adapters per
	// instance); the ones left out are listed in the message and marked
	// unplaced in status.adapters.
	ReasonInsufficientAdapterCapacity = "InsufficientAdapterCapacity"
)

// Reasons of the LoRAAgentConfined condition.
const (
	ReasonAdmissionPolicyInstalled = "AdmissionPolicyInstalled"
	ReasonAdmissionPolicyMissing   = "AdmissionPolicyMissing"
)

// LLMEndpointStatus is the observed state of an LLMEndpoint.
type LLMEndpointStatus struct {
	// conditions are Available, Progressing and Degraded.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the metadata.generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// replicas is the number of vLLM instances that exist and are not
	// terminating (the scale subresource's status.replicas).
	// +optional
	Replicas int32 `json:"replicas"`

	// readyReplicas is the number of instances in the routing configuration:
	// ready and not terminating.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`

	// selector is the label selector of the vLLM pods, in string form (the
	// scale subresource's status.selector, which a HorizontalPodAutoscaler
	// uses to find the pods' metrics).
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Selector string `json:"selector,omitempty"`

	// endpoint is the in-cluster URL clients call, e.g.
	// http://support-bot.default.svc (OpenAI-compatible API under /v1).
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// routingConfigHash is a hash of the routing document the routers are
	// given; it changes whenever the routing configuration does.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	RoutingConfigHash string `json:"routingConfigHash,omitempty"`

	// instances are the vLLM instances that are not terminating, ordered by
	// id; the ready ones are those the routers send traffic to.
	// +listType=map
	// +listMapKey=id
	// +kubebuilder:validation:MaxItems=1024
	// +optional
	Instances []InstanceStatus `json:"instances,omitempty"`

	// adapters are the LoRA adapters, ordered by name: the instances placed
	// to hold each, those where it is loaded, and those where loading it
	// failed.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	// +optional
	Adapters []AdapterStatus `json:"adapters,omitempty"`

	// load is the endpoint's recent load as the operator's metrics
	// scraper sees it (the figures the custom metrics API serves), written
	// at most every 30 s.
	// +optional
	Load *LoadStatus `json:"load,omitempty"`
}

// AdapterStatus is where one LoRA adapter is placed and loaded.
type AdapterStatus struct {
	// name is the adapter's name.
	// +kubebuilder:validation:MaxLength=128
	// +required
	Name string `json:"name"`

	// desired are the IDs of the instances placed to hold the adapter.
	// +listType=set
	// +kubebuilder:validation:MaxItems=512
	// +kubebuilder:validation:items:MaxLength=253
	// +optional
	Desired []string `json:"desired,omitempty"`

	// loaded are the IDs of the ready instances where the adapter is
	// loaded; the routers send its requests to these (an instance it is
	// moving away from keeps it until every desired instance has it).
	// +listType=set
	// +kubebuilder:validation:MaxItems=512
	// +kubebuilder:validation:items:MaxLength=253
	// +optional
	Loaded []string `json:"loaded,omitempty"`

	// unplaced is true when the ready instances have no room left for the
	// adapter: each holds as many adapters as vLLM keeps loaded
	// (--max-cpu-loras, else maxLoras), and every adapter gets one instance
	// before any gets a second. Which adapters are left out follows a hash
	// of their names, so the same ones stay out as the list changes. Add
	// instances, raise the capacity or remove adapters to place it.
	// +optional
	Unplaced bool `json:"unplaced,omitempty"`

	// failed are the desired instances whose last attempt to load the
	// adapter failed, with vLLM's answer; the instance keeps retrying with
	// back-off.
	// +listType=map
	// +listMapKey=instance
	// +kubebuilder:validation:MaxItems=512
	// +optional
	Failed []AdapterFailure `json:"failed,omitempty"`
}

// AdapterFailure is a failed attempt to load an adapter on one instance.
type AdapterFailure struct {
	// instance is the ID of the instance.
	// +kubebuilder:validation:MaxLength=253
	// +required
	Instance string `json:"instance"`

	// reason is what the load returned.
	// +kubebuilder:validation:MaxLength=1024
	// +required
	Reason string `json:"reason"`
}

// InstanceStatus is one vLLM instance as the routers see it.
type InstanceStatus struct {
	// id is the instance's stable identity, its pod name.
	// +kubebuilder:validation:MaxLength=253
	// +required
	ID string `json:"id"`

	// address is host:port of the instance's HTTP server; empty until the
	// pod has an IP.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Address string `json:"address,omitempty"`

	// ready is whether the instance is in the routing configuration.
	// +required
	Ready bool `json:"ready"`
}

// +kubebuilder:object:root=true

// LLMEndpointList is a list of LLMEndpoints.
type LLMEndpointList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the LLMEndpoints.
	Items []LLMEndpoint `json:"items"`
}

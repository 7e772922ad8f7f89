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

// The defaults of an LLMEndpoint live here, once: the defaulting webhook
// writes them into the object and the controller falls back to them for
// fields still unset (the webhook is off under `make run`), so an endpoint
// behaves the same either way.

// Defaults and bounds the spec's comments promise.
const (
	// DefaultReplicas is spec.replicas' default (the CRD's too).
	DefaultReplicas = 2
	// DefaultGPUs is spec.model.gpus' default (the CRD's too).
	DefaultGPUs = 1

	// InstancesPerRouter is how many vLLM instances one router replica is
	// sized for; below MinDefaultRouterReplicas routers the endpoint would
	// lose its front door with a single node.
	InstancesPerRouter       = 8
	MinDefaultRouterReplicas = 2
	MaxRouterReplicas        = 64

	// ConcurrencyPerGPU is the in-flight requests an instance takes per GPU
	// before the router overflows to the next instance; CPUConcurrency is
	// the threshold for instances without a GPU, which batch far less.
	ConcurrencyPerGPU = 10
	CPUConcurrency    = 4
	MaxConcurrency    = 1024

	// DefaultTerminationGracePeriodSeconds is
	// spec.model.terminationGracePeriodSeconds' default.
	DefaultTerminationGracePeriodSeconds = 180
	// PreStopSleepSeconds keeps a terminating instance serving while the
	// routers drop it: the operator rewrites the routing ConfigMap within
	// a second and the routers reload it from the API at once, so new
	// requests stop arriving well before vLLM is told to stop.
	PreStopSleepSeconds = 15
	// DrainLeaveMarginSeconds is how long before the preStop sleep ends a
	// terminating instance, which stays in the routing document draining
	// meanwhile, leaves it: the operator writes the document within a
	// second of its requeue and the routers reload it from the API at
	// once, in about another; the rest covers a clock skew of a few
	// seconds between the API server, which stamps the deletion, and the
	// operator, which times the removal. An instance drains for
	// PreStopSleepSeconds − DrainLeaveMarginSeconds = 10 s.
	DrainLeaveMarginSeconds = 5
	// ShutdownMarginSeconds is the part of the grace period left after
	// vLLM's --shutdown-timeout for it to stop its engine and workers once
	// the last request is done (vLLM allows its engine a few seconds).
	ShutdownMarginSeconds = 5
	// MinShutdownTimeoutSeconds is the shortest drain the operator accepts:
	// below it a grace period only covers the preStop and vLLM would cut
	// every running generation short.
	MinShutdownTimeoutSeconds = 10
	// MinTerminationGracePeriodSeconds is the CRD's minimum of
	// spec.model.terminationGracePeriodSeconds:
	// PreStopSleepSeconds + MinShutdownTimeoutSeconds + ShutdownMarginSeconds.
	MinTerminationGracePeriodSeconds = PreStopSleepSeconds + MinShutdownTimeoutSeconds + ShutdownMarginSeconds
)

// Replicas is spec.replicas or its default.
func Replicas(e *LLMEndpoint) int32 { return deref(e.Spec.Replicas, DefaultReplicas) }

// GPUs is spec.model.gpus or its default.
func GPUs(e *LLMEndpoint) int32 { return deref(e.Spec.Model.GPUs, DefaultGPUs) }

// DefaultTensorParallelSize is spec.model.gpus (one tensor-parallel rank per
// GPU), or nil for an instance without GPUs (where CEL refuses any).
func DefaultTensorParallelSize(e *LLMEndpoint) *int32 {
	g := GPUs(e)
	if g < 1 {
		return nil
	}
	return &g
}

// TensorParallelSize is spec.model.tensorParallelSize or its default (1 on
// CPU).
func TensorParallelSize(e *LLMEndpoint) int32 {
	return deref(e.Spec.Model.TensorParallelSize, max(GPUs(e), 1))
}

// DefaultConcurrencyThreshold is ConcurrencyPerGPU requests in flight per
// GPU of an instance (an instance with more GPUs has more KV cache and
// batches more before requests queue), CPUConcurrency on CPU, at most
// MaxConcurrency.
func DefaultConcurrencyThreshold(e *LLMEndpoint) int32 {
	if g := GPUs(e); g > 0 {
		return min(g*ConcurrencyPerGPU, MaxConcurrency)
	}
	return CPUConcurrency
}

// ConcurrencyThreshold is spec.routing.prefixAware.concurrencyThreshold or
// its default.
func ConcurrencyThreshold(e *LLMEndpoint) int32 {
	if t := e.Spec.Routing.PrefixAware.ConcurrencyThreshold; t != nil {
		return *t
	}
	return DefaultConcurrencyThreshold(e)
}

// DefaultRouterReplicas is one router per InstancesPerRouter instances, at
// least MinDefaultRouterReplicas (so that the endpoint survives losing a
// node) and at most MaxRouterReplicas.
func DefaultRouterReplicas(e *LLMEndpoint) int32 {
	r := Replicas(e)
	return max(MinDefaultRouterReplicas, min((r+InstancesPerRouter-1)/InstancesPerRouter, MaxRouterReplicas))
}

// RouterReplicas is spec.router.replicas or its default.
func RouterReplicas(e *LLMEndpoint) int32 {
	if r := e.Spec.Router.Replicas; r != nil {
		return *r
	}
	return DefaultRouterReplicas(e)
}

// TerminationGracePeriodSeconds is spec.model.terminationGracePeriodSeconds
// or its default.
func TerminationGracePeriodSeconds(e *LLMEndpoint) int64 {
	return deref(e.Spec.Model.TerminationGracePeriodSeconds, DefaultTerminationGracePeriodSeconds)
}

// ShutdownTimeoutSeconds is vLLM's --shutdown-timeout: how long vLLM,
// once told to stop, waits for the requests it runs. The grace period is
// spent as preStop sleep (the routers drop the instance), then this drain,
// then a margin for vLLM to stop, so that
// grace = PreStopSleepSeconds + ShutdownTimeoutSeconds + ShutdownMarginSeconds
// and the kubelet never kills a vLLM that is still draining. Without the
// flag vLLM (since v0.18) aborts every running request on SIGTERM.
func ShutdownTimeoutSeconds(e *LLMEndpoint) int64 {
	return max(TerminationGracePeriodSeconds(e)-PreStopSleepSeconds-ShutdownMarginSeconds, 0)
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// NetworkPolicyEnabled is whether the operator creates the endpoint's
// NetworkPolicies: unless spec.networkPolicy.enabled is false.
func NetworkPolicyEnabled(e *LLMEndpoint) bool {
	return e.Spec.NetworkPolicy.Enabled == nil || *e.Spec.NetworkPolicy.Enabled
}

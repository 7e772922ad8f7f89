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
	"net"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// observed is what exists in the cluster for one endpoint: the inputs of
// its status besides the spec.
type observed struct {
	pods []corev1.Pod
	// placements are the adapters' placements on pods.
	placements []adapterPlacement
	// vllm and router are the Deployments, nil when absent.
	vllm, router *appsv1.Deployment
	// routingHash is the hash of the routing document; empty if it could
	// not be written.
	routingHash string
	// loraAgentConfined is the LoRAAgentConfined condition of an endpoint
	// with LoRA (see llmendpoint_admission.go); its Type is empty when it
	// could not be read, which keeps the previous one.
	loraAgentConfined metav1.Condition
	// inferencePool is the InferencePoolReady condition; its Type is empty
	// in mode Standalone, which removes it.
	inferencePool metav1.Condition
	// err is what went wrong in this reconcile.
	err error
}

// buildStatus rebuilds the status from what exists. Only the conditions'
// transition times and the load (another writer's) carry over from the
// previous status.
func buildStatus(ep *v1alpha1.LLMEndpoint, obs observed) v1alpha1.LLMEndpointStatus {
	st := v1alpha1.LLMEndpointStatus{
		ObservedGeneration: ep.Generation,
		// Written by the load publisher (internal/custommetrics), not
		// observed here: keep it, or each reconcile would erase it.
		Load:              ep.Status.Load,
		Selector:          labels.SelectorFromSet(selectorLabels(ep, roleVLLM)).String(),
		Endpoint:          endpointURL(ep), // empty in mode InferencePool: clients call the Gateway
		RoutingConfigHash: obs.routingHash,
		Conditions:        slices.Clone(ep.Status.Conditions),
	}
	for i := range obs.pods {
		pod := &obs.pods[i]
		if pod.DeletionTimestamp != nil {
			continue
		}
		in := v1alpha1.InstanceStatus{ID: pod.Name, Ready: isRoutable(pod)}
		if pod.Status.PodIP != "" {
			in.Address = net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(vllmPort))
		}
		st.Instances = append(st.Instances, in)
		st.Replicas++
		if in.Ready {
			st.ReadyReplicas++
		}
	}
	slices.SortFunc(st.Instances, func(a, b v1alpha1.InstanceStatus) int { return strings.Compare(a.ID, b.ID) })

	conds := conditions(ep, obs, st.ReadyReplicas)
	if len(obs.placements) > 0 {
		st.Adapters = adapterStatuses(obs.placements, int(st.ReadyReplicas))
		conds = append(conds, adaptersCondition(obs.placements, loraCapacity(ep), int(st.ReadyReplicas)))
	} else {
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionAdaptersReady)
	}
	if obs.inferencePool.Type != "" {
		conds = append(conds, obs.inferencePool)
	} else {
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionInferencePoolReady)
	}
	switch {
	case !loraEnabled(ep):
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionLoRAAgentConfined)
	case obs.loraAgentConfined.Type != "":
		conds = append(conds, obs.loraAgentConfined)
	}
	for _, c := range conds {
		c.ObservedGeneration = ep.Generation
		meta.SetStatusCondition(&st.Conditions, c)
	}
	return st
}

// conditions are Available, Progressing and Degraded for what was observed.
func conditions(ep *v1alpha1.LLMEndpoint, obs observed, ready int32) []metav1.Condition {
	want := v1alpha1.Replicas(ep)
	routerUp := obs.router != nil && obs.router.Status.AvailableReplicas > 0

	available := metav1.Condition{Type: v1alpha1.ConditionAvailable}
	switch {
	case want == 0:
		available.Status, available.Reason = metav1.ConditionFalse, v1alpha1.ReasonScaledToZero
		available.Message = "spec.replicas is 0"
		if after := v1alpha1.ScaleToZeroAfter(ep); after > 0 {
			available.Message += fmt.Sprintf("; the next request scales it to 1 (spec.scaling.scaleToZeroAfter is %s)", after)
		}
	case ready == 0:
		available.Status, available.Reason = metav1.ConditionFalse, v1alpha1.ReasonNoReadyInstances
		available.Message = fmt.Sprintf("0 of %d vLLM instances are ready", want)
		if why := podStartProblem(obs.pods); why != "" {
			available.Message = truncate(available.Message+"; "+why, 1024)
		}
	case !routerUp:
		available.Status, available.Reason = metav1.ConditionFalse, v1alpha1.ReasonRouterUnavailable
		available.Message = "no router replica is available"
	default:
		available.Status, available.Reason = metav1.ConditionTrue, v1alpha1.ReasonInstancesReady
		available.Message = fmt.Sprintf("%d of %d vLLM instances ready behind %d router replicas", ready, want, obs.router.Status.AvailableReplicas)
	}

	progressing := metav1.Condition{Type: v1alpha1.ConditionProgressing}
	switch {
	// Woken from zero on demand: requests are held until an instance is
	// ready, which is what matters here, rather than the Deployment's
	// scale.
	case ready == 0 && want > 0 && ep.Annotations[v1alpha1.AnnotationWokeAt] != "":
		progressing.Status, progressing.Reason = metav1.ConditionTrue, v1alpha1.ReasonActivated
		progressing.Message = fmt.Sprintf("starting from zero since %s: 0 of %d vLLM instances ready", ep.Annotations[v1alpha1.AnnotationWokeAt], want)
	case !rolledOut(obs.vllm) || !rolledOut(obs.router):
		progressing.Status, progressing.Reason = metav1.ConditionTrue, v1alpha1.ReasonRollingOut
		progressing.Message = "a Deployment is rolling out"
	case ready != want:
		progressing.Status, progressing.Reason = metav1.ConditionTrue, v1alpha1.ReasonScaling
		progressing.Message = fmt.Sprintf("%d of %d vLLM instances ready", ready, want)
	default:
		progressing.Status, progressing.Reason = metav1.ConditionFalse, v1alpha1.ReasonRolloutComplete
		progressing.Message = fmt.Sprintf("%d vLLM instances ready", ready)
	}

	degraded := metav1.Condition{Type: v1alpha1.ConditionDegraded}
	switch {
	case obs.err != nil:
		degraded.Status, degraded.Reason = metav1.ConditionTrue, v1alpha1.ReasonReconcileFailed
		degraded.Message = truncate(obs.err.Error(), 1024)
	case want == 1 && routingStrategy(ep) == v1alpha1.RoutingStrategyPrefixAware:
		degraded.Status, degraded.Reason = metav1.ConditionTrue, v1alpha1.ReasonSingleInstance
		degraded.Message = "spec.replicas is 1: prefix-aware routing needs at least 2 instances to keep prefixes apart"
	default:
		degraded.Status, degraded.Reason = metav1.ConditionFalse, v1alpha1.ReasonAsExpected
		degraded.Message = "the endpoint is as its spec asks"
	}
	return []metav1.Condition{available, progressing, degraded}
}

// startFailures are the reasons the kubelet gives for a container it
// cannot start at all, as opposed to one still starting.
var startFailures = []string{"CreateContainerConfigError", "ErrImagePull", "ImagePullBackOff", "InvalidImageName"}

// podStartProblem is why the first instance the kubelet cannot start is
// stuck: a missing Secret (spec.model.hfTokenSecretRef) shows here as
// CreateContainerConfigError, which the operator learns without the right
// to read Secrets; an instance no node takes (no free GPU, a model cache
// claim that is unbound or attached to another node) as the scheduler's
// Unschedulable. Empty when no instance is stuck so.
func podStartProblem(pods []corev1.Pod) string {
	for i := range pods {
		for _, cs := range pods[i].Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && slices.Contains(startFailures, w.Reason) {
				return fmt.Sprintf("pod %s container %s: %s: %s", pods[i].Name, cs.Name, w.Reason, w.Message)
			}
		}
		for _, c := range pods[i].Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return fmt.Sprintf("pod %s: %s: %s", pods[i].Name, c.Reason, c.Message)
			}
		}
	}
	return ""
}

func routingStrategy(ep *v1alpha1.LLMEndpoint) v1alpha1.RoutingStrategy {
	if s := ep.Spec.Routing.Strategy; s != "" {
		return s
	}
	return v1alpha1.RoutingStrategyPrefixAware
}

// rolledOut is whether a Deployment has seen its spec and brought every
// replica to it.
func rolledOut(d *appsv1.Deployment) bool {
	if d == nil {
		return false
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == want && d.Status.Replicas == want
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// updateStatus adds the owned Deployments to what the reconcile observed,
// rebuilds the status and writes it if it changed, with an Event for each
// condition that changed.
func (r *LLMEndpointReconciler) updateStatus(ctx context.Context, ep *v1alpha1.LLMEndpoint, obs observed) error {
	var err error
	if obs.vllm, err = r.deployment(ctx, ep, vllmName(ep)); err != nil {
		return err
	}
	if obs.router, err = r.deployment(ctx, ep, routerName(ep)); err != nil {
		return err
	}
	st := buildStatus(ep, obs)
	if equality.Semantic.DeepEqual(ep.Status, st) {
		return nil
	}
	updated := ep.DeepCopy()
	updated.Status = st
	if err := r.Status().Patch(ctx, updated, client.MergeFrom(ep), client.FieldOwner(FieldOwner)); err != nil {
		return fmt.Errorf("update status: %w", err)
	}
	for _, c := range st.Conditions {
		old := meta.FindStatusCondition(ep.Status.Conditions, c.Type)
		// Adapters left out are news whenever the list of them changes,
		// even on a new endpoint: nothing else will serve them.
		shortOfRoom := c.Reason == v1alpha1.ReasonInsufficientAdapterCapacity
		if old != nil && old.Status == c.Status && old.Reason == c.Reason && (!shortOfRoom || old.Message == c.Message) {
			continue
		}
		eventType := corev1.EventTypeNormal
		if (c.Type == v1alpha1.ConditionAvailable && c.Status == metav1.ConditionFalse) ||
			(c.Type == v1alpha1.ConditionDegraded && c.Status == metav1.ConditionTrue) ||
			c.Reason == v1alpha1.ReasonAdapterLoadFailed || shortOfRoom ||
			c.Reason == v1alpha1.ReasonAdmissionPolicyMissing || c.Reason == v1alpha1.ReasonInferencePoolCRDMissing ||
			c.Reason == v1alpha1.ReasonInferencePoolFailed {
			eventType = corev1.EventTypeWarning
		}
		// A missing admission policy or InferencePool API, or adapters
		// left without room, are news from the first reconcile on.
		if old == nil && !shortOfRoom && (c.Type != v1alpha1.ConditionDegraded || c.Status != metav1.ConditionTrue) &&
			c.Reason != v1alpha1.ReasonAdmissionPolicyMissing && c.Reason != v1alpha1.ReasonInferencePoolCRDMissing {
			continue // a new endpoint starting up is not news
		}
		r.Recorder.Eventf(ep, nil, eventType, c.Reason, "Reconcile", "%s=%s: %s", c.Type, c.Status, c.Message)
	}
	return nil
}

// deployment reads an owned Deployment from the cache; nil if absent.
func (r *LLMEndpointReconciler) deployment(ctx context.Context, ep *v1alpha1.LLMEndpoint, name string) (*appsv1.Deployment, error) {
	d := &appsv1.Deployment{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: ep.Namespace, Name: name}, d); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get Deployment %s: %w", name, err)
	}
	return d, nil
}

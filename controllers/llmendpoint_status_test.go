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
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// rolledOutDeployment is a Deployment whose controller has caught up.
func rolledOutDeployment(replicas, available int32) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Generation: 1},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To(replicas)},
		Status: appsv1.DeploymentStatus{
			ObservedGeneration: 1, Replicas: replicas, UpdatedReplicas: replicas, AvailableReplicas: available,
		},
	}
}

func TestBuildStatus(t *testing.T) {
	now := time.Now()
	ready2 := []corev1.Pod{
		newPod("chat-vllm-a", "10.0.0.1", podReady, now),
		newPod("chat-vllm-b", "10.0.0.2", podReady, now),
	}
	type cond struct {
		status metav1.ConditionStatus
		reason string
	}
	tests := []struct {
		name                        string
		ep                          *v1alpha1.LLMEndpoint
		obs                         observed
		wantReplicas, wantReady     int32
		wantAvailable, wantProgress cond
		wantDegraded                cond
	}{{
		name:         "serving",
		ep:           newEndpoint(),
		obs:          observed{pods: ready2, vllm: rolledOutDeployment(2, 2), router: rolledOutDeployment(2, 2), routingHash: "h"},
		wantReplicas: 2, wantReady: 2,
		wantAvailable: cond{metav1.ConditionTrue, v1alpha1.ReasonInstancesReady},
		wantProgress:  cond{metav1.ConditionFalse, v1alpha1.ReasonRolloutComplete},
		wantDegraded:  cond{metav1.ConditionFalse, v1alpha1.ReasonAsExpected},
	}, {
		name:          "just created",
		ep:            newEndpoint(),
		obs:           observed{},
		wantAvailable: cond{metav1.ConditionFalse, v1alpha1.ReasonNoReadyInstances},
		wantProgress:  cond{metav1.ConditionTrue, v1alpha1.ReasonRollingOut},
		wantDegraded:  cond{metav1.ConditionFalse, v1alpha1.ReasonAsExpected},
	}, {
		name: "one unready, one terminating",
		ep:   newEndpoint(),
		obs: observed{pods: []corev1.Pod{
			newPod("chat-vllm-a", "10.0.0.1", podReady, now),
			newPod("chat-vllm-b", "10.0.0.2", podUnready, now),
			newPod("chat-vllm-c", "10.0.0.3", podTerminating, now),
		}, vllm: rolledOutDeployment(2, 1), router: rolledOutDeployment(2, 2)},
		wantReplicas: 2, wantReady: 1,
		wantAvailable: cond{metav1.ConditionTrue, v1alpha1.ReasonInstancesReady},
		wantProgress:  cond{metav1.ConditionTrue, v1alpha1.ReasonScaling},
		wantDegraded:  cond{metav1.ConditionFalse, v1alpha1.ReasonAsExpected},
	}, {
		name:         "router down",
		ep:           newEndpoint(),
		obs:          observed{pods: ready2, vllm: rolledOutDeployment(2, 2), router: rolledOutDeployment(2, 0)},
		wantReplicas: 2, wantReady: 2,
		wantAvailable: cond{metav1.ConditionFalse, v1alpha1.ReasonRouterUnavailable},
		wantProgress:  cond{metav1.ConditionFalse, v1alpha1.ReasonRolloutComplete},
		wantDegraded:  cond{metav1.ConditionFalse, v1alpha1.ReasonAsExpected},
	}, {
		name:          "scaled to zero",
		ep:            newEndpoint(func(ep *v1alpha1.LLMEndpoint) { ep.Spec.Replicas = ptr.To[int32](0) }),
		obs:           observed{vllm: rolledOutDeployment(0, 0), router: rolledOutDeployment(2, 2)},
		wantAvailable: cond{metav1.ConditionFalse, v1alpha1.ReasonScaledToZero},
		wantProgress:  cond{metav1.ConditionFalse, v1alpha1.ReasonRolloutComplete},
		wantDegraded:  cond{metav1.ConditionFalse, v1alpha1.ReasonAsExpected},
	}, {
		name:         "one instance, prefix-aware",
		ep:           newEndpoint(func(ep *v1alpha1.LLMEndpoint) { ep.Spec.Replicas = ptr.To[int32](1) }),
		obs:          observed{pods: ready2[:1], vllm: rolledOutDeployment(1, 1), router: rolledOutDeployment(2, 2)},
		wantReplicas: 1, wantReady: 1,
		wantAvailable: cond{metav1.ConditionTrue, v1alpha1.ReasonInstancesReady},
		wantProgress:  cond{metav1.ConditionFalse, v1alpha1.ReasonRolloutComplete},
		wantDegraded:  cond{metav1.ConditionTrue, v1alpha1.ReasonSingleInstance},
	}, {
		name: "one instance, random",
		ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Replicas = ptr.To[int32](1)
			ep.Spec.Routing.Strategy = v1alpha1.RoutingStrategyRandom
		}),
		obs:          observed{pods: ready2[:1], vllm: rolledOutDeployment(1, 1), router: rolledOutDeployment(2, 2)},
		wantReplicas: 1, wantReady: 1,
		wantAvailable: cond{metav1.ConditionTrue, v1alpha1.ReasonInstancesReady},
		wantProgress:  cond{metav1.ConditionFalse, v1alpha1.ReasonRolloutComplete},
		wantDegraded:  cond{metav1.ConditionFalse, v1alpha1.ReasonAsExpected},
	}, {
		name:         "apply failed",
		ep:           newEndpoint(),
		obs:          observed{pods: ready2, vllm: rolledOutDeployment(2, 2), router: rolledOutDeployment(2, 2), err: errors.New("vLLM: apply Deployment chat-vllm: forbidden")},
		wantReplicas: 2, wantReady: 2,
		wantAvailable: cond{metav1.ConditionTrue, v1alpha1.ReasonInstancesReady},
		wantProgress:  cond{metav1.ConditionFalse, v1alpha1.ReasonRolloutComplete},
		wantDegraded:  cond{metav1.ConditionTrue, v1alpha1.ReasonReconcileFailed},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := buildStatus(tt.ep, tt.obs)
			if st.Replicas != tt.wantReplicas || st.ReadyReplicas != tt.wantReady {
				t.Errorf("replicas %d ready %d, want %d %d", st.Replicas, st.ReadyReplicas, tt.wantReplicas, tt.wantReady)
			}
			if st.ObservedGeneration != 3 || st.Selector != "serving.warmroute.dev/endpoint=chat,serving.warmroute.dev/role=vllm" || st.Endpoint != "http://chat.team.svc" || st.RoutingConfigHash != tt.obs.routingHash {
				t.Errorf("status %+v", st)
			}
			if len(st.Instances) != int(tt.wantReplicas) {
				t.Errorf("instances %+v", st.Instances)
			}
			for typ, want := range map[string]cond{
				v1alpha1.ConditionAvailable:   tt.wantAvailable,
				v1alpha1.ConditionProgressing: tt.wantProgress,
				v1alpha1.ConditionDegraded:    tt.wantDegraded,
			} {
				c := meta.FindStatusCondition(st.Conditions, typ)
				if c == nil {
					t.Errorf("no %s condition", typ)
					continue
				}
				if c.Status != want.status || c.Reason != want.reason || c.Message == "" || c.ObservedGeneration != 3 {
					t.Errorf("%s = %s/%s %q, want %s/%s", typ, c.Status, c.Reason, c.Message, want.status, want.reason)
				}
			}
		})
	}
}

// TestBuildStatusKeepsTransitionTimes: rebuilding an unchanged status gives
// the same status, so nothing is written.
func TestBuildStatusKeepsTransitionTimes(t *testing.T) {
	now := time.Now()
	ep := newEndpoint()
	obs := observed{pods: []corev1.Pod{newPod("chat-vllm-a", "10.0.0.1", podReady, now)}, vllm: rolledOutDeployment(2, 1), router: rolledOutDeployment(2, 2)}
	ep.Status = buildStatus(ep, obs)
	for i := range ep.Status.Conditions {
		ep.Status.Conditions[i].LastTransitionTime = metav1.NewTime(now.Add(-time.Hour).Truncate(time.Second))
	}
	again := buildStatus(ep, obs)
	if diff := cmp.Diff(ep.Status, again); diff != "" {
		t.Errorf("status changed on a rebuild (-before +after):\n%s", diff)
	}
	if st := buildStatus(ep, observed{}); meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionAvailable).LastTransitionTime.Time.Before(now) {
		t.Error("a changed condition kept its old transition time")
	}
}

// A missing Secret keeps vLLM from starting; the operator, which may not
// read Secrets, tells the user from the pod.
func TestAvailableNamesWhyNoInstanceStarts(t *testing.T) {
	stuck := newPod("chat-vllm-a", "", podUnready, time.Now())
	stuck.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: "vllm",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason: "CreateContainerConfigError", Message: `secret "hf-token" not found`,
		}},
	}}
	starting := newPod("chat-vllm-b", "", podUnready, time.Now())
	starting.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: "vllm", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}},
	}}
	unscheduled := newPod("chat-vllm-c", "", podUnready, time.Now())
	unscheduled.Status.Phase = corev1.PodPending
	unscheduled.Status.Conditions = []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: `0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims.`,
	}}
	for _, tt := range []struct {
		pods []corev1.Pod
		want string
	}{
		{[]corev1.Pod{starting, stuck}, `0 of 2 vLLM instances are ready; pod chat-vllm-a container vllm: CreateContainerConfigError: secret "hf-token" not found`},
		{[]corev1.Pod{starting, unscheduled}, `0 of 2 vLLM instances are ready; pod chat-vllm-c: Unschedulable: 0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims.`},
		{[]corev1.Pod{starting}, "0 of 2 vLLM instances are ready"},
	} {
		st := buildStatus(newEndpoint(), observed{pods: tt.pods})
		if got := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionAvailable).Message; got != tt.want {
			t.Errorf("Available message %q, want %q", got, tt.want)
		}
	}
}

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
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// testOptions are the operator settings the builder tests use.
var testOptions = Options{VLLMImage: "vllm/vllm-openai:test", RouterImage: "router:test"}

// newEndpoint is an LLMEndpoint as the API server stores it after applying
// the CRD's defaults, changed by the given functions.
func newEndpoint(changes ...func(*v1alpha1.LLMEndpoint)) *v1alpha1.LLMEndpoint {
	ep := &v1alpha1.LLMEndpoint{
		ObjectMeta: metav1.ObjectMeta{Name: "chat", Namespace: "team", UID: types.UID("0b5d6c1e-uid"), Generation: 3},
		Spec: v1alpha1.LLMEndpointSpec{
			Replicas: ptr.To[int32](2),
			Model: v1alpha1.ModelSpec{
				Name: "llama",
				URI:  "meta-llama/Llama-3.1-8B-Instruct",
				GPUs: ptr.To[int32](1),
			},
			Routing: v1alpha1.RoutingSpec{
				Strategy:    v1alpha1.RoutingStrategyPrefixAware,
				PrefixAware: v1alpha1.PrefixAwareSpec{PrefixLength: ptr.To[int32](4096)},
			},
			Router: v1alpha1.RouterSpec{ServiceType: corev1.ServiceTypeClusterIP, Port: ptr.To[int32](80)},
		},
	}
	for _, change := range changes {
		change(ep)
	}
	return ep
}

// podState is how a test pod looks to the operator.
type podState int

const (
	podReady podState = iota
	podUnready
	podTerminating
	podNoIP
)

// newPod is a vLLM pod of the test endpoint.
func newPod(name, ip string, state podState, readyAt time.Time) corev1.Pod {
	pod := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team", Labels: map[string]string{LabelEndpoint: "chat", LabelRole: roleVLLM}},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			PodIP: ip,
			Conditions: []corev1.PodCondition{{
				Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(readyAt),
			}},
		},
	}
	switch state {
	case podUnready:
		pod.Status.Conditions[0].Status = corev1.ConditionFalse
	case podTerminating:
		pod.DeletionTimestamp = ptr.To(metav1.NewTime(readyAt))
	case podNoIP:
		pod.Status.PodIP = ""
	}
	return pod
}

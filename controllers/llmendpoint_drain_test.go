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
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// deleting makes pod terminating, deleted at deleted with a grace period
// of grace seconds and a preStop sleep of preStop seconds (0: none).
func deleting(pod corev1.Pod, deleted time.Time, grace, preStop int64) corev1.Pod {
	pod.DeletionGracePeriodSeconds = ptr.To(grace)
	pod.DeletionTimestamp = ptr.To(metav1.NewTime(deleted.Add(time.Duration(grace) * time.Second)))
	c := corev1.Container{Name: "vllm"}
	if preStop > 0 {
		c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: preStop}}}
	}
	pod.Spec.Containers = []corev1.Container{c}
	return pod
}

// TestDrainingInstances: a terminating pod stays in the routing document,
// marked draining, from its deletion until DrainLeaveMarginSeconds before
// its preStop sleep (or grace period) ends, and the operator looks again
// when the first drain ends; row by row, what leaves at once.
func TestDrainingInstances(t *testing.T) {
	deleted := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	const preStop = v1alpha1.PreStopSleepSeconds
	window := time.Duration(preStop-v1alpha1.DrainLeaveMarginSeconds) * time.Second
	ready := newPod("chat-vllm-b", "10.0.0.2", podReady, deleted.Add(-time.Hour))
	for _, tc := range []struct {
		rule     string
		pod      corev1.Pod
		at       time.Time
		draining bool
		requeue  time.Duration // after at; 0: none
	}{
		{"just deleted: draining until the margin before its preStop ends", deleting(ready, deleted, 180, preStop), deleted, true, window},
		{"halfway: still draining", deleting(ready, deleted, 180, preStop), deleted.Add(window / 2), true, window / 2},
		{"at the drain's end: gone", deleting(ready, deleted, 180, preStop), deleted.Add(window), false, 0},
		{"terminating and not ready: gone at once", deleting(newPod("chat-vllm-b", "10.0.0.2", podUnready, deleted), deleted, 180, preStop), deleted, false, 0},
		{"no preStop sleep: gone at once", deleting(ready, deleted, 180, 0), deleted, false, 0},
		{"a preStop sleep within the margin: gone at once", deleting(ready, deleted, 180, v1alpha1.DrainLeaveMarginSeconds), deleted, false, 0},
		{"a grace period shorter than the preStop sleep: drains for its grace", deleting(ready, deleted, 8, preStop), deleted, true, 3 * time.Second},
		{"deleted at once (grace 0): gone", deleting(ready, deleted, 0, preStop), deleted, false, 0},
		{"terminating without a grace period: gone", newPod("chat-vllm-b", "10.0.0.2", podTerminating, deleted), deleted, false, 0},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			pods := []corev1.Pod{newPod("chat-vllm-a", "10.0.0.1", podReady, deleted.Add(-time.Hour)), tc.pod}
			want := []routing.Instance{{ID: "chat-vllm-a", Address: "10.0.0.1:8000"}}
			if tc.draining {
				want = append(want, routing.Instance{ID: "chat-vllm-b", Address: "10.0.0.2:8000", Draining: true})
			}
			doc := buildRoutingDocument(newEndpoint(), pods, nil, tc.at)
			if diff := cmp.Diff(want, doc.Instances); diff != "" {
				t.Errorf("instances (-want +got):\n%s", diff)
			}
			if got := nextDrainEnd(pods, tc.at); got != tc.requeue {
				t.Errorf("looks again after %v, want %v", got, tc.requeue)
			}
		})
	}
}

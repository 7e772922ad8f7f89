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

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// Draining: a terminating vLLM pod keeps serving through its preStop
// sleep (v1alpha1.PreStopSleepSeconds) before vLLM is told to stop. For
// most of that sleep it stays in the routing document marked draining,
// so that the routers warm the next owners of the keys it holds
// (sidecar/README.md, "Warming joiners and leavers"); it leaves the
// document v1alpha1.DrainLeaveMarginSeconds before the sleep ends, so
// that every router has dropped it before vLLM refuses new requests.

// drainEnd is when a terminating pod leaves the routing document: its
// preStop sleep's end, or its grace period's if sooner (the kubelet kills
// it then), counted from the deletion (deletionTimestamp less the grace
// period), less v1alpha1.DrainLeaveMarginSeconds. The zero time for a pod
// that is not terminating, or whose deletion carries no grace period.
func drainEnd(pod *corev1.Pod) time.Time {
	if pod.DeletionTimestamp == nil || pod.DeletionGracePeriodSeconds == nil {
		return time.Time{}
	}
	grace := *pod.DeletionGracePeriodSeconds
	deleted := pod.DeletionTimestamp.Add(-time.Duration(grace) * time.Second)
	serving := min(preStopSleepSeconds(pod), grace)
	return deleted.Add(time.Duration(serving-v1alpha1.DrainLeaveMarginSeconds) * time.Second)
}

// preStopSleepSeconds is the vLLM container's preStop sleep (0 without
// one): the pod's own, which a pod made by another operator version may
// not share with this one's v1alpha1.PreStopSleepSeconds.
func preStopSleepSeconds(pod *corev1.Pod) int64 {
	for _, c := range pod.Spec.Containers {
		if c.Name == "vllm" && c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
			return c.Lifecycle.PreStop.Sleep.Seconds
		}
	}
	return 0
}

// isDraining is whether a terminating pod is still in the routing
// document at now, marked draining: it was routable but for its deletion
// (Ready, with an IP) and its drain has not ended. One that is not Ready,
// or whose preStop sleep leaves no drain, leaves at once.
func isDraining(pod *corev1.Pod, now time.Time) bool {
	if pod.DeletionTimestamp == nil || pod.Status.PodIP == "" {
		return false
	}
	_, ready := readySince(pod)
	return ready && now.Before(drainEnd(pod))
}

// nextDrainEnd is how long after now the first draining pod of pods
// leaves the routing document (0: none drains).
func nextDrainEnd(pods []corev1.Pod, now time.Time) time.Duration {
	var next time.Duration
	for i := range pods {
		if pod := &pods[i]; isDraining(pod, now) {
			if d := drainEnd(pod).Sub(now); next == 0 || d < next {
				next = d
			}
		}
	}
	return next
}

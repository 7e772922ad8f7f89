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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// PodIdentity is a pod's UID, primary GID and fsGroup; nil leaves each to
// the image or the platform.
type PodIdentity struct {
	RunAsUser  *int64
	RunAsGroup *int64
	FSGroup    *int64
}

// DefaultVLLMUID is the vLLM pods' UID, GID and fsGroup where the
// platform assigns none: the `vllm` user (UID 2000) of current vLLM
// images, which older images lack (the USER variable covers them). The
// fsGroup makes the model cache claim writable to it.
const DefaultVLLMUID int64 = 2000

// DefaultVLLMIdentity is the vLLM pods' identity on a platform: fixed
// outside OpenShift, where nothing else would keep the root image from
// running as root; left to OpenShift's SCC, which refuses a fixed one.
func DefaultVLLMIdentity(openShift bool) PodIdentity {
	if openShift {
		return PodIdentity{}
	}
	return PodIdentity{RunAsUser: ptr.To(DefaultVLLMUID), RunAsGroup: ptr.To(DefaultVLLMUID), FSGroup: ptr.To(DefaultVLLMUID)}
}

// vllmPodSecurityContext is the restricted pod security context with the
// identity of opts.VLLM (each part left to the platform when unset). With
// an fsGroup, ours or the one OpenShift's SCC assigns, the kubelet changes
// a volume's group only when its root does not have it already: a model
// cache of a few hundred thousand files would otherwise be walked on
// every start.
func vllmPodSecurityContext(opts Options) *corev1.PodSecurityContext {
	sc := restrictedPodSecurityContext(opts.VLLM.RunAsUser)
	sc.RunAsGroup = opts.VLLM.RunAsGroup
	sc.FSGroup = opts.VLLM.FSGroup
	sc.FSGroupChangePolicy = ptr.To(corev1.FSGroupChangeOnRootMismatch)
	return sc
}

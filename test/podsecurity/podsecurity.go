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

// Package podsecurity tells whether a pod template would be admitted under
// OpenShift's restricted-v2 SecurityContextConstraints, the SCC every
// authenticated user's pods get by default. It is the Kubernetes
// "restricted" Pod Security Standard, checked with the upstream evaluator
// (k8s.io/pod-security-admission), plus what restricted-v2 adds on top:
// the UID, fsGroup and SELinux context are the platform's to assign from
// the namespace's ranges, so a pod must not fix them, and the only seccomp
// profile is the runtime's default.
package podsecurity

import (
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

var (
	evaluatorOnce sync.Once
	evaluator     policy.Evaluator
	evaluatorErr  error
)

// Restricted returns why the pod template would be refused by the
// Kubernetes "restricted" Pod Security Standard, one reason per line; none
// when it would be admitted.
func Restricted(template *corev1.PodTemplateSpec) []string {
	evaluatorOnce.Do(func() {
		evaluator, evaluatorErr = policy.NewEvaluator(policy.DefaultChecks(), nil)
	})
	if evaluatorErr != nil {
		return []string{fmt.Sprintf("pod security evaluator: %v", evaluatorErr)}
	}
	var reasons []string
	lv := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	for _, r := range evaluator.EvaluatePod(lv, &template.ObjectMeta, &template.Spec) {
		if !r.Allowed {
			reasons = append(reasons, fmt.Sprintf("restricted: %s: %s", r.ForbiddenReason, r.ForbiddenDetail))
		}
	}
	return reasons
}

// RestrictedV2 returns why the pod template would be refused under
// restricted-v2, one reason per line; none when it would be admitted.
func RestrictedV2(template *corev1.PodTemplateSpec) []string {
	reasons := Restricted(template)

	spec := &template.Spec
	if sc := spec.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			reasons = append(reasons, fmt.Sprintf("restricted-v2: pod fixes runAsUser %d; the UID comes from the namespace's range", *sc.RunAsUser))
		}
		if sc.FSGroup != nil {
			reasons = append(reasons, fmt.Sprintf("restricted-v2: pod fixes fsGroup %d; it comes from the namespace's range", *sc.FSGroup))
		}
		if sc.SELinuxOptions != nil {
			reasons = append(reasons, "restricted-v2: pod sets seLinuxOptions; the SELinux context comes from the namespace")
		}
		if p := sc.SeccompProfile; p != nil && p.Type != corev1.SeccompProfileTypeRuntimeDefault {
			reasons = append(reasons, fmt.Sprintf("restricted-v2: pod uses seccomp profile %s; only RuntimeDefault is allowed", p.Type))
		}
	}
	podSeccomp := spec.SecurityContext != nil && spec.SecurityContext.SeccompProfile != nil &&
		spec.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault
	visit := func(kind, name string, sc *corev1.SecurityContext) {
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		if sc.RunAsUser != nil {
			reasons = append(reasons, fmt.Sprintf("restricted-v2: %s %q fixes runAsUser %d; the UID comes from the namespace's range", kind, name, *sc.RunAsUser))
		}
		if sc.SELinuxOptions != nil {
			reasons = append(reasons, fmt.Sprintf("restricted-v2: %s %q sets seLinuxOptions", kind, name))
		}
		switch p := sc.SeccompProfile; {
		case p == nil && !podSeccomp:
			reasons = append(reasons, fmt.Sprintf("restricted-v2: %s %q has no RuntimeDefault seccomp profile", kind, name))
		case p != nil && p.Type != corev1.SeccompProfileTypeRuntimeDefault:
			reasons = append(reasons, fmt.Sprintf("restricted-v2: %s %q uses seccomp profile %s; only RuntimeDefault is allowed", kind, name, p.Type))
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			reasons = append(reasons, fmt.Sprintf("restricted-v2: %s %q must set allowPrivilegeEscalation: false", kind, name))
		}
	}
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		visit("init container", c.Name, c.SecurityContext)
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		visit("container", c.Name, c.SecurityContext)
	}
	for i := range spec.EphemeralContainers {
		c := &spec.EphemeralContainers[i]
		visit("ephemeral container", c.Name, c.SecurityContext)
	}
	return reasons
}

// KubeletStartsNonRoot returns why the kubelet would refuse to start the
// template's containers, one reason per container; none when it would
// start them. It is the kubelet's runAsNonRoot check: a container that
// must not run as root runs as its own runAsUser, else the pod's, else
// assignedUID (what the platform's admission set, nil outside
// OpenShift), else its image's user (imageUIDs by image; a missing entry
// is a user the kubelet cannot verify, which it refuses too).
func KubeletStartsNonRoot(template *corev1.PodTemplateSpec, imageUIDs map[string]int64, assignedUID *int64) []string {
	spec := &template.Spec
	var reasons []string
	check := func(c *corev1.Container) {
		var nonRoot *bool
		var uid *int64
		if sc := spec.SecurityContext; sc != nil {
			nonRoot, uid = sc.RunAsNonRoot, sc.RunAsUser
		}
		if sc := c.SecurityContext; sc != nil {
			if sc.RunAsNonRoot != nil {
				nonRoot = sc.RunAsNonRoot
			}
			if sc.RunAsUser != nil {
				uid = sc.RunAsUser
			}
		}
		if nonRoot == nil || !*nonRoot {
			return
		}
		if uid == nil {
			uid = assignedUID
		}
		if uid == nil {
			image, ok := imageUIDs[c.Image]
			if !ok {
				reasons = append(reasons, fmt.Sprintf("container %q: image %s has a user the kubelet cannot verify is non-root", c.Name, c.Image))
				return
			}
			uid = &image
		}
		if *uid == 0 {
			reasons = append(reasons, fmt.Sprintf("container %q: runAsNonRoot and image %s will run as root", c.Name, c.Image))
		}
	}
	for i := range spec.InitContainers {
		check(&spec.InitContainers[i])
	}
	for i := range spec.Containers {
		check(&spec.Containers[i])
	}
	return reasons
}

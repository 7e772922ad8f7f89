// Package podspec reads facts out of pod specs that more than one
// component needs (the operator's load scraper, the test harness that
// plays the container runtime).
package podspec

import corev1 "k8s.io/api/core/v1"

// ContainerPort is the number of the first container port named name in
// any of the pod's containers; 0 when none is.
func ContainerPort(pod *corev1.Pod, name string) int32 {
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort
			}
		}
	}
	return 0
}

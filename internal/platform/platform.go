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

// Package platform tells which Kubernetes distribution the operator runs
// on, where that changes the pods it renders.
package platform

import (
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
)

// SecurityGroup is OpenShift's API group of SecurityContextConstraints:
// the admission that assigns every pod a UID and fsGroup from its
// namespace's range. A cluster that serves it runs that admission.
const SecurityGroup = "security.openshift.io"

// Name is the platform the operator runs on.
type Name string

const (
	// Kubernetes assigns pods no UID: the image's user runs, or the pod's.
	Kubernetes Name = "kubernetes"
	// OpenShift assigns every pod a UID and fsGroup (restricted-v2 SCC)
	// and refuses pods that fix their own.
	OpenShift Name = "openshift"
)

// Detect asks the API server's discovery whether it serves OpenShift's
// security API.
func Detect(d discovery.ServerGroupsInterface) (Name, error) {
	groups, err := d.ServerGroups()
	if err != nil {
		return "", fmt.Errorf("discover API groups: %w", err)
	}
	if slices.ContainsFunc(groups.Groups, func(g metav1.APIGroup) bool { return g.Name == SecurityGroup }) {
		return OpenShift, nil
	}
	return Kubernetes, nil
}

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
	"crypto/rand"
	"fmt"
	"strconv"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// The router replicas of an endpoint elect one picker, which decides where
// every request goes, with a Lease (sidecar/router/picker), and call it
// over a pick API signed with a key only their pods hold. The operator
// creates both once: the Lease, so that the routers need no create on
// Leases (RBAC cannot limit a create by name), and the key Secret, with a
// random key it never rotates (a new key takes a rolled Deployment: until
// every replica has it, replicas with different keys refuse each other and
// route by their fallback).
const (
	routerPickPort   = 9091
	routerPickKeyDir = "/etc/warmroute/pick-key"
	pickKeyBytes     = 32
)

// The operator creates the Lease, reads it (its annotations drive scale to
// and from zero, llmendpoint_scaletozero.go) and never writes it again: the
// routers renew it every second. Granting the routers update on it through
// a Role would need the operator to hold update on Leases itself (Kubernetes'
// RBAC escalation check: a Role may grant only what its creator holds),
// which cannot be limited by name and so would reach every Lease in the
// cluster, kube-system's leader elections included. Instead the install
// ships the ClusterRole RouterClusterRole with that one rule, and the
// operator binds it in the endpoint's namespace, which needs only bind on
// that ClusterRole by name. The routers' own Role keeps get by name.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=create;get
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=warmroute-router

// RouterClusterRole is the ClusterRole every install method ships
// (config/rbac/router_role.yaml) that lets the routers renew their election
// Lease: update on Leases, bound per endpoint in its namespace. The name is
// fixed because the operator's bind permission names it.
const RouterClusterRole = "warmroute-router"

// routerLeaseName is the endpoint's Lease for the picker election.
func routerLeaseName(ep *v1alpha1.LLMEndpoint) string { return routerName(ep) }

// pickKeySecretName is the endpoint's pick API key Secret.
func pickKeySecretName(ep *v1alpha1.LLMEndpoint) string { return ep.Name + "-router-key" }

// buildRouterLease is the empty Lease the routers elect their picker with.
func buildRouterLease(ep *v1alpha1.LLMEndpoint) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		TypeMeta:   metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
		ObjectMeta: objectMeta(ep, routerLeaseName(ep), roleRouter, "warmroute-router"),
	}
}

// buildPickKeySecret is a new pick key Secret with a random key.
func buildPickKeySecret(ep *v1alpha1.LLMEndpoint) (*corev1.Secret, error) {
	key := make([]byte, pickKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generate pick key: %w", err)
	}
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: objectMeta(ep, pickKeySecretName(ep), roleRouter, "warmroute-router"),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{cacheSaltKey: key},
	}, nil
}

// routerCreatedOnce are the router's objects the operator creates and then
// leaves alone: applying them again would replace a key, or fight the
// routers over their Lease.
func routerCreatedOnce(ep *v1alpha1.LLMEndpoint) ([]client.Object, error) {
	salt, err := buildCacheSaltSecret(ep)
	if err != nil {
		return nil, err
	}
	key, err := buildPickKeySecret(ep)
	if err != nil {
		return nil, err
	}
	return []client.Object{salt, key, buildRouterLease(ep)}, nil
}

// leaseRule lets the routers read their one Lease; RouterClusterRole lets
// them renew it.
func leaseRule(ep *v1alpha1.LLMEndpoint) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{
		APIGroups:     []string{"coordination.k8s.io"},
		Resources:     []string{"leases"},
		ResourceNames: []string{routerLeaseName(ep)},
		Verbs:         []string{"get"},
	}
}

// routerLeaseBindingName names the RoleBinding of RouterClusterRole to the
// endpoint's routers.
func routerLeaseBindingName(ep *v1alpha1.LLMEndpoint) string { return routerName(ep) + "-lease" }

// buildRouterLeaseBinding binds RouterClusterRole to the routers'
// ServiceAccount in the endpoint's namespace.
func buildRouterLeaseBinding(ep *v1alpha1.LLMEndpoint) *rbacv1.RoleBinding {
	rb := newRoleBinding(objectMeta(ep, routerLeaseBindingName(ep), roleRouter, "warmroute-router"))
	rb.RoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: RouterClusterRole}
	rb.Subjects[0].Name = routerName(ep)
	return rb
}

// routerPicker is what the router Deployment needs for the election: the
// flags, the key Secret's volume and its mount.
func routerPicker(ep *v1alpha1.LLMEndpoint) ([]string, corev1.Volume, corev1.VolumeMount) {
	args := []string{
		"--lease=" + ep.Namespace + "/" + routerLeaseName(ep),
		"--pick-listen=:" + strconv.Itoa(routerPickPort),
		"--pick-key-file=" + routerPickKeyDir + "/" + cacheSaltKey,
	}
	return args, secretVolume("pick-key", pickKeySecretName(ep)),
		corev1.VolumeMount{Name: "pick-key", MountPath: routerPickKeyDir, ReadOnly: true}
}

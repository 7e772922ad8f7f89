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
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

func TestBuildRouterDeployment(t *testing.T) {
	tests := []struct {
		name         string
		ep           *v1alpha1.LLMEndpoint
		wantReplicas int32
		wantImage    string
		wantCPU      string
	}{
		{"defaults", newEndpoint(), 2, "router:test", "100m"},
		{"from the spec", newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Router.Replicas = ptr.To[int32](3)
			ep.Spec.Router.Image = "my/router:2"
			ep.Spec.Router.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
		}), 3, "my/router:2", "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := buildRouterDeployment(tt.ep, testOptions)
			if d.Name != routerName(tt.ep) || *d.Spec.Replicas != tt.wantReplicas {
				t.Errorf("%s replicas %d, want %s with %d", d.Name, *d.Spec.Replicas, routerName(tt.ep), tt.wantReplicas)
			}
			ps := d.Spec.Template.Spec
			c := ps.Containers[0]
			if c.Image != tt.wantImage {
				t.Errorf("image = %q, want %q", c.Image, tt.wantImage)
			}
			if q := c.Resources.Requests[corev1.ResourceCPU]; q.String() != tt.wantCPU {
				t.Errorf("CPU request = %s, want %s", q.String(), tt.wantCPU)
			}
			wantArgs := []string{"--config-dir=/etc/warmroute/routing", "--listen=:8080", "--metrics-listen=:9090", "--configmap=team/" + routingConfigMapName(tt.ep), "--drain-delay=5s", "--shutdown-timeout=60s",
				"--lease=team/" + routerLeaseName(tt.ep), "--pick-listen=:9091", "--pick-key-file=/etc/warmroute/pick-key/key", "--cache-salt-key-file=/etc/warmroute/cache-salt/key"}
			if diff := cmp.Diff(wantArgs, c.Args); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
			// The replica's name and address, for the Lease.
			wantEnv := map[string]string{"POD_NAME": "metadata.name", "POD_IP": "status.podIP"}
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && wantEnv[e.Name] == e.ValueFrom.FieldRef.FieldPath {
					delete(wantEnv, e.Name)
				}
			}
			if len(wantEnv) != 0 {
				t.Errorf("downward API env missing: %v (env %+v)", wantEnv, c.Env)
			}
			// The routing ConfigMap, the pick key Secret, then the cache
			// salt Secret (TestRouterTenancy), each a directory, never a
			// subPath.
			if len(c.VolumeMounts) != 3 || c.VolumeMounts[0].MountPath != routerConfigDir || c.VolumeMounts[0].SubPath != "" ||
				c.VolumeMounts[1].MountPath != routerPickKeyDir || c.VolumeMounts[1].SubPath != "" {
				t.Errorf("mounts %+v: want the routing and pick key directories, never a subPath", c.VolumeMounts)
			}
			if len(ps.Volumes) != 3 || ps.Volumes[0].ConfigMap == nil || ps.Volumes[0].ConfigMap.Name != routingConfigMapName(tt.ep) ||
				ps.Volumes[1].Secret == nil || ps.Volumes[1].Secret.SecretName != pickKeySecretName(tt.ep) {
				t.Errorf("volumes %+v", ps.Volumes)
			}
			if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "pick" && p.ContainerPort == routerPickPort }) {
				t.Errorf("ports %+v: no pick port", c.Ports)
			}
			if ps.ServiceAccountName != routerName(tt.ep) {
				t.Errorf("service account %q", ps.ServiceAccountName)
			}
			if len(d.Spec.Template.Annotations) != 0 {
				t.Errorf("template annotations %v: a backend change must not restart the routers", d.Spec.Template.Annotations)
			}
			if c.ReadinessProbe == nil || c.LivenessProbe == nil {
				t.Error("router probes missing")
			}
			if !ptr.Deref(c.SecurityContext.ReadOnlyRootFilesystem, false) {
				t.Error("router root filesystem is writable")
			}
			checkRestricted(t, ps, c)
			if metav1.GetControllerOf(d) == nil {
				t.Error("no controller reference")
			}
		})
	}
}

func TestBuildRouterRBAC(t *testing.T) {
	ep := newEndpoint()
	sa, role, rb := buildRouterServiceAccount(ep), buildRouterRole(ep), buildRouterRoleBinding(ep)
	wantRules := []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{routingConfigMapName(ep)}, Verbs: []string{"get", "list", "watch"},
	}, {
		// The one Lease, read; the operator creates it, and the binding
		// below lets the routers renew it.
		APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{routerLeaseName(ep)}, Verbs: []string{"get"},
	}}
	if diff := cmp.Diff(wantRules, role.Rules); diff != "" {
		t.Errorf("role rules (-want +got):\n%s", diff)
	}
	if rb.RoleRef.Name != role.Name || rb.RoleRef.Kind != "Role" {
		t.Errorf("roleRef %+v", rb.RoleRef)
	}
	if len(rb.Subjects) != 1 || rb.Subjects[0].Name != sa.Name || rb.Subjects[0].Namespace != "team" {
		t.Errorf("subjects %+v, want the ServiceAccount %s", rb.Subjects, sa.Name)
	}
	lease := buildRouterLeaseBinding(ep)
	if want := (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: RouterClusterRole}); lease.RoleRef != want {
		t.Errorf("lease binding roleRef %+v, want %+v", lease.RoleRef, want)
	}
	if len(lease.Subjects) != 1 || lease.Subjects[0].Name != sa.Name || lease.Subjects[0].Namespace != "team" {
		t.Errorf("lease binding subjects %+v, want the ServiceAccount %s", lease.Subjects, sa.Name)
	}
	if lease.Name == rb.Name {
		t.Errorf("the lease binding takes the Role binding's name %s", rb.Name)
	}
	for _, obj := range []metav1.Object{sa, role, rb, lease} {
		if metav1.GetControllerOf(obj) == nil {
			t.Errorf("%s has no controller reference", obj.GetName())
		}
	}
}

func TestBuildRouterService(t *testing.T) {
	tests := []struct {
		name     string
		ep       *v1alpha1.LLMEndpoint
		wantType corev1.ServiceType
		wantPort int32
		wantURL  string
	}{
		{"defaults", newEndpoint(), corev1.ServiceTypeClusterIP, 80, "http://chat.team.svc"},
		{"load balancer on 8000", newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Router.ServiceType = corev1.ServiceTypeLoadBalancer
			ep.Spec.Router.Port = ptr.To[int32](8000)
		}), corev1.ServiceTypeLoadBalancer, 8000, "http://chat.team.svc:8000"},
		{"unset", newEndpoint(func(ep *v1alpha1.LLMEndpoint) { ep.Spec.Router = v1alpha1.RouterSpec{} }),
			corev1.ServiceTypeClusterIP, 80, "http://chat.team.svc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := buildRouterService(tt.ep)
			if svc.Name != routerServiceName(tt.ep) || svc.Spec.Type != tt.wantType || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != tt.wantPort || svc.Spec.Ports[0].TargetPort.StrVal != "http" {
				t.Errorf("service %s %s %+v", svc.Name, svc.Spec.Type, svc.Spec.Ports)
			}
			if diff := cmp.Diff(selectorLabels(tt.ep, roleRouter), svc.Spec.Selector); diff != "" {
				t.Errorf("selector (-want +got):\n%s", diff)
			}
			if got := endpointURL(tt.ep); got != tt.wantURL {
				t.Errorf("endpoint URL = %q, want %q", got, tt.wantURL)
			}
		})
	}
}

func TestRouterMemoryLimitAndGOMEMLIMIT(t *testing.T) {
	for _, tc := range []struct {
		name      string
		resources *corev1.ResourceRequirements
		wantLimit string
		wantEnv   []corev1.EnvVar
	}{
		{"defaults", nil, "1Gi", []corev1.EnvVar{{Name: "GOMEMLIMIT", Value: "966367638"}}},
		{"user limit", &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}},
			"2Gi", []corev1.EnvVar{{Name: "GOMEMLIMIT", Value: "1932735276"}}},
		{"user resources without a limit", &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
			"0", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := newEndpoint(func(ep *v1alpha1.LLMEndpoint) { ep.Spec.Router.Resources = tc.resources })
			c := buildRouterDeployment(ep, testOptions).Spec.Template.Spec.Containers[0]
			if q := c.Resources.Limits[corev1.ResourceMemory]; q.String() != tc.wantLimit {
				t.Errorf("memory limit %s, want %s", q.String(), tc.wantLimit)
			}
			want := append([]corev1.EnvVar{fieldEnv("POD_NAME", "metadata.name"), fieldEnv("POD_IP", "status.podIP")}, tc.wantEnv...)
			if diff := cmp.Diff(want, c.Env); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
		})
	}
}

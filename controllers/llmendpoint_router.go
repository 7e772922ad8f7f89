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
	"context"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// The router's interface (sidecar/cmd/router): flags, ports, and the
// health endpoints on its metrics listener.
const (
	routerHTTPPort      = 8080
	routerMetricsPort   = 9090
	routerConfigDir     = "/etc/warmroute/routing"
	routerHealthPath    = "/healthz"
	routerReadinessPath = "/readyz"
	defaultServicePort  = 80
)

// After SIGTERM the router keeps serving (not ready, closing connections
// after each response) for routerDrainSeconds while Service endpoints catch
// up, then gives in-flight requests and streams routerShutdownSeconds.
const (
	routerDrainSeconds    = 5
	routerShutdownSeconds = 60
)

func servicePort(ep *v1alpha1.LLMEndpoint) int32 {
	return ptr.Deref(ep.Spec.Router.Port, defaultServicePort)
}

// endpointURL is the in-cluster URL of the client-facing Service; empty in
// mode InferencePool, which has none.
func endpointURL(ep *v1alpha1.LLMEndpoint) string {
	if inferencePoolMode(ep) {
		return ""
	}
	url := "http://" + routerServiceName(ep) + "." + ep.Namespace + ".svc"
	if p := servicePort(ep); p != 80 {
		url += ":" + strconv.Itoa(int(p))
	}
	return url
}

// buildRouterServiceAccount is the identity of the router pods.
func buildRouterServiceAccount(ep *v1alpha1.LLMEndpoint) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: objectMeta(ep, routerName(ep), roleRouter, "warmroute-router"),
	}
}

// buildRouterRole lets the routers read their one ConfigMap through the
// API (a watch reloads faster than the kubelet refreshes a mounted volume)
// and their one Lease (buildRouterLeaseBinding lets them renew it).
func buildRouterRole(ep *v1alpha1.LLMEndpoint) *rbacv1.Role {
	return newRole(objectMeta(ep, routerName(ep), roleRouter, "warmroute-router"), readRoutingConfigMap(ep), leaseRule(ep))
}

// buildRouterRoleBinding grants the router Role to the router's
// ServiceAccount.
func buildRouterRoleBinding(ep *v1alpha1.LLMEndpoint) *rbacv1.RoleBinding {
	return newRoleBinding(objectMeta(ep, routerName(ep), roleRouter, "warmroute-router"))
}

// readRoutingConfigMap lets a pod read the endpoint's routing ConfigMap
// through the API. List and watch are limited by name too, so the client
// must list and watch with a metadata.name field selector.
func readRoutingConfigMap(ep *v1alpha1.LLMEndpoint) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{
		APIGroups:     []string{""},
		Resources:     []string{"configmaps"},
		ResourceNames: []string{routingConfigMapName(ep)},
		Verbs:         []string{"get", "list", "watch"},
	}
}

// newRole is a Role with the given rules.
func newRole(meta metav1.ObjectMeta, rules ...rbacv1.PolicyRule) *rbacv1.Role {
	return &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
		ObjectMeta: meta,
		Rules:      rules,
	}
}

// newRoleBinding grants the Role named meta.Name to the ServiceAccount of
// the same name: each of the operator's identities has a Role of its own.
func newRoleBinding(meta metav1.ObjectMeta) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: meta,
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: meta.Name},
		Subjects: []rbacv1.Subject{{
			Kind: rbacv1.ServiceAccountKind, Name: meta.Name, Namespace: meta.Namespace,
		}},
	}
}

// buildRouterDeployment is the Deployment of the routers. Its pod template
// depends on the spec only, never on the instances: a backend change
// reaches the routers through the ConfigMap without restarting them.
func buildRouterDeployment(ep *v1alpha1.LLMEndpoint, opts Options) *appsv1.Deployment {
	spec := ep.Spec.Router
	image := spec.Image
	if image == "" {
		image = opts.RouterImage
	}
	resources := defaultRouterResources()
	if spec.Resources != nil {
		resources = *spec.Resources.DeepCopy()
	}
	tenancyArgs, tenancyVolumes, tenancyMounts, tenancyEnv := routerTenancy(ep)
	pickArgs, pickVolume, pickMount := routerPicker(ep)
	frontArgs, frontPort := routerFrontDoor(ep)
	eppArgs, eppVolumes, eppMounts := routerEPPTLS(ep)
	frontArgs = append(frontArgs, eppArgs...)
	container := corev1.Container{
		Name:  "router",
		Image: image,
		Args: append(append(append([]string{"--config-dir=" + routerConfigDir}, frontArgs...),
			"--metrics-listen=:"+strconv.Itoa(routerMetricsPort),
			"--configmap="+ep.Namespace+"/"+routingConfigMapName(ep),
			"--drain-delay="+strconv.Itoa(routerDrainSeconds)+"s",
			"--shutdown-timeout="+strconv.Itoa(routerShutdownSeconds)+"s",
		), append(pickArgs, tenancyArgs...)...),
		Ports: []corev1.ContainerPort{
			frontPort,
			{Name: "metrics", ContainerPort: routerMetricsPort, Protocol: corev1.ProtocolTCP},
			{Name: "pick", ContainerPort: routerPickPort, Protocol: corev1.ProtocolTCP},
		},
		Resources: resources,
		Env:       append(routerEnv(resources), tenancyEnv...),
		// A directory mount, never subPath: the kubelet updates only
		// directory mounts when the ConfigMap changes.
		VolumeMounts: append([]corev1.VolumeMount{{
			Name: "routing", MountPath: routerConfigDir, ReadOnly: true,
		}, pickMount}, append(tenancyMounts, eppMounts...)...),
		ReadinessProbe:           httpProbe(routerReadinessPath, "metrics", 5, 2),
		LivenessProbe:            httpProbe(routerHealthPath, "metrics", 10, 3),
		SecurityContext:          readOnlyRootSecurityContext(),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	return newDeployment(ep, routerName(ep), roleRouter, "warmroute-router", v1alpha1.RouterReplicas(ep), corev1.PodSpec{
		ServiceAccountName: routerName(ep),
		// Room for the drain delay and for the longest streams to finish
		// before the kubelet kills it.
		TerminationGracePeriodSeconds: ptr.To(int64(routerDrainSeconds + routerShutdownSeconds + 10)),
		AutomountServiceAccountToken:  ptr.To(true),
		Containers:                    []corev1.Container{container},
		Volumes:                       append([]corev1.Volume{routingConfigMapVolume(ep), pickVolume}, append(tenancyVolumes, eppVolumes...)...),
		SecurityContext:               restrictedPodSecurityContext(nil),
	})
}

// defaultRouterResources bound a router that spec.router.resources leaves
// unbounded. The memory limit matters most: the router derives its request
// buffer budget from it (half), and GOMEMLIMIT follows it, so a burst of
// large uploads meets 503s instead of the OOM killer.
func defaultRouterResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("100m"),
			corev1.ResourceMemory: resource.MustParse("128Mi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("2"),
			corev1.ResourceMemory: resource.MustParse("1Gi"),
		},
	}
}

// routerEnv names the replica to the election (POD_NAME, POD_IP) and sets
// GOMEMLIMIT to 90% of the container's memory limit, so the
// Go runtime collects harder as it nears the limit rather than being
// killed at it; the rest is room for memory the runtime does not count.
func routerEnv(res corev1.ResourceRequirements) []corev1.EnvVar {
	// The pod's own name and address go into the Lease, where the other
	// replicas find the picker.
	env := []corev1.EnvVar{fieldEnv("POD_NAME", "metadata.name"), fieldEnv("POD_IP", "status.podIP")}
	limit, ok := res.Limits[corev1.ResourceMemory]
	if !ok || limit.Value() <= 0 {
		return env
	}
	return append(env, corev1.EnvVar{Name: "GOMEMLIMIT", Value: strconv.FormatInt(limit.Value()/10*9, 10)})
}

// routerFrontDoor is what the routers serve their clients: in mode
// Standalone the proxy on the http port; in mode InferencePool the
// Endpoint Picker Protocol on the epp port, and no proxy (--listen empty),
// since the Gateway sends requests to the instances itself.
func routerFrontDoor(ep *v1alpha1.LLMEndpoint) ([]string, corev1.ContainerPort) {
	if inferencePoolMode(ep) {
		return []string{"--listen=", "--epp-listen=:" + strconv.Itoa(routerEPPPort)},
			corev1.ContainerPort{Name: "epp", ContainerPort: routerEPPPort, Protocol: corev1.ProtocolTCP}
	}
	return []string{"--listen=:" + strconv.Itoa(routerHTTPPort)},
		corev1.ContainerPort{Name: "http", ContainerPort: routerHTTPPort, Protocol: corev1.ProtocolTCP}
}

// routerFrontPort is the port routerFrontDoor serves clients on.
func routerFrontPort(ep *v1alpha1.LLMEndpoint) int {
	_, port := routerFrontDoor(ep)
	return int(port.ContainerPort)
}

// buildRouterService is the client-facing Service; its URL is
// status.endpoint. In mode InferencePool the picker Service stands in its
// place.
func buildRouterService(ep *v1alpha1.LLMEndpoint) *corev1.Service {
	if inferencePoolMode(ep) {
		return buildPickerService(ep)
	}
	svcType := ep.Spec.Router.ServiceType
	if svcType == "" {
		svcType = corev1.ServiceTypeClusterIP
	}
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: objectMeta(ep, routerServiceName(ep), roleRouter, "warmroute-router"),
		Spec: corev1.ServiceSpec{
			Type:     svcType,
			Selector: selectorLabels(ep, roleRouter),
			Ports: []corev1.ServicePort{{
				Name: "http", Port: servicePort(ep), TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP,
			}},
		},
	}
}

// reconcileRouter creates the cache salt and pick key Secrets and the
// Lease, then applies the router's ServiceAccount, Role, RoleBindings,
// Deployment and Service, in the order the pods need them.
func (r *LLMEndpointReconciler) reconcileRouter(ctx context.Context, ep *v1alpha1.LLMEndpoint) error {
	if err := r.reconcileCreatedOnce(ctx, ep); err != nil {
		return err
	}
	return r.applyInOrder(ctx, ep,
		buildRouterServiceAccount(ep),
		buildRouterRole(ep),
		buildRouterRoleBinding(ep),
		buildRouterLeaseBinding(ep),
		buildRouterDeployment(ep, r.Options),
		buildRouterService(ep),
	)
}

// fieldEnv passes a pod field through the downward API (APIVersion set as
// the API server defaults it, so applying it again changes nothing).
func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}}
}

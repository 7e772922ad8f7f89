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

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"

	semver "github.com/blang/semver/v4"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	"github.com/warmroute/warmroute/hack/manifests"
)

// Options say what to build the bundle as.
type Options struct {
	// Package is the OLM package name.
	Package string
	// Version is the operator's semantic version, without a leading v.
	Version string
	// Image is the operator image; it replaces the manager container's.
	Image string
	// RelatedImages replace the values of the manager's RELATED_IMAGE_<key>
	// variables, the operands' images; each key must exist.
	RelatedImages map[string]string
	// Channels and DefaultChannel are the bundle's update channels.
	Channels       []string
	DefaultChannel string
	// Replaces is the CSV this version upgrades from, if any.
	Replaces string
	// OpenShiftVersions is the com.redhat.openshift.versions range.
	OpenShiftVersions string
}

// File is one generated file, by its path relative to the repository.
type File = manifests.File

// certSecretVolume is the cert-manager Secret the default overlay mounts
// for the webhook server; under OLM, OLM mounts its own certificate there.
const certSecretVolume = "webhook-server-cert"

// apiServiceCertSecret is the cert-manager Secret the default overlay
// mounts for the custom metrics API (config/metricsapi); under OLM, OLM
// mounts the certificate it issues for an owned API service there.
const apiServiceCertSecret = "custom-metrics-server-cert"

// Roles every aggregated API server is bound to, which OLM binds itself
// for an owned API service (and which the bundle could not ship: they are
// the cluster's, not the operator's).
const (
	authDelegatorRole = "system:auth-delegator"
	authReaderRole    = "extension-apiserver-authentication-reader"
)

// Build turns the output of `kustomize build config/manifests` into the
// bundle's files. Every kind in the input must be accounted for: an object
// the bundle would silently drop is an error.
func Build(manifestStream io.Reader, opts Options) ([]File, error) {
	objs, err := manifests.DecodeAll(manifestStream)
	if err != nil {
		return nil, err
	}
	v, err := semver.Parse(opts.Version)
	if err != nil {
		return nil, fmt.Errorf("version %q: %w", opts.Version, err)
	}
	b := &builder{opts: opts, version: v, byKind: map[string][]*unstructured.Unstructured{}}
	for _, o := range objs {
		manifests.DropKustomizeManagedBy(o)
		b.byKind[o.GetKind()] = append(b.byKind[o.GetKind()], o)
	}
	return b.build()
}

type builder struct {
	opts    Options
	version semver.Version
	byKind  map[string][]*unstructured.Unstructured
	files   []File
}

// handled lists the kinds the bundle uses; the builder takes them from
// byKind as it goes, and what is left at the end is an error.
func (b *builder) take(kind string) []*unstructured.Unstructured {
	objs := b.byKind[kind]
	delete(b.byKind, kind)
	return objs
}

func (b *builder) build() ([]File, error) {
	csvs := b.take("ClusterServiceVersion")
	if len(csvs) != 1 {
		return nil, fmt.Errorf("want one ClusterServiceVersion base, found %d", len(csvs))
	}
	csv := &operatorsv1alpha1.ClusterServiceVersion{}
	if err := fromUnstructured(csvs[0], csv); err != nil {
		return nil, fmt.Errorf("ClusterServiceVersion base: %w", err)
	}

	// OLM creates the namespace, the ServiceAccounts named in the
	// permissions, the webhook Services and the webhook certificates.
	b.take("Namespace")
	b.take("ServiceAccount")
	b.take("Certificate")
	b.take("Issuer")

	deployments, err := b.deployments()
	if err != nil {
		return nil, err
	}
	apiServices, err := b.apiServices(deployments)
	if err != nil {
		return nil, err
	}
	webhookSvcs, err := b.services()
	if err != nil {
		return nil, err
	}
	permissions, clusterPermissions, err := b.permissions()
	if err != nil {
		return nil, err
	}
	webhooks, err := b.webhooks(deployments, webhookSvcs)
	if err != nil {
		return nil, err
	}
	if err := b.crds(csv); err != nil {
		return nil, err
	}
	examples, err := b.examples()
	if err != nil {
		return nil, err
	}
	if err := b.scorecard(); err != nil {
		return nil, err
	}
	for _, kind := range []string{"ServiceMonitor", "PodMonitor", "PrometheusRule"} {
		for _, o := range b.take(kind) {
			if err := b.addManifest(o); err != nil {
				return nil, err
			}
		}
	}
	if len(b.byKind) > 0 {
		left := make([]string, 0, len(b.byKind))
		for k := range b.byKind {
			left = append(left, k)
		}
		sort.Strings(left)
		return nil, fmt.Errorf("the bundle has no place for objects of kind %s", strings.Join(left, ", "))
	}

	b.fillCSV(csv, deployments, permissions, clusterPermissions, webhooks, examples)
	csv.Spec.APIServiceDefinitions.Owned = apiServices
	if err := b.addCSV(csv); err != nil {
		return nil, err
	}
	b.addMetadata()
	sort.Slice(b.files, func(i, j int) bool { return b.files[i].Path < b.files[j].Path })
	return b.files, nil
}

// deployments are the operator's Deployments, as the CSV installs them.
func (b *builder) deployments() ([]operatorsv1alpha1.StrategyDeploymentSpec, error) {
	var out []operatorsv1alpha1.StrategyDeploymentSpec
	for _, o := range b.take("Deployment") {
		d := &appsv1.Deployment{}
		if err := fromUnstructured(o, d); err != nil {
			return nil, fmt.Errorf("Deployment %s: %w", o.GetName(), err)
		}
		dropCertSecret(&d.Spec.Template.Spec)
		for i := range d.Spec.Template.Spec.Containers {
			if c := &d.Spec.Template.Spec.Containers[i]; c.Name == "manager" {
				if b.opts.Image != "" {
					c.Image = b.opts.Image
				}
				if err := setRelatedImages(c, b.opts.RelatedImages); err != nil {
					return nil, fmt.Errorf("Deployment %s: %w", d.Name, err)
				}
				if err := watchTargetNamespaces(c); err != nil {
					return nil, fmt.Errorf("Deployment %s: %w", d.Name, err)
				}
			}
		}
		out = append(out, operatorsv1alpha1.StrategyDeploymentSpec{
			Name:  d.Name,
			Label: d.Labels,
			Spec:  d.Spec,
		})
	}
	if len(out) == 0 {
		return nil, errors.New("no Deployment for the install strategy")
	}
	return out, nil
}

// setRelatedImages sets the container's RELATED_IMAGE_* variables.
func setRelatedImages(c *corev1.Container, images map[string]string) error {
	left := maps.Clone(images)
	for i := range c.Env {
		if name, ok := strings.CutPrefix(c.Env[i].Name, "RELATED_IMAGE_"); ok {
			if image, ok := left[name]; ok {
				c.Env[i].Value = image
				delete(left, name)
			}
		}
	}
	for name := range left {
		return fmt.Errorf("container %s has no variable RELATED_IMAGE_%s", c.Name, name)
	}
	return nil
}

// watchTargetNamespaces fills WATCH_NAMESPACE from the annotation OLM
// writes on the operator's pods: the OperatorGroup's target namespaces,
// comma-separated, empty in the AllNamespaces mode.
func watchTargetNamespaces(c *corev1.Container) error {
	for i := range c.Env {
		if c.Env[i].Name == "WATCH_NAMESPACE" {
			c.Env[i].Value = ""
			c.Env[i].ValueFrom = &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['olm.targetNamespaces']"}}
			return nil
		}
	}
	return fmt.Errorf("container %s has no variable WATCH_NAMESPACE", c.Name)
}

// dropCertSecret removes the cert-manager certificate volume and its
// mounts: OLM mounts the certificate it issues at the same path, and two
// mounts there would make the pod invalid.
func dropCertSecret(spec *corev1.PodSpec) {
	var names []string
	spec.Volumes = slices.DeleteFunc(spec.Volumes, func(v corev1.Volume) bool {
		if v.Secret != nil && (v.Secret.SecretName == certSecretVolume || v.Secret.SecretName == apiServiceCertSecret) {
			names = append(names, v.Name)
			return true
		}
		return false
	})
	for i := range spec.Containers {
		c := &spec.Containers[i]
		c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return slices.Contains(names, m.Name)
		})
	}
}

// apiServices turns the APIServices into the CSV's owned API service
// definitions. OLM creates each APIService, its Service, its certificate
// (mounted in /apiserver.local.config/certificates) and the
// authentication bindings, so those are taken out of the manifests.
func (b *builder) apiServices(deployments []operatorsv1alpha1.StrategyDeploymentSpec) ([]operatorsv1alpha1.APIServiceDescription, error) {
	var out []operatorsv1alpha1.APIServiceDescription
	for _, o := range b.take("APIService") {
		api := &apiregistrationv1.APIService{}
		if err := fromUnstructured(o, api); err != nil {
			return nil, fmt.Errorf("APIService %s: %w", o.GetName(), err)
		}
		if api.Spec.Service == nil {
			return nil, fmt.Errorf("APIService %s is served by no Service: OLM owns only aggregated ones", api.Name)
		}
		var svc *corev1.Service
		b.byKind["Service"] = slices.DeleteFunc(b.byKind["Service"], func(u *unstructured.Unstructured) bool {
			if u.GetName() != api.Spec.Service.Name {
				return false
			}
			svc = &corev1.Service{}
			return fromUnstructured(u, svc) == nil
		})
		if svc == nil {
			return nil, fmt.Errorf("APIService %s: Service %s is not in the input", api.Name, api.Spec.Service.Name)
		}
		deployment, _, target, err := backingDeployment(svc, api.Spec.Service.Port, deployments)
		if err != nil {
			return nil, fmt.Errorf("APIService %s: %w", api.Name, err)
		}
		desc, ok := ownedAPIServices[api.Spec.Group]
		if !ok {
			return nil, fmt.Errorf("APIService %s: no description for group %s", api.Name, api.Spec.Group)
		}
		desc.Group, desc.Version = api.Spec.Group, api.Spec.Version
		desc.DeploymentName, desc.ContainerPort = deployment, target.IntVal
		out = append(out, desc)
	}
	if len(out) > 0 {
		b.byKind["ClusterRoleBinding"] = slices.DeleteFunc(b.byKind["ClusterRoleBinding"], func(u *unstructured.Unstructured) bool {
			name, _, _ := unstructured.NestedString(u.Object, "roleRef", "name")
			return name == authDelegatorRole
		})
		b.byKind["RoleBinding"] = slices.DeleteFunc(b.byKind["RoleBinding"], func(u *unstructured.Unstructured) bool {
			name, _, _ := unstructured.NestedString(u.Object, "roleRef", "name")
			return name == authReaderRole
		})
	}
	return out, nil
}

// ownedAPIServices describe, by group, the API services the operator
// serves; kind and name are those of the group's resources as OLM's
// console lists them.
var ownedAPIServices = map[string]operatorsv1alpha1.APIServiceDescription{
	"custom.metrics.k8s.io": {
		Name:        "custommetrics",
		Kind:        "MetricValueList",
		DisplayName: "LLMEndpoint load metrics",
		Description: "Custom metrics API for LLMEndpoints (in-flight and waiting requests per instance, prefix-cache hit ratio), for HorizontalPodAutoscalers with an Object metric.",
	},
}

// services keeps the Services that are not behind a webhook as bundle
// manifests (the metrics Service) and returns the webhook Services, which
// OLM replaces with its own, by name.
func (b *builder) services() (map[string]*corev1.Service, error) {
	webhookSvcNames := map[string]bool{}
	for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		for _, o := range b.byKind[kind] {
			hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
			for _, h := range hooks {
				if name, ok, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "service", "name"); ok {
					webhookSvcNames[name] = true
				}
			}
		}
	}
	out := map[string]*corev1.Service{}
	for _, o := range b.take("Service") {
		if webhookSvcNames[o.GetName()] {
			s := &corev1.Service{}
			if err := fromUnstructured(o, s); err != nil {
				return nil, fmt.Errorf("Service %s: %w", o.GetName(), err)
			}
			out[s.Name] = s
			continue
		}
		if err := b.addManifest(o); err != nil {
			return nil, err
		}
	}
	return out, nil
}

const (
	scopeAnnotation = "warmroute.dev/scope"
	scopeWatched    = "watched-namespaces"
)

// permissions turns the roles bound to the operator's ServiceAccounts into
// the CSV's permissions and clusterPermissions; roles bound to no
// ServiceAccount of the operator (for users or scrapers) stay manifests.
func (b *builder) permissions() (perms, clusterPerms []operatorsv1alpha1.StrategyDeploymentPermissions, err error) {
	roles := map[string]*rbacv1.Role{}
	for _, o := range b.take("Role") {
		r := &rbacv1.Role{}
		if err := fromUnstructured(o, r); err != nil {
			return nil, nil, fmt.Errorf("Role %s: %w", o.GetName(), err)
		}
		roles[r.Name] = r
	}
	clusterRoles := map[string]*unstructured.Unstructured{}
	for _, o := range b.take("ClusterRole") {
		clusterRoles[o.GetName()] = o
	}
	boundCluster := map[string]bool{}
	boundNamespaced := map[string]bool{}
	var rules, clusterRules = map[string][]rbacv1.PolicyRule{}, map[string][]rbacv1.PolicyRule{}

	for _, o := range b.take("RoleBinding") {
		rb := &rbacv1.RoleBinding{}
		if err := fromUnstructured(o, rb); err != nil {
			return nil, nil, fmt.Errorf("RoleBinding %s: %w", o.GetName(), err)
		}
		for _, sa := range serviceAccounts(rb.Subjects) {
			switch rb.RoleRef.Kind {
			case "Role":
				r, ok := roles[rb.RoleRef.Name]
				if !ok {
					return nil, nil, fmt.Errorf("RoleBinding %s refers to Role %s, which is not in the input", rb.Name, rb.RoleRef.Name)
				}
				boundNamespaced[r.Name] = true
				rules[sa] = append(rules[sa], r.Rules...)
			default:
				return nil, nil, fmt.Errorf("RoleBinding %s binds a %s: OLM cannot express that", rb.Name, rb.RoleRef.Kind)
			}
		}
	}
	for _, o := range b.take("ClusterRoleBinding") {
		crb := &rbacv1.ClusterRoleBinding{}
		if err := fromUnstructured(o, crb); err != nil {
			return nil, nil, fmt.Errorf("ClusterRoleBinding %s: %w", o.GetName(), err)
		}
		cr, ok := clusterRoles[crb.RoleRef.Name]
		if !ok {
			return nil, nil, fmt.Errorf("ClusterRoleBinding %s refers to ClusterRole %s, which is not in the input", crb.Name, crb.RoleRef.Name)
		}
		role := &rbacv1.ClusterRole{}
		if err := fromUnstructured(cr, role); err != nil {
			return nil, nil, fmt.Errorf("ClusterRole %s: %w", cr.GetName(), err)
		}
		// The binding the namespaced mode grants per watched namespace
		// (config/rbac/role_binding.yaml) becomes permissions, which OLM
		// grants in each target namespace, or cluster-wide in the
		// AllNamespaces mode.
		into := clusterRules
		if crb.Annotations[scopeAnnotation] == scopeWatched {
			into = rules
		}
		for _, sa := range serviceAccounts(crb.Subjects) {
			boundCluster[role.Name] = true
			into[sa] = append(into[sa], role.Rules...)
		}
	}
	for name := range roles {
		if !boundNamespaced[name] {
			return nil, nil, fmt.Errorf("Role %s is bound to no ServiceAccount of the operator", name)
		}
	}
	names := make([]string, 0, len(clusterRoles))
	for n := range clusterRoles {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if !boundCluster[n] {
			if err := b.addManifest(clusterRoles[n]); err != nil {
				return nil, nil, err
			}
		}
	}
	return toPermissions(rules), toPermissions(clusterRules), nil
}

func serviceAccounts(subjects []rbacv1.Subject) []string {
	var out []string
	for _, s := range subjects {
		if s.Kind == rbacv1.ServiceAccountKind {
			out = append(out, s.Name)
		}
	}
	return out
}

func toPermissions(bySA map[string][]rbacv1.PolicyRule) []operatorsv1alpha1.StrategyDeploymentPermissions {
	sas := make([]string, 0, len(bySA))
	for sa := range bySA {
		sas = append(sas, sa)
	}
	sort.Strings(sas)
	var out []operatorsv1alpha1.StrategyDeploymentPermissions
	for _, sa := range sas {
		out = append(out, operatorsv1alpha1.StrategyDeploymentPermissions{ServiceAccountName: sa, Rules: bySA[sa]})
	}
	return out
}

// webhooks turns the webhook configurations into the CSV's webhook
// definitions, served by the Deployment whose pods the webhook Service
// selects, with certificates OLM issues and rotates.
func (b *builder) webhooks(deployments []operatorsv1alpha1.StrategyDeploymentSpec, svcs map[string]*corev1.Service) ([]operatorsv1alpha1.WebhookDescription, error) {
	var out []operatorsv1alpha1.WebhookDescription
	for kind, typ := range map[string]operatorsv1alpha1.WebhookAdmissionType{
		"MutatingWebhookConfiguration":   operatorsv1alpha1.MutatingAdmissionWebhook,
		"ValidatingWebhookConfiguration": operatorsv1alpha1.ValidatingAdmissionWebhook,
	} {
		for _, o := range b.take(kind) {
			// A validating webhook's fields are a mutating one's but
			// reinvocationPolicy, so one type decodes both.
			c := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := fromUnstructured(o, c); err != nil {
				return nil, fmt.Errorf("%s %s: %w", kind, o.GetName(), err)
			}
			for _, h := range c.Webhooks {
				d, err := webhookDefinition(h, typ, deployments, svcs)
				if err != nil {
					return nil, fmt.Errorf("%s %s: webhook %s: %w", kind, o.GetName(), h.Name, err)
				}
				out = append(out, d)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GenerateName < out[j].GenerateName })
	return out, nil
}

func webhookDefinition(h admissionregistrationv1.MutatingWebhook, typ operatorsv1alpha1.WebhookAdmissionType,
	deployments []operatorsv1alpha1.StrategyDeploymentSpec, svcs map[string]*corev1.Service) (operatorsv1alpha1.WebhookDescription, error) {
	var none operatorsv1alpha1.WebhookDescription
	if h.NamespaceSelector != nil {
		return none, errors.New("OLM sets the namespace selector itself")
	}
	if len(h.MatchConditions) > 0 {
		return none, errors.New("OLM's webhook definitions cannot carry matchConditions")
	}
	svcRef := h.ClientConfig.Service
	if svcRef == nil {
		return none, errors.New("no Service: OLM serves webhooks through one")
	}
	svc, ok := svcs[svcRef.Name]
	if !ok {
		return none, fmt.Errorf("Service %s is not in the input", svcRef.Name)
	}
	dep, containerPort, targetPort, err := backingDeployment(svc, svcRef.Port, deployments)
	if err != nil {
		return none, err
	}
	return operatorsv1alpha1.WebhookDescription{
		GenerateName:            h.Name,
		Type:                    typ,
		DeploymentName:          dep,
		ContainerPort:           containerPort,
		TargetPort:              targetPort,
		Rules:                   h.Rules,
		FailurePolicy:           h.FailurePolicy,
		MatchPolicy:             h.MatchPolicy,
		ObjectSelector:          h.ObjectSelector,
		SideEffects:             h.SideEffects,
		TimeoutSeconds:          h.TimeoutSeconds,
		AdmissionReviewVersions: h.AdmissionReviewVersions,
		ReinvocationPolicy:      h.ReinvocationPolicy,
		WebhookPath:             svcRef.Path,
	}, nil
}

// backingDeployment finds the Deployment a webhook Service selects and the
// Service port's container port, resolving a named target port through the
// Deployment's containers.
func backingDeployment(svc *corev1.Service, port *int32, deployments []operatorsv1alpha1.StrategyDeploymentSpec) (string, int32, *intstr.IntOrString, error) {
	var sp *corev1.ServicePort
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		if port == nil && len(svc.Spec.Ports) == 1 || port != nil && p.Port == *port {
			sp = p
		}
	}
	if sp == nil {
		return "", 0, nil, fmt.Errorf("Service %s has no port %v", svc.Name, port)
	}
	for _, d := range deployments {
		if !selects(svc.Spec.Selector, d.Spec.Template.Labels) {
			continue
		}
		target := sp.TargetPort
		if target.Type == intstr.String {
			n, ok := namedPort(d.Spec.Template.Spec.Containers, target.StrVal)
			if !ok {
				return "", 0, nil, fmt.Errorf("Deployment %s has no container port named %q", d.Name, target.StrVal)
			}
			target = intstr.FromInt32(n)
		}
		return d.Name, sp.Port, &target, nil
	}
	return "", 0, nil, fmt.Errorf("Service %s selects no Deployment", svc.Name)
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func namedPort(containers []corev1.Container, name string) (int32, bool) {
	for _, c := range containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort, true
			}
		}
	}
	return 0, false
}

// crds writes each CRD as a manifest and checks that the CSV's owned list
// names exactly the CRDs the bundle ships, in a version they serve.
func (b *builder) crds(csv *operatorsv1alpha1.ClusterServiceVersion) error {
	crds := b.take("CustomResourceDefinition")
	owned := map[string]operatorsv1alpha1.CRDDescription{}
	for _, d := range csv.Spec.CustomResourceDefinitions.Owned {
		owned[d.Name] = d
	}
	for _, crd := range crds {
		d, ok := owned[crd.GetName()]
		if !ok {
			return fmt.Errorf("CRD %s is not among the CSV base's owned CRDs", crd.GetName())
		}
		delete(owned, crd.GetName())
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		served := false
		for _, v := range versions {
			vm := v.(map[string]any)
			if vm["name"] == d.Version && vm["served"] == true {
				served = true
			}
		}
		if !served {
			return fmt.Errorf("CSV base owns %s at version %s, which the CRD does not serve", d.Name, d.Version)
		}
		if err := b.addManifest(crd); err != nil {
			return err
		}
	}
	for name := range owned {
		return fmt.Errorf("CSV base owns CRD %s, which is not in the input", name)
	}
	return nil
}

// examples are the samples as alm-examples: a JSON array, ordered by kind
// and name, without the fields kustomize or a cluster would add.
func (b *builder) examples() (string, error) {
	var samples []*unstructured.Unstructured
	for kind, objs := range b.byKind {
		if len(objs) > 0 && strings.HasSuffix(objs[0].GroupVersionKind().Group, ".warmroute.dev") {
			samples = append(samples, b.take(kind)...)
		}
	}
	sort.Slice(samples, func(i, j int) bool {
		if samples[i].GetKind() != samples[j].GetKind() {
			return samples[i].GetKind() < samples[j].GetKind()
		}
		return samples[i].GetName() < samples[j].GetName()
	})
	list := make([]map[string]any, 0, len(samples))
	for _, s := range samples {
		o := s.DeepCopy()
		unstructured.RemoveNestedField(o.Object, "metadata", "namespace")
		list = append(list, o.Object)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(list); err != nil {
		return "", fmt.Errorf("alm-examples: %w", err)
	}
	return strings.TrimSpace(buf.String()), nil
}

// scorecard writes the scorecard Configuration.
func (b *builder) scorecard() error {
	cfgs := b.take("Configuration")
	if len(cfgs) != 1 {
		return fmt.Errorf("want one scorecard Configuration, found %d", len(cfgs))
	}
	out, err := manifests.Marshal(cfgs[0].Object)
	if err != nil {
		return err
	}
	b.files = append(b.files, File{Path: "bundle/tests/scorecard/config.yaml", Content: out})
	return nil
}

// fillCSV completes the CSV base with what the manifests determine.
func (b *builder) fillCSV(csv *operatorsv1alpha1.ClusterServiceVersion, deployments []operatorsv1alpha1.StrategyDeploymentSpec,
	perms, clusterPerms []operatorsv1alpha1.StrategyDeploymentPermissions, webhooks []operatorsv1alpha1.WebhookDescription, examples string) {
	csv.Name = b.opts.Package + ".v" + b.opts.Version
	csv.Namespace = ""
	if csv.Annotations == nil {
		csv.Annotations = map[string]string{}
	}
	csv.Annotations["alm-examples"] = examples
	if b.opts.Image != "" {
		csv.Annotations["containerImage"] = b.opts.Image
	}
	csv.Spec.Version.Version = b.version
	csv.Spec.Replaces = b.opts.Replaces
	csv.Spec.InstallStrategy = operatorsv1alpha1.NamedInstallStrategy{
		StrategyName: operatorsv1alpha1.InstallStrategyNameDeployment,
		StrategySpec: operatorsv1alpha1.StrategyDetailsDeployment{
			DeploymentSpecs:    deployments,
			Permissions:        perms,
			ClusterPermissions: clusterPerms,
		},
	}
	csv.Spec.WebhookDefinitions = webhooks
	csv.Spec.RelatedImages = relatedImages(deployments)
}

// relatedImages are every container image of the Deployments and every
// RELATED_IMAGE_* variable (the operands' images), named after the
// container or the variable, so that mirroring for a disconnected cluster
// takes them all.
func relatedImages(deployments []operatorsv1alpha1.StrategyDeploymentSpec) []operatorsv1alpha1.RelatedImage {
	seen := map[string]bool{}
	var out []operatorsv1alpha1.RelatedImage
	add := func(name, image string) {
		if image == "" || seen[image] {
			return
		}
		seen[image] = true
		out = append(out, operatorsv1alpha1.RelatedImage{Name: name, Image: image})
	}
	for _, d := range deployments {
		for _, c := range append(slices.Clone(d.Spec.Template.Spec.InitContainers), d.Spec.Template.Spec.Containers...) {
			add(c.Name, c.Image)
			for _, e := range c.Env {
				if suffix, ok := strings.CutPrefix(e.Name, "RELATED_IMAGE_"); ok {
					add(strings.ReplaceAll(strings.ToLower(suffix), "_", "-"), e.Value)
				}
			}
		}
	}
	return out
}

func (b *builder) addCSV(csv *operatorsv1alpha1.ClusterServiceVersion) error {
	raw, err := json.Marshal(csv)
	if err != nil {
		return fmt.Errorf("ClusterServiceVersion: %w", err)
	}
	var u map[string]any
	if err := json.Unmarshal(raw, &u); err != nil {
		return fmt.Errorf("ClusterServiceVersion: %w", err)
	}
	delete(u, "status")
	if c, ok := u["spec"].(map[string]any)["cleanup"].(map[string]any); ok && c["enabled"] == false {
		delete(u["spec"].(map[string]any), "cleanup")
	}
	out, err := manifests.Marshal(u)
	if err != nil {
		return err
	}
	b.files = append(b.files, File{Path: "bundle/manifests/" + b.opts.Package + ".clusterserviceversion.yaml", Content: out})
	return nil
}

// addManifest writes an object to bundle/manifests under operator-sdk's
// file naming, <name>_<group>_<version>_<kind>.yaml (CRDs by their name).
func (b *builder) addManifest(o *unstructured.Unstructured) error {
	o = o.DeepCopy()
	unstructured.RemoveNestedField(o.Object, "metadata", "namespace")
	gvk := o.GroupVersionKind()
	name := o.GetName() + "_"
	if gvk.Group != "" {
		name += gvk.Group + "_"
	}
	name += gvk.Version + "_" + strings.ToLower(gvk.Kind) + ".yaml"
	if gvk.Kind == "CustomResourceDefinition" {
		group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
		plural, _, _ := unstructured.NestedString(o.Object, "spec", "names", "plural")
		name = group + "_" + plural + ".yaml"
	}
	out, err := manifests.Marshal(o.Object)
	if err != nil {
		return err
	}
	b.files = append(b.files, File{Path: "bundle/manifests/" + name, Content: out})
	return nil
}

// addMetadata writes the bundle's annotations and the Dockerfile that
// carries the same labels.
func (b *builder) addMetadata() {
	ann := [][2]string{
		{"operators.operatorframework.io.bundle.mediatype.v1", "registry+v1"},
		{"operators.operatorframework.io.bundle.manifests.v1", "manifests/"},
		{"operators.operatorframework.io.bundle.metadata.v1", "metadata/"},
		{"operators.operatorframework.io.bundle.package.v1", b.opts.Package},
		{"operators.operatorframework.io.bundle.channels.v1", strings.Join(b.opts.Channels, ",")},
		{"operators.operatorframework.io.bundle.channel.default.v1", b.opts.DefaultChannel},
		{"operators.operatorframework.io.test.mediatype.v1", "scorecard+v1"},
		{"operators.operatorframework.io.test.config.v1", "tests/scorecard/"},
	}
	if b.opts.OpenShiftVersions != "" {
		ann = append(ann, [2]string{"com.redhat.openshift.versions", b.opts.OpenShiftVersions})
	}
	var y, d bytes.Buffer
	y.WriteString("# Generated by `make bundle` (hack/bundlegen). DO NOT EDIT.\nannotations:\n")
	d.WriteString("# Generated by `make bundle` (hack/bundlegen). DO NOT EDIT.\n# Build from the repository root: make bundle-build\nFROM scratch\n\n")
	for _, a := range ann {
		fmt.Fprintf(&y, "  %s: %s\n", a[0], a[1])
		fmt.Fprintf(&d, "LABEL %s=%s\n", a[0], a[1])
	}
	d.WriteString("\nCOPY bundle/manifests /manifests/\nCOPY bundle/metadata /metadata/\nCOPY bundle/tests/scorecard /tests/scorecard/\n")
	b.files = append(b.files,
		File{Path: "bundle/metadata/annotations.yaml", Content: y.Bytes()},
		File{Path: "bundle.Dockerfile", Content: d.Bytes()},
	)
}

// fromUnstructured converts through JSON, so that types with their own
// JSON encoding (the CSV's version) decode right, and refuses unknown
// fields: a typo in the input must not vanish from the bundle.
func fromUnstructured(u *unstructured.Unstructured, into any) error {
	raw, err := json.Marshal(u.Object)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(into)
}

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
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/warmroute/warmroute/hack/manifests"
)

// static holds the chart's hand-written files (helpers, notes, the values
// schema), copied as they are.
//
//go:embed all:static
var static embed.FS

// Options configure the chart.
type Options struct {
	// Version is the chart's version and appVersion.
	Version string
}

// File is one file of the chart, relative to its directory.
type File = manifests.File

const (
	managerContainer = "manager"
	namePrefix       = "warmroute-"
	injectCAFrom     = "cert-manager.io/inject-ca-from"

	condWebhook       = ".Values.webhook.enable"
	condMetrics       = ".Values.metrics.enable"
	condCustomMetrics = ".Values.customMetrics.enabled"
	condLoRAPolicy    = ".Values.loraAgentPolicy.enable"
	// watchNamespaces is the namespaced mode's list; empty: every
	// namespace.
	watchNamespaces = ".Values.watchNamespaces"
	// scopeAnnotation marks the operator's binding that the namespaced
	// mode grants per watched namespace (config/rbac/role_binding.yaml).
	scopeAnnotation = "warmroute.dev/scope"
	scopeWatched    = "watched-namespaces"
	// webhook.certificate is the one certificate choice for both servers
	// that need one (the webhooks and the custom metrics API): a cluster
	// either has cert-manager or it does not.
	certManagerChosen        = `(eq .Values.webhook.certificate "cert-manager")`
	condWebhookCertManager   = "and " + condWebhook + " " + certManagerChosen
	condCustomMetricsCertMgr = "and " + condCustomMetrics + " " + certManagerChosen
	condIssuer               = "and (or " + condWebhook + " " + condCustomMetrics + ") " + certManagerChosen
)

// defaults are the values config/ sets, which become values.yaml.
type defaults struct {
	managerImage, routerImage, vllmImage image
	pullPolicy                           string
	replicas                             int64
	resources                            any
}

type image struct{ repository, tag string }

func splitImage(ref string) (image, error) {
	if repo, digest, ok := strings.Cut(ref, "@"); ok {
		return image{repo, digest}, nil
	}
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		return image{}, fmt.Errorf("image %q has no tag", ref)
	}
	return image{ref[:i], ref[i+1:]}, nil
}

type builder struct {
	opts      Options
	objects   []*unstructured.Unstructured
	namespace string
	t         *templater
	values    defaults
	files     []File
	// webhookCert and customMetricsCert are the cert-manager Certificates
	// the webhook configurations and the APIService take their CA from;
	// the self-signed choice issues the same.
	webhookCert, customMetricsCert servingCert
}

// servingCert is what the chart needs of a cert-manager Certificate.
type servingCert struct {
	secret   string
	dnsNames []string
}

// holds reports whether the pod volume v is the certificate's Secret.
func (c servingCert) holds(v any) bool {
	m, _ := v.(map[string]any)
	secret, _, _ := unstructured.NestedString(m, "secret", "secretName")
	return secret == c.secret
}

// Build returns the chart's files for the kustomize output in manifests.
func Build(manifestStream io.Reader, opts Options) ([]File, error) {
	if opts.Version == "" {
		return nil, errors.New("--version is required")
	}
	objects, err := manifests.DecodeAll(manifestStream)
	if err != nil {
		return nil, err
	}
	b := &builder{opts: opts, objects: objects}
	return b.build()
}

func (b *builder) build() ([]File, error) {
	// Each Certificate is known by the object whose CA it injects.
	certs := map[string]servingCert{}
	var webhookFrom, customMetricsFrom string
	for _, o := range b.objects {
		switch o.GetKind() {
		case "Namespace":
			if b.namespace != "" {
				return nil, errors.New("more than one Namespace in the manifests")
			}
			b.namespace = o.GetName()
		case "Certificate":
			var c servingCert
			c.secret, _, _ = unstructured.NestedString(o.Object, "spec", "secretName")
			c.dnsNames, _, _ = unstructured.NestedStringSlice(o.Object, "spec", "dnsNames")
			certs[o.GetNamespace()+"/"+o.GetName()] = c
		case "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
			webhookFrom = o.GetAnnotations()[injectCAFrom]
		case "APIService":
			customMetricsFrom = o.GetAnnotations()[injectCAFrom]
		}
	}
	if b.namespace == "" {
		return nil, errors.New("no Namespace in the manifests (want kustomize build config/default)")
	}
	var err error
	if b.webhookCert, err = certFrom(certs, "webhook configurations", webhookFrom); err != nil {
		return nil, err
	}
	if b.customMetricsCert, err = certFrom(certs, "APIService", customMetricsFrom); err != nil {
		return nil, err
	}
	b.t = newTemplater(b.namespace)

	var webhookConfigs []string
	for _, o := range b.objects {
		kind, name := o.GetKind(), o.GetName()
		manifests.DropKustomizeManagedBy(o)
		switch kind {
		case "Namespace":
			// Helm installs into the release namespace (--create-namespace).
			continue
		case "CustomResourceDefinition":
			// crds/: installed before everything else, never upgraded or
			// deleted by Helm, so uninstalling keeps every LLMEndpoint.
			out, err := manifests.Marshal(o.Object)
			if err != nil {
				return nil, err
			}
			b.add("crds/"+name+".yaml", out)
			continue
		case "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
			text, err := b.webhookConfiguration(o)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", kind, name, err)
			}
			webhookConfigs = append(webhookConfigs, text)
			continue
		}
		dir, cond, err := place(kind, name)
		if err != nil {
			return nil, err
		}
		var preamble string
		switch kind {
		case "ClusterRoleBinding":
			if o.GetAnnotations()[scopeAnnotation] == scopeWatched {
				text, err := b.perNamespaceBinding(o)
				if err != nil {
					return nil, fmt.Errorf("%s %s: %w", kind, name, err)
				}
				b.addTemplate(path.Join("templates", dir, strings.TrimPrefix(name, namePrefix)+".yaml"), cond, text)
				continue
			}
		case "Deployment":
			if err := b.deployment(o); err != nil {
				return nil, fmt.Errorf("Deployment %s: %w", name, err)
			}
		case "APIService":
			spec, _ := o.Object["spec"].(map[string]any)
			if spec == nil {
				return nil, fmt.Errorf("APIService %s: no spec", name)
			}
			if err := b.injectCA(o, spec); err != nil {
				return nil, fmt.Errorf("APIService %s: %w", name, err)
			}
			preamble = selfSignedPreamble(b.customMetricsCert, b.namespace, "warmroute-custom-metrics-ca")
		}
		b.addLabels(o)
		text, err := b.t.render(o.Object)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", kind, name, err)
		}
		file := strings.TrimPrefix(name, namePrefix)
		if kind == "ValidatingAdmissionPolicyBinding" {
			file += "-binding" // named as its policy
		}
		b.addTemplate(path.Join("templates", dir, file+".yaml"), cond, preamble+text)
	}
	if len(webhookConfigs) == 0 {
		return nil, errors.New("no webhook configurations in the manifests")
	}
	b.addTemplate("templates/webhook/webhooks.yaml", condWebhook,
		selfSignedPreamble(b.webhookCert, b.namespace, "warmroute-webhook-ca")+strings.Join(webhookConfigs, "---\n"))
	if err := b.t.leftover(); err != nil {
		return nil, err
	}
	if b.values.replicas == 0 {
		return nil, errors.New("no manager Deployment in the manifests")
	}
	b.add("Chart.yaml", []byte(b.chartYAML()))
	b.add("values.yaml", []byte(b.valuesYAML()))
	if err := b.addStatic(); err != nil {
		return nil, err
	}
	slices.SortFunc(b.files, func(x, y File) int { return strings.Compare(x.Path, y.Path) })
	return b.files, nil
}

// perNamespaceBinding templates the operator's main binding for both
// modes: the ClusterRoleBinding without watchNamespaces, a RoleBinding to
// the same ClusterRole in each watched namespace with them (which grants
// its rules in that namespace only).
func (b *builder) perNamespaceBinding(o *unstructured.Unstructured) (string, error) {
	rb := o.DeepCopy()
	b.addLabels(o)
	cluster, err := b.t.render(o.Object)
	if err != nil {
		return "", err
	}
	rb.SetKind("RoleBinding")
	rb.SetNamespace(b.t.scalar("{{ $ns }}"))
	b.addLabels(rb)
	ns, err := b.t.render(rb.Object)
	if err != nil {
		return "", err
	}
	// Inside range, the root context is $.
	ns = strings.ReplaceAll(ns, "{{ .Release.Namespace }}", "{{ $.Release.Namespace }}")
	ns = strings.ReplaceAll(ns, `include "warmroute.labels" .`, `include "warmroute.labels" $`)
	return fmt.Sprintf("{{- if %[1]s }}\n{{- range $ns := %[1]s }}\n---\n%[2]s{{- end }}\n{{- else }}\n%[3]s{{- end }}\n", watchNamespaces, ns, cluster), nil
}

// place is where an object's template goes, and the values it depends
// on. A kind chartgen does not know is an error, so that an object added
// to config/ cannot silently miss the chart.
func place(kind, name string) (dir, cond string, err error) {
	// The custom metrics API's objects say custom-metrics; the operator's
	// own metrics endpoint's say metrics alone.
	customMetrics := strings.Contains(name, "custom-metrics")
	metrics := !customMetrics && strings.Contains(name, "metrics")
	switch kind {
	case "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding":
		switch {
		case customMetrics:
			return "rbac", condCustomMetrics, nil
		case metrics:
			return "rbac", condMetrics, nil
		}
		return "rbac", "", nil
	case "Deployment":
		return "manager", "", nil
	case "Service":
		switch {
		case customMetrics:
			return "metricsapi", condCustomMetrics, nil
		case metrics:
			return "metrics", condMetrics, nil
		case strings.Contains(name, "webhook"):
			return "webhook", condWebhook, nil
		}
	case "APIService":
		if strings.HasSuffix(name, ".custom.metrics.k8s.io") {
			return "metricsapi", condCustomMetrics, nil
		}
	case "Certificate":
		if customMetrics {
			return "certmanager", condCustomMetricsCertMgr, nil
		}
		return "certmanager", condWebhookCertManager, nil
	case "Issuer":
		// Issues both certificates.
		return "certmanager", condIssuer, nil
	case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
		// config/admission's, which confine the LoRA agents and the routers.
		return "admission", condLoRAPolicy, nil
	}
	return "", "", fmt.Errorf("%s %s: chartgen does not know where it belongs in the chart; add it to place()", kind, name)
}

func (b *builder) add(p string, content []byte) {
	b.files = append(b.files, File{Path: p, Content: content})
}

const header = "# Generated by hack/chartgen from `kustomize build` of config/default and config/admission; run `make chart`, do not edit.\n"

func (b *builder) addTemplate(p, cond, text string) {
	if cond != "" {
		text = "{{- if " + cond + " }}\n" + text + "{{- end }}\n"
	}
	b.add(p, []byte(header+text))
}

func (b *builder) addLabels(o *unstructured.Unstructured) {
	labels, _, _ := unstructured.NestedMap(o.Object, "metadata", "labels")
	if labels == nil {
		labels = map[string]any{}
	}
	labels[b.t.line(func(in string) string {
		return fmt.Sprintf(`%s{{- include "warmroute.labels" . | nindent %d }}`, in, len(in))
	})] = ""
	_ = unstructured.SetNestedMap(o.Object, labels, "metadata", "labels")
}

// deployment turns the manager's image, replicas, resources, scheduling,
// operand images and toggles into values.
func (b *builder) deployment(o *unstructured.Unstructured) error {
	t := b.t
	replicas, ok, _ := unstructured.NestedInt64(o.Object, "spec", "replicas")
	if !ok {
		return errors.New("no spec.replicas")
	}
	b.values.replicas = replicas
	_ = unstructured.SetNestedField(o.Object, t.scalar("{{ .Values.manager.replicas }}"), "spec", "replicas")

	pod, _, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec")
	for _, k := range []string{"nodeSelector", "tolerations", "affinity", "imagePullSecrets"} {
		if _, set := pod[k]; set {
			return fmt.Errorf("config/ sets the pod's %s, which the chart takes from values; merge them in chartgen", k)
		}
		pod[t.line(withValues(k, ".Values.manager."+k))] = ""
	}
	annotations, _, _ := unstructured.NestedMap(o.Object, "spec", "template", "metadata", "annotations")
	if annotations == nil {
		annotations = map[string]any{}
	}
	annotations[t.line(func(in string) string {
		return fmt.Sprintf("%s{{- with .Values.manager.podAnnotations }}\n%s{{- toYaml . | nindent %d }}\n%s{{- end }}", in, in, len(in), in)
	})] = ""
	if err := unstructured.SetNestedMap(o.Object, annotations, "spec", "template", "metadata", "annotations"); err != nil {
		return err
	}

	// A certificate's volume and mounts exist only with the server that
	// uses it.
	volumes, _ := pod["volumes"].([]any)
	keepVolumes, webhookVolumes := split(volumes, b.webhookCert.holds)
	keepVolumes, customMetricsVolumes := split(keepVolumes, b.customMetricsCert.holds)
	if len(webhookVolumes) == 0 {
		return fmt.Errorf("no volume of the webhook certificate's Secret %s", b.webhookCert.secret)
	}
	if len(customMetricsVolumes) == 0 {
		return fmt.Errorf("no volume of the custom metrics API certificate's Secret %s", b.customMetricsCert.secret)
	}
	delete(pod, "volumes")
	pod[t.line(listWhen("volumes", keepVolumes,
		conditional{condWebhook, webhookVolumes}, conditional{condCustomMetrics, customMetricsVolumes}))] = ""

	containers, _ := pod["containers"].([]any)
	var c map[string]any
	for _, x := range containers {
		if m, ok := x.(map[string]any); ok && m["name"] == managerContainer {
			c = m
		}
	}
	if c == nil {
		return fmt.Errorf("no container %q", managerContainer)
	}
	img, err := splitImage(fmt.Sprint(c["image"]))
	if err != nil {
		return err
	}
	b.values.managerImage = img
	c["image"] = t.scalar(`{{ include "warmroute.image" .Values.manager.image }}`)
	b.values.pullPolicy = "IfNotPresent"
	if p, ok := c["imagePullPolicy"].(string); ok {
		b.values.pullPolicy = p
	}
	c["imagePullPolicy"] = t.scalar("{{ .Values.manager.image.pullPolicy }}")

	b.values.resources = c["resources"]
	delete(c, "resources")
	c[t.line(func(in string) string {
		return fmt.Sprintf("%sresources:\n%s  {{- toYaml .Values.manager.resources | nindent %d }}", in, in, len(in)+2)
	})] = ""

	if err := b.args(c); err != nil {
		return err
	}
	if err := b.customMetricsArgs(c); err != nil {
		return err
	}
	if err := b.env(c); err != nil {
		return err
	}

	mounts, _ := c["volumeMounts"].([]any)
	keepMounts, webhookMounts := split(mounts, mountOf(webhookVolumes))
	keepMounts, customMetricsMounts := split(keepMounts, mountOf(customMetricsVolumes))
	if len(webhookMounts) == 0 {
		return fmt.Errorf("container %q does not mount the webhook certificate", managerContainer)
	}
	if len(customMetricsMounts) == 0 {
		return fmt.Errorf("container %q does not mount the custom metrics API certificate", managerContainer)
	}
	delete(c, "volumeMounts")
	c[t.line(listWhen("volumeMounts", keepMounts,
		conditional{condWebhook, webhookMounts}, conditional{condCustomMetrics, customMetricsMounts}))] = ""

	return unstructured.SetNestedMap(o.Object, pod, "spec", "template", "spec")
}

// split returns the items of list pick refuses, then those it takes.
func split(list []any, pick func(any) bool) (keep, picked []any) {
	for _, x := range list {
		if pick(x) {
			picked = append(picked, x)
		} else {
			keep = append(keep, x)
		}
	}
	return keep, picked
}

// mountOf picks the volume mounts of volumes.
func mountOf(volumes []any) func(any) bool {
	var names []any
	for _, v := range volumes {
		m, _ := v.(map[string]any)
		names = append(names, m["name"])
	}
	return func(x any) bool {
		m, _ := x.(map[string]any)
		return slices.Contains(names, m["name"])
	}
}

const customMetricsFlag = "--custom-metrics-port="

// customMetricsArgs makes the custom metrics API's argument and container
// port conditional: without the flag the manager serves no such API.
func (b *builder) customMetricsArgs(c map[string]any) error {
	args, _ := c["args"].([]any)
	var port string
	keepArgs, flagArgs := split(args, func(a any) bool {
		s, _ := a.(string)
		p, ok := strings.CutPrefix(s, customMetricsFlag)
		if ok {
			port = p
		}
		return ok
	})
	if port == "" {
		return fmt.Errorf("container %q has no %s argument", managerContainer, customMetricsFlag)
	}
	ports, _ := c["ports"].([]any)
	keepPorts, flagPorts := split(ports, func(x any) bool {
		m, _ := x.(map[string]any)
		return fmt.Sprint(m["containerPort"]) == port
	})
	if len(flagPorts) == 0 {
		return fmt.Errorf("container %q has no port %s for %s", managerContainer, port, customMetricsFlag)
	}
	delete(c, "args")
	c[b.t.line(listWhen("args", keepArgs, conditional{condCustomMetrics, flagArgs}))] = ""
	delete(c, "ports")
	c[b.t.line(listWhen("ports", keepPorts, conditional{condCustomMetrics, flagPorts}))] = ""
	return nil
}

const metricsFlag = "--metrics-bind-address="

func (b *builder) args(c map[string]any) error {
	args, _ := c["args"].([]any)
	for i, a := range args {
		s, _ := a.(string)
		if addr, ok := strings.CutPrefix(s, metricsFlag); ok {
			args[i] = b.t.scalar(fmt.Sprintf("%s{{ if %s }}%s{{ else }}0{{ end }}", metricsFlag, condMetrics, addr))
			return nil
		}
	}
	return fmt.Errorf("container %q has no %s argument", managerContainer, metricsFlag)
}

// envValues are the manager's environment variables that come from values.
var envValues = map[string]string{
	"RELATED_IMAGE_ROUTER": `{{ include "warmroute.image" .Values.router.image }}`,
	"RELATED_IMAGE_VLLM":   `{{ include "warmroute.image" .Values.vllm.image }}`,
	"ENABLE_WEBHOOKS":      `{{ ` + condWebhook + ` | quote }}`,
	"WATCH_NAMESPACE":      `{{ join "," ` + watchNamespaces + ` | quote }}`,
}

func (b *builder) env(c map[string]any) error {
	env, _ := c["env"].([]any)
	seen := 0
	for _, e := range env {
		m, _ := e.(map[string]any)
		name, _ := m["name"].(string)
		expr, ok := envValues[name]
		if !ok {
			continue
		}
		seen++
		value, _ := m["value"].(string)
		switch name {
		case "RELATED_IMAGE_ROUTER", "RELATED_IMAGE_VLLM":
			img, err := splitImage(value)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if name == "RELATED_IMAGE_ROUTER" {
				b.values.routerImage = img
			} else {
				b.values.vllmImage = img
			}
		}
		m["value"] = b.t.scalar(expr)
	}
	if seen != len(envValues) {
		return fmt.Errorf("container %q lacks some of the variables %v", managerContainer, slices.Sorted(maps.Keys(envValues)))
	}
	return nil
}

// certFrom is the Certificate named by an inject-ca-from annotation.
func certFrom(certs map[string]servingCert, user, from string) (servingCert, error) {
	c, ok := certs[from]
	if !ok || c.secret == "" || len(c.dnsNames) == 0 {
		return c, fmt.Errorf("no cert-manager Certificate %q (the %s' %s) with a secretName and dnsNames in the manifests", from, user, injectCAFrom)
	}
	return c, nil
}

// webhookConfiguration templates a webhook configuration for either
// certificate choice.
func (b *builder) webhookConfiguration(o *unstructured.Unstructured) (string, error) {
	hooks, _ := o.Object["webhooks"].([]any)
	var configs []map[string]any
	for _, h := range hooks {
		cc, _ := h.(map[string]any)["clientConfig"].(map[string]any)
		if cc == nil {
			return "", errors.New("webhook without a clientConfig")
		}
		configs = append(configs, cc)
	}
	if err := b.injectCA(o, configs...); err != nil {
		return "", err
	}
	b.addLabels(o)
	return b.t.render(o.Object)
}

// injectCA templates o for either certificate choice: cert-manager injects
// its CA (the annotation), the self-signed choice writes it into the
// caBundle of each of holders (maps inside o). The template needs
// selfSignedPreamble's variables.
func (b *builder) injectCA(o *unstructured.Unstructured, holders ...map[string]any) error {
	t := b.t
	annotations := o.GetAnnotations()
	from, ok := annotations[injectCAFrom]
	if !ok {
		return fmt.Errorf("no %s annotation", injectCAFrom)
	}
	m := map[string]any{}
	for k, v := range annotations {
		if k != injectCAFrom {
			m[k] = v
		}
	}
	m[t.line(keyWhen(injectCAFrom, from, "$certManager"))] = ""
	if err := unstructured.SetNestedMap(o.Object, m, "metadata", "annotations"); err != nil {
		return err
	}
	for _, h := range holders {
		h[t.line(keyWhen("caBundle", "{{ $caBundle }}", "not $certManager"))] = ""
	}
	return nil
}

// selfSignedPreamble sets $certManager and $caBundle and, for the
// self-signed choice, issues cert: once, kept in its Secret across upgrades
// (lookup), so that the caBundle does not change and the serving
// certificate is not replaced under the running manager. `helm template`
// cannot look up and issues a new one each time.
func selfSignedPreamble(cert servingCert, namespace, caName string) string {
	var names []string
	for _, n := range cert.dnsNames {
		names = append(names, fmt.Sprintf("(printf %q .Release.Namespace)",
			strings.ReplaceAll(n, namespace, "%s")))
	}
	return fmt.Sprintf(`{{- $certManager := eq .Values.webhook.certificate "cert-manager" }}
{{- $caBundle := "" }}
{{- if not $certManager }}
{{- $names := list %[1]s }}
{{- $tls := dict }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace %[2]q }}
{{- if and $existing (index ($existing.data | default dict) "ca.crt") }}
{{- $tls = $existing.data }}
{{- else }}
{{- $ca := genCA %[3]q 3650 }}
{{- $cert := genSignedCert (first $names) nil $names 3650 $ca }}
{{- $tls = dict "ca.crt" ($ca.Cert | b64enc) "tls.crt" ($cert.Cert | b64enc) "tls.key" ($cert.Key | b64enc) }}
{{- end }}
{{- $caBundle = index $tls "ca.crt" }}
apiVersion: v1
kind: Secret
type: kubernetes.io/tls
metadata:
  name: %[2]s
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "warmroute.labels" . | nindent 4 }}
data:
  ca.crt: {{ index $tls "ca.crt" }}
  tls.crt: {{ index $tls "tls.crt" }}
  tls.key: {{ index $tls "tls.key" }}
---
{{- end }}
`, strings.Join(names, " "), cert.secret, caName)
}

func (b *builder) chartYAML() string {
	return fmt.Sprintf(`# Generated by hack/chartgen; run `+"`make chart`"+`, do not edit.
apiVersion: v2
name: warmroute
description: Prefix-aware routing for vLLM fleets on Kubernetes (the warmroute operator and its LLMEndpoint CRD).
type: application
version: %[1]s
appVersion: %[1]q
keywords:
- llm
- vllm
- inference
- router
- operator
home: https://github.com/warmroute/warmroute
sources:
- https://github.com/warmroute/warmroute
`, b.opts.Version)
}

func (b *builder) valuesYAML() string {
	v := b.values
	return fmt.Sprintf(`# Generated by hack/chartgen from config/ (the defaults are config/'s);
# run `+"`make chart`"+`, do not edit. values.schema.json refuses unknown keys.

manager:
  image:
    repository: %s
    tag: %s
    pullPolicy: %s
  # imagePullSecrets: [{name: regcred}]
  imagePullSecrets: []
  # Two replicas elect a leader; the standby takes over within the lease,
  # and every replica serves the webhooks.
  replicas: %d
  resources:
%s
  nodeSelector: {}
  tolerations: []
  affinity: {}
  podAnnotations: {}

# The namespaces whose LLMEndpoints the operator reconciles; empty: every
# namespace. With a list, the operator's role is bound in each of them (a
# RoleBinding) instead of cluster-wide, its cache watches only them, and it
# may write nothing elsewhere. The namespaces must exist.
# watchNamespaces: [team-a, team-b]
watchNamespaces: []

# The router the operator puts in front of each endpoint (default for
# spec.router.image).
router:
  image:
    repository: %s
    tag: %s

# The vLLM image for endpoints whose spec.model.image is empty.
vllm:
  image:
    repository: %s
    tag: %s

# Admission webhooks (defaulting and the checks CEL cannot express).
webhook:
  enable: true
  # The certificates of the webhooks and of the custom metrics API.
  # cert-manager: a cert-manager Issuer and Certificates (cert-manager must be
  # installed). self-signed: the chart issues each certificate once and keeps
  # it across upgrades.
  certificate: cert-manager

# The operator's metrics on :8443 over HTTPS (authenticated through the API
# server), their Service and the ClusterRoles to read them.
metrics:
  enable: true

# The operator's own custom metrics API (custom.metrics.k8s.io/v1beta2) for
# HorizontalPodAutoscalers: its APIService, Service, certificate (as
# webhook.certificate chooses) and the bindings an aggregated API server
# needs, one of them in kube-system. A cluster has one custom.metrics.k8s.io
# provider: turn it off where prometheus-adapter or KEDA serves it.
customMetrics:
  enabled: true

# The ValidatingAdmissionPolicies warmroute-lora-agent and
# warmroute-router-lease and their bindings (config/admission): they confine
# each LoRA agent to its own pod's state annotation and each router to its
# own Lease, which their RBAC alone does not. Cluster-scoped. Turn off only
# where it is installed otherwise; without it, endpoints with LoRA report
# LoRAAgentConfined=False.
loraAgentPolicy:
  enable: true
`, v.managerImage.repository, v.managerImage.tag, v.pullPolicy, v.replicas, block(v.resources, "    "),
		v.routerImage.repository, v.routerImage.tag, v.vllmImage.repository, v.vllmImage.tag)
}

func (b *builder) addStatic() error {
	return fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		content, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		b.add(strings.TrimPrefix(p, "static/"), content)
		return nil
	})
}

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
	"sigs.k8s.io/yaml"

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

	condWebhook     = ".Values.webhook.enable"
	condCertManager = `and .Values.webhook.enable (eq .Values.webhook.certificate "cert-manager")`
	condMetrics     = ".Values.metrics.enable"
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
	// certSecret and dnsNames are the webhook certificate's, from the
	// cert-manager Certificate; the self-signed choice issues the same.
	certSecret string
	dnsNames   []string
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
	for _, o := range b.objects {
		if o.GetKind() == "Namespace" {
			if b.namespace != "" {
				return nil, errors.New("more than one Namespace in the manifests")
			}
			b.namespace = o.GetName()
		}
		if o.GetKind() == "Certificate" {
			b.certSecret, _, _ = unstructured.NestedString(o.Object, "spec", "secretName")
			b.dnsNames, _, _ = unstructured.NestedStringSlice(o.Object, "spec", "dnsNames")
		}
	}
	if b.namespace == "" {
		return nil, errors.New("no Namespace in the manifests (want kustomize build config/default)")
	}
	if b.certSecret == "" || len(b.dnsNames) == 0 {
		return nil, errors.New("no cert-manager Certificate with a secretName and dnsNames in the manifests")
	}
	b.t = newTemplater(b.namespace)

	var webhookConfigs []string
	for _, o := range b.objects {
		kind, name := o.GetKind(), o.GetName()
		manifests.DropKustomizeManagedBy(o)
		switch {
		case kind == "Namespace":
			// Helm installs into the release namespace (--create-namespace).
			continue
		case kind == "CustomResourceDefinition":
			// crds/: installed before everything else, never upgraded or
			// deleted by Helm, so uninstalling keeps every LLMEndpoint.
			out, err := yaml.Marshal(manifests.PruneNulls(o.Object))
			if err != nil {
				return nil, err
			}
			b.add("crds/"+name+".yaml", out)
			continue
		case kind == "MutatingWebhookConfiguration" || kind == "ValidatingWebhookConfiguration":
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
		if kind == "Deployment" {
			if err := b.deployment(o); err != nil {
				return nil, fmt.Errorf("Deployment %s: %w", name, err)
			}
		}
		b.addLabels(o)
		text, err := b.t.render(o.Object)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", kind, name, err)
		}
		b.addTemplate(path.Join("templates", dir, strings.TrimPrefix(name, namePrefix)+".yaml"), cond, text)
	}
	if len(webhookConfigs) == 0 {
		return nil, errors.New("no webhook configurations in the manifests")
	}
	b.addTemplate("templates/webhook/webhooks.yaml", condWebhook,
		b.webhookPreamble()+strings.Join(webhookConfigs, "---\n"))
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

// place is where an object's template goes, and the values it depends
// on. A kind chartgen does not know is an error, so that an object added
// to config/ cannot silently miss the chart.
func place(kind, name string) (dir, cond string, err error) {
	metrics := strings.Contains(name, "metrics")
	switch kind {
	case "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding":
		if metrics {
			return "rbac", condMetrics, nil
		}
		return "rbac", "", nil
	case "Deployment":
		return "manager", "", nil
	case "Service":
		switch {
		case metrics:
			return "metrics", condMetrics, nil
		case strings.Contains(name, "webhook"):
			return "webhook", condWebhook, nil
		}
	case "Certificate", "Issuer":
		return "certmanager", condCertManager, nil
	}
	return "", "", fmt.Errorf("%s %s: chartgen does not know where it belongs in the chart; add it to place()", kind, name)
}

func (b *builder) add(p string, content []byte) {
	b.files = append(b.files, File{Path: p, Content: content})
}

const header = "# Generated by hack/chartgen from `kustomize build config/default`; run `make chart`, do not edit.\n"

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

	// The webhook certificate's volume and mounts exist only with the webhooks.
	var certVolume string
	volumes, _ := pod["volumes"].([]any)
	var keepVolumes, certVolumes []any
	for _, v := range volumes {
		if name, ok := b.certVolume(v); ok {
			certVolume = name
			certVolumes = append(certVolumes, v)
			continue
		}
		keepVolumes = append(keepVolumes, v)
	}
	if certVolume == "" {
		return fmt.Errorf("no volume of the webhook certificate's Secret %s", b.certSecret)
	}
	delete(pod, "volumes")
	pod[t.line(listWhen("volumes", keepVolumes, certVolumes, condWebhook))] = ""

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
	if err := b.env(c); err != nil {
		return err
	}

	mounts, _ := c["volumeMounts"].([]any)
	var keepMounts, certMounts []any
	for _, m := range mounts {
		if mm, ok := m.(map[string]any); ok && mm["name"] == certVolume {
			certMounts = append(certMounts, m)
			continue
		}
		keepMounts = append(keepMounts, m)
	}
	if len(certMounts) == 0 {
		return fmt.Errorf("container %q does not mount the webhook certificate", managerContainer)
	}
	delete(c, "volumeMounts")
	c[t.line(listWhen("volumeMounts", keepMounts, certMounts, condWebhook))] = ""

	return unstructured.SetNestedMap(o.Object, pod, "spec", "template", "spec")
}

// certVolume is the name of v when it holds the webhook certificate.
func (b *builder) certVolume(v any) (string, bool) {
	m, _ := v.(map[string]any)
	secret, _, _ := unstructured.NestedString(m, "secret", "secretName")
	name, _ := m["name"].(string)
	return name, secret == b.certSecret
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

// webhookConfiguration templates a webhook configuration for either
// certificate choice: cert-manager injects its CA (the annotation), the
// self-signed choice writes it into every webhook's caBundle.
func (b *builder) webhookConfiguration(o *unstructured.Unstructured) (string, error) {
	t := b.t
	annotations := o.GetAnnotations()
	from, ok := annotations[injectCAFrom]
	if !ok {
		return "", fmt.Errorf("no %s annotation", injectCAFrom)
	}
	delete(annotations, injectCAFrom)
	m := map[string]any{}
	for k, v := range annotations {
		m[k] = v
	}
	m[t.line(keyWhen(injectCAFrom, from, "$certManager"))] = ""
	if err := unstructured.SetNestedMap(o.Object, m, "metadata", "annotations"); err != nil {
		return "", err
	}
	hooks, _ := o.Object["webhooks"].([]any)
	for _, h := range hooks {
		cc, _, _ := unstructured.NestedMap(h.(map[string]any), "clientConfig")
		if cc == nil {
			return "", errors.New("webhook without a clientConfig")
		}
		cc[t.line(keyWhen("caBundle", "{{ $caBundle }}", "not $certManager"))] = ""
		h.(map[string]any)["clientConfig"] = cc
	}
	b.addLabels(o)
	return t.render(o.Object)
}

// webhookPreamble issues the self-signed certificate: once, kept in its
// Secret across upgrades (lookup), so that the caBundle does not change and
// the serving certificate is not replaced under the running manager.
// `helm template` cannot look up and issues a new one each time.
func (b *builder) webhookPreamble() string {
	var names []string
	for _, n := range b.dnsNames {
		names = append(names, fmt.Sprintf("(printf %q .Release.Namespace)",
			strings.ReplaceAll(n, b.namespace, "%s")))
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
{{- $ca := genCA "warmroute-webhook-ca" 3650 }}
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
`, strings.Join(names, " "), b.certSecret)
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
  # cert-manager: a cert-manager Issuer and Certificate (cert-manager must be
  # installed). self-signed: the chart issues a certificate once and keeps it
  # across upgrades.
  certificate: cert-manager

# The operator's metrics on :8443 over HTTPS (authenticated through the API
# server), their Service and the ClusterRoles to read them.
metrics:
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

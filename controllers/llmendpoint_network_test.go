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
	"net/url"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// source is a pod that opens a connection.
type source struct {
	namespace   string
	nsLabels    map[string]string
	podLabels   map[string]string
	description string
}

// admits is what a network plugin decides for ingress to a pod the policy
// selects: whether a rule lets source in on the TCP port (the semantics of
// networking.k8s.io/v1; ipBlock peers match no pod here).
func admits(t *testing.T, p *networkingv1.NetworkPolicy, src source, port int) bool {
	t.Helper()
	for _, rule := range p.Spec.Ingress {
		portOK := len(rule.Ports) == 0 || slices.ContainsFunc(rule.Ports, func(np networkingv1.NetworkPolicyPort) bool {
			return (np.Protocol == nil || *np.Protocol == corev1.ProtocolTCP) && np.Port != nil && np.Port.IntValue() == port
		})
		fromOK := len(rule.From) == 0 || slices.ContainsFunc(rule.From, func(peer networkingv1.NetworkPolicyPeer) bool {
			if peer.PodSelector == nil && peer.NamespaceSelector == nil {
				return false
			}
			nsOK := src.namespace == p.Namespace
			if peer.NamespaceSelector != nil {
				nsOK = matches(t, peer.NamespaceSelector, src.nsLabels)
			}
			return nsOK && (peer.PodSelector == nil || matches(t, peer.PodSelector, src.podLabels))
		})
		if portOK && fromOK {
			return true
		}
	}
	return false
}

func matches(t *testing.T, s *metav1.LabelSelector, l map[string]string) bool {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		t.Fatalf("selector %v: %v", s, err)
	}
	return sel.Matches(labels.Set(l))
}

var prometheusPeer = networkingv1.NetworkPolicyPeer{
	NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "monitoring"}},
	PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "prometheus"}},
}

// scraperLabels and scraperPeer are the operator's pods, as cmd/manager
// selects them from its flags.
var (
	scraperLabels = map[string]string{"app.kubernetes.io/name": "warmroute", "control-plane": "controller-manager", "pod-template-hash": "5d8f"}
	scraperPeer   = networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "warmroute-system"}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "warmroute", "control-plane": "controller-manager"}},
	}
)

func TestNetworkPolicies(t *testing.T) {
	withLoRA := func(ep *v1alpha1.LLMEndpoint) {
		ep.Spec.LoRAAdapters = []v1alpha1.LoRAAdapter{{Name: "sql", URI: "org/sql-lora"}}
	}
	withMonitoring := func(ep *v1alpha1.LLMEndpoint) {
		ep.Spec.NetworkPolicy.MonitoringFrom = []networkingv1.NetworkPolicyPeer{prometheusPeer}
	}
	withClients := func(ep *v1alpha1.LLMEndpoint) {
		ep.Spec.NetworkPolicy.RouterFrom = []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "apps"}},
		}}
	}

	ep := newEndpoint()
	other := newEndpoint(func(e *v1alpha1.LLMEndpoint) { e.Name = "other" })
	routerPod := source{"team", nil, buildRouterDeployment(ep, testOptions).Spec.Template.Labels, "this endpoint's router"}
	otherRouter := source{"team", nil, buildRouterDeployment(other, testOptions).Spec.Template.Labels, "another endpoint's router"}
	vllmPod := source{"team", nil, buildVLLMDeployment(ep, testOptions).Spec.Template.Labels, "this endpoint's vLLM pod"}
	neighbour := source{"team", nil, map[string]string{"app": "notebook"}, "another pod in the namespace"}
	prometheus := source{"monitoring", map[string]string{corev1.LabelMetadataName: "monitoring"}, map[string]string{"app.kubernetes.io/name": "prometheus"}, "Prometheus"}
	appPod := source{"apps", map[string]string{"team": "apps"}, map[string]string{"app": "web"}, "a client in the apps namespace"}
	scraper := source{"warmroute-system", map[string]string{corev1.LabelMetadataName: "warmroute-system"}, scraperLabels, "the operator's metrics scraper"}
	operatorNeighbour := source{"warmroute-system", scraper.nsLabels, map[string]string{"app": "other"}, "another pod in the operator's namespace"}
	scraperLookalike := source{"team", nil, scraperLabels, "a pod labelled like the operator in the endpoint's namespace"}

	type reach struct {
		src   source
		port  int
		allow bool
	}
	for _, tt := range []struct {
		name          string
		changes       []func(*v1alpha1.LLMEndpoint)
		noScraper     bool // an operator that does not scrape
		vllm, routers []reach
	}{{
		name: "defaults",
		vllm: []reach{
			{routerPod, vllmPort, true},
			{scraper, vllmPort, true},
			{operatorNeighbour, vllmPort, false},
			{scraperLookalike, vllmPort, false},
			{otherRouter, vllmPort, false},
			{neighbour, vllmPort, false},
			{vllmPod, vllmPort, false},
			{prometheus, vllmPort, false},
			{routerPod, 9999, false},
		},
		routers: []reach{
			{appPod, routerHTTPPort, true},
			{neighbour, routerHTTPPort, true},
			{routerPod, routerMetricsPort, true},
			{neighbour, routerMetricsPort, false},
			{prometheus, routerMetricsPort, false},
			{scraper, routerMetricsPort, true},
			{operatorNeighbour, routerMetricsPort, false},
			{scraperLookalike, routerMetricsPort, false},
			// The pick API: the endpoint's own routers only.
			{routerPod, routerPickPort, true},
			{otherRouter, routerPickPort, false},
			{neighbour, routerPickPort, false},
			{appPod, routerPickPort, false},
			{prometheus, routerPickPort, false},
		},
	}, {
		name:    "LoRA",
		changes: []func(*v1alpha1.LLMEndpoint){withLoRA},
		vllm: []reach{
			{routerPod, vllmPort, true},
			{neighbour, vllmPort, false},
		},
	}, {
		name:    "monitoring",
		changes: []func(*v1alpha1.LLMEndpoint){withLoRA, withMonitoring},
		vllm: []reach{
			{routerPod, vllmPort, true},
			{prometheus, vllmPort, true},
			{neighbour, vllmPort, false},
			{source{"monitoring", prometheus.nsLabels, map[string]string{"app": "grafana"}, "another pod in monitoring"}, vllmPort, false},
			{source{"elsewhere", nil, prometheus.podLabels, "a prometheus-labelled pod elsewhere"}, vllmPort, false},
		},
		routers: []reach{
			{prometheus, routerMetricsPort, true},
			{prometheus, routerHTTPPort, true},
			{prometheus, routerPickPort, false},
		},
	}, {
		name:    "clients",
		changes: []func(*v1alpha1.LLMEndpoint){withClients},
		routers: []reach{
			{appPod, routerHTTPPort, true},
			{neighbour, routerHTTPPort, false},
			{prometheus, routerHTTPPort, false},
			{routerPod, routerMetricsPort, true},
			{routerPod, routerHTTPPort, true},
			{otherRouter, routerHTTPPort, false},
			// The scraper reads metrics, nothing else.
			{scraper, routerMetricsPort, true},
			{scraper, routerHTTPPort, false},
			{appPod, routerPickPort, false},
		},
	}, {
		name:      "no scraper",
		noScraper: true,
		vllm: []reach{
			{routerPod, vllmPort, true},
			{scraper, vllmPort, false},
		},
		routers: []reach{
			{routerPod, routerMetricsPort, true},
			{scraper, routerMetricsPort, false},
		},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			ep := newEndpoint(tt.changes...)
			opts := testOptions
			opts.MetricsScraper = &scraperPeer
			if tt.noScraper {
				opts.MetricsScraper = nil
			}
			vp, rp := buildVLLMNetworkPolicy(ep, opts), buildRouterNetworkPolicy(ep, opts)
			for _, p := range []*networkingv1.NetworkPolicy{vp, rp} {
				if p.Namespace != "team" || len(p.OwnerReferences) != 1 || !ptr.Deref(p.OwnerReferences[0].Controller, false) {
					t.Errorf("%s: namespace %q owners %+v", p.Name, p.Namespace, p.OwnerReferences)
				}
				// Ingress only: egress to the API server and to Hugging
				// Face stays open.
				if !slices.Equal(p.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
					t.Errorf("%s: policyTypes %v", p.Name, p.Spec.PolicyTypes)
				}
			}
			// Each policy selects exactly the pods of its role.
			if !matches(t, &vp.Spec.PodSelector, vllmPod.podLabels) || matches(t, &vp.Spec.PodSelector, routerPod.podLabels) {
				t.Errorf("vLLM policy selects %v", vp.Spec.PodSelector)
			}
			if !matches(t, &rp.Spec.PodSelector, routerPod.podLabels) || matches(t, &rp.Spec.PodSelector, otherRouter.podLabels) {
				t.Errorf("router policy selects %v", rp.Spec.PodSelector)
			}
			for _, r := range tt.vllm {
				if got := admits(t, vp, r.src, r.port); got != r.allow {
					t.Errorf("%s → vLLM :%d allowed %v, want %v", r.src.description, r.port, got, r.allow)
				}
			}
			for _, r := range tt.routers {
				if got := admits(t, rp, r.src, r.port); got != r.allow {
					t.Errorf("%s → router :%d allowed %v, want %v", r.src.description, r.port, got, r.allow)
				}
			}
		})
	}
}

// The vLLM policy has no rule for the LoRA agent because the agent reaches
// vLLM over the pod's loopback, which NetworkPolicies do not govern; this
// keeps that assumption true.
func TestLoRAAgentReachesVLLMOverLoopback(t *testing.T) {
	c := buildLoRAAgentContainer(newEndpoint(), testOptions)
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--vllm-url="); ok {
			u, err := url.Parse(v)
			if err != nil || u.Hostname() != "127.0.0.1" {
				t.Errorf("--vllm-url %q is not the pod's loopback: the vLLM NetworkPolicy would block the agent", v)
			}
			return
		}
	}
	t.Errorf("no --vllm-url in %v", c.Args)
}

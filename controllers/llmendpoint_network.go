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

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// The NetworkPolicies restrict ingress only: the instances download
// weights and the routers and the LoRA agent talk to the API server, and
// an egress policy would have to know where each of those lives. The LoRA
// agent reaches vLLM on 127.0.0.1 inside the pod, which no NetworkPolicy
// governs, and kubelet probes come from the node, which network plugins
// let through.

// buildVLLMNetworkPolicy lets only the endpoint's routers (and the
// monitoring peers and the operator's scraper) reach the vLLM port: no
// other pod can bypass the routers' tenant handling or load and unload
// adapters through vLLM's runtime API.
//
// In mode InferencePool the Gateway sends requests to the instances
// itself: its proxies (spec.networkPolicy.routerFrom, any source when
// empty) reach the vLLM port too.
func buildVLLMNetworkPolicy(ep *v1alpha1.LLMEndpoint, opts Options) *networkingv1.NetworkPolicy {
	// vLLM serves /metrics on its API port: a scraper needs the same port.
	rules := []networkingv1.NetworkPolicyIngressRule{{
		Ports: []networkingv1.NetworkPolicyPort{tcpPort(vllmPort)},
		From:  metricsReaders(ep, opts),
	}}
	if inferencePoolMode(ep) {
		rules = append(rules, networkingv1.NetworkPolicyIngressRule{
			Ports: []networkingv1.NetworkPolicyPort{tcpPort(vllmPort)},
			From:  copyPeers(ep.Spec.NetworkPolicy.RouterFrom),
		})
	}
	return ingressPolicy(ep, vllmName(ep), roleVLLM, "vllm", rules...)
}

// metricsReaders are the endpoint's routers, the monitoring peers and the
// operator's own metrics scraper (internal/custommetrics), which reads
// the instances' and routers' /metrics for the custom metrics API: without
// it an enforcing network plugin leaves a HorizontalPodAutoscaler with no
// metric.
func metricsReaders(ep *v1alpha1.LLMEndpoint, opts Options) []networkingv1.NetworkPolicyPeer {
	peers := append([]networkingv1.NetworkPolicyPeer{{
		PodSelector: &metav1.LabelSelector{MatchLabels: selectorLabels(ep, roleRouter)},
	}}, copyPeers(ep.Spec.NetworkPolicy.MonitoringFrom)...)
	if opts.MetricsScraper != nil {
		peers = append(peers, *opts.MetricsScraper.DeepCopy())
	}
	return peers
}

// ingressPolicy is a NetworkPolicy that admits to the pods of one role of
// the endpoint only what the rules allow.
func ingressPolicy(ep *v1alpha1.LLMEndpoint, name, role, app string, rules ...networkingv1.NetworkPolicyIngressRule) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: objectMeta(ep, name, role, app),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: selectorLabels(ep, role)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     rules,
		},
	}
}

// buildRouterNetworkPolicy opens the routers' client port (the picker's
// port in mode InferencePool, where the clients are the Gateway's proxies) to
// spec.networkPolicy.routerFrom (anyone when empty) and to the routers
// themselves, their metrics port to the routers, the monitoring peers and
// the operator's scraper, and their pick port to the endpoint's routers
// only (the elected picker answers its siblings there).
func buildRouterNetworkPolicy(ep *v1alpha1.LLMEndpoint, opts Options) *networkingv1.NetworkPolicy {
	clients := networkingv1.NetworkPolicyIngressRule{
		Ports: []networkingv1.NetworkPolicyPort{tcpPort(routerFrontPort(ep))},
		// No peers lets every source in, as a LoadBalancer or NodePort
		// Service needs.
		From: copyPeers(ep.Spec.NetworkPolicy.RouterFrom),
	}
	if len(clients.From) > 0 {
		clients.From = append(clients.From, networkingv1.NetworkPolicyPeer{
			PodSelector: &metav1.LabelSelector{MatchLabels: selectorLabels(ep, roleRouter)},
		})
	}
	metrics := networkingv1.NetworkPolicyIngressRule{
		Ports: []networkingv1.NetworkPolicyPort{tcpPort(routerMetricsPort)},
		From:  metricsReaders(ep, opts),
	}
	pick := networkingv1.NetworkPolicyIngressRule{
		Ports: []networkingv1.NetworkPolicyPort{tcpPort(routerPickPort)},
		From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: selectorLabels(ep, roleRouter)}}},
	}
	return ingressPolicy(ep, routerName(ep), roleRouter, "warmroute-router", clients, metrics, pick)
}

// tcpPort is a numeric TCP port of a NetworkPolicy rule. Numbers rather
// than the containers' port names: a name matches whatever container
// declares it, and the numbers are the operator's own constants.
func tcpPort(port int) networkingv1.NetworkPolicyPort {
	p := intstr.FromInt32(int32(port))
	proto := corev1.ProtocolTCP
	return networkingv1.NetworkPolicyPort{Protocol: &proto, Port: &p}
}

// copyPeers deep-copies the user's peers so the object never shares memory
// with the LLMEndpoint.
func copyPeers(peers []networkingv1.NetworkPolicyPeer) []networkingv1.NetworkPolicyPeer {
	if len(peers) == 0 {
		return nil
	}
	out := make([]networkingv1.NetworkPolicyPeer, len(peers))
	for i := range peers {
		peers[i].DeepCopyInto(&out[i])
	}
	return out
}

// reconcileNetworkPolicies applies the endpoint's NetworkPolicies when
// they are enabled; the prune phase removes them when they are not.
func (r *LLMEndpointReconciler) reconcileNetworkPolicies(ctx context.Context, ep *v1alpha1.LLMEndpoint) error {
	if !v1alpha1.NetworkPolicyEnabled(ep) {
		return nil
	}
	return r.applyInOrder(ctx, ep, buildVLLMNetworkPolicy(ep, r.Options), buildRouterNetworkPolicy(ep, r.Options))
}

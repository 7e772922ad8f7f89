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
	"flag"
	"fmt"
	"os"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"github.com/warmroute/warmroute/controllers"
	"github.com/warmroute/warmroute/internal/platform"
)

// podFlags set who the operand pods run as and which of the operator's
// own pods their NetworkPolicies admit.
type podFlags struct {
	platform                       string
	runAsUser, runAsGroup, fsGroup int64
	namespace, podLabels           string

	// resolved is the platform, detected or given.
	resolved platform.Name
}

// managerPodLabels select the manager's pods in config/manager (and the
// Helm chart generated from it): their Deployment's selector.
const managerPodLabels = "app.kubernetes.io/name=warmroute,control-plane=controller-manager"

func (f *podFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.platform, "platform", "auto", "kubernetes, openshift, or auto (openshift when the API server serves "+platform.SecurityGroup+"). On OpenShift the vLLM pods fix no UID or fsGroup: the restricted-v2 SCC assigns them.")
	fs.Int64Var(&f.runAsUser, "vllm-run-as-user", -1, "UID of the vLLM pods; -1: the platform's default (2000, the vLLM image's own user; none on OpenShift).")
	fs.Int64Var(&f.runAsGroup, "vllm-run-as-group", -1, "Primary GID of the vLLM pods; -1: the platform's default (2000; none on OpenShift).")
	fs.Int64Var(&f.fsGroup, "vllm-fs-group", -1, "fsGroup of the vLLM pods, which owns their volumes (the model cache); -1: the platform's default (2000; none on OpenShift).")
	fs.StringVar(&f.namespace, "operator-namespace", os.Getenv("POD_NAMESPACE"), "Namespace of the operator's pods, which scrape the endpoints' metrics: their NetworkPolicies admit it (default $POD_NAMESPACE; empty admits none).")
	fs.StringVar(&f.podLabels, "operator-pod-labels", managerPodLabels, "Labels of the operator's pods (key=value,...), for the same NetworkPolicy rule.")
}

// apply settles opts.VLLM and opts.MetricsScraper; scraping tells whether
// the operator scrapes the endpoints at all (the custom metrics API).
func (f *podFlags) apply(cfg *rest.Config, opts *controllers.Options, scraping bool) error {
	switch platform.Name(f.platform) {
	case platform.Kubernetes, platform.OpenShift:
		f.resolved = platform.Name(f.platform)
	case "auto":
		dc, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			return err
		}
		if f.resolved, err = platform.Detect(dc); err != nil {
			return err
		}
	default:
		return fmt.Errorf("--platform=%q: want kubernetes, openshift or auto", f.platform)
	}
	opts.VLLM = controllers.DefaultVLLMIdentity(f.resolved == platform.OpenShift)
	for _, o := range []struct {
		v   int64
		dst **int64
	}{{f.runAsUser, &opts.VLLM.RunAsUser}, {f.runAsGroup, &opts.VLLM.RunAsGroup}, {f.fsGroup, &opts.VLLM.FSGroup}} {
		if o.v >= 0 {
			*o.dst = &o.v
		}
	}
	if !scraping || f.namespace == "" {
		return nil
	}
	sel, err := labels.ConvertSelectorToLabelsMap(f.podLabels)
	if err != nil {
		return fmt.Errorf("--operator-pod-labels=%q: want key=value,...: %w", f.podLabels, err)
	}
	if len(sel) == 0 {
		return fmt.Errorf("--operator-pod-labels=%q: want key=value,...: no label given", f.podLabels)
	}
	opts.MetricsScraper = &networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: f.namespace}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: sel},
	}
	return nil
}

func ptrString(p *int64) string {
	if p == nil {
		return "unset"
	}
	return strconv.FormatInt(*p, 10)
}

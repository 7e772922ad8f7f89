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

// Command manager runs the warmroute operator: the LLMEndpoint controller.
package main

import (
	"cmp"
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/controllers"
	"github.com/warmroute/warmroute/internal/inferencepool"
	"github.com/warmroute/warmroute/webhooks"
)

// Default images: pinned, so that an operator upgrade is the only thing
// that changes what an endpoint without an explicit image runs. The vLLM
// tag is the release whose `vllm serve` command line the simulator speaks
// (vllmsim.PinnedRelease), and config/manager's RELATED_IMAGE_VLLM, from
// which the Helm chart and the OLM bundle are generated, names the same
// image: main_test.go holds all three equal. docs/install.md says how to
// move it.
const (
	defaultVLLMImage   = "docker.io/vllm/vllm-openai:v0.30.0"
	defaultRouterImage = "ghcr.io/warmroute/warmroute-router:v0.1.0"
)

var scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	utilruntime.Must(inferencepool.AddToScheme(scheme))
}

func main() {
	var (
		metricsAddr, probeAddr              string
		secureMetrics, enableLeaderElection bool
		enableHTTP2                         bool
		vllmImage, routerImage              string
		maxConcurrentReconciles             int
		leaderElectionNamespace             string
		webhookAddr, webhookCertDir         string
		watchNamespaces                     string
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "Address of the metrics endpoint, e.g. :8443 (HTTPS) or :8080 (HTTP); 0 disables it.")
	flag.BoolVar(&secureMetrics, "metrics-secure", true, "Serve metrics over HTTPS, authenticated and authorized through the API server.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address of the health and readiness probes.")
	flag.BoolVar(&enableLeaderElection, "leader-elect", false, "Elect a leader, so that only one replica of the operator reconciles at a time.")
	flag.StringVar(&leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election Lease; empty: the operator's own (in a pod), required outside a cluster.")
	flag.BoolVar(&enableHTTP2, "enable-http2", false, "Serve metrics and webhooks over HTTP/2 too (off: CVE-2023-44487, CVE-2023-39325).")
	flag.StringVar(&vllmImage, "vllm-image", defaultVLLMImage, "vLLM image for endpoints whose spec.model.image is empty.")
	flag.StringVar(&routerImage, "router-image", defaultRouterImage, "Router image for endpoints whose spec.router.image is empty.")
	var pods podFlags
	pods.bind(flag.CommandLine)
	flag.StringVar(&watchNamespaces, "watch-namespaces", os.Getenv(watchNamespacesEnv), "Namespaces (comma-separated) whose LLMEndpoints the operator reconciles, and the only ones it reads or writes; empty: every namespace. Default $"+watchNamespacesEnv+". Its RBAC must match: see docs/install.md, \"Namespaced mode\".")
	flag.IntVar(&maxConcurrentReconciles, "max-concurrent-reconciles", 4, "LLMEndpoints reconciled in parallel.")
	var metricsAPI metricsAPIFlags
	metricsAPI.bind(flag.CommandLine)
	enableWebhooks := flag.Bool("enable-webhooks", os.Getenv("ENABLE_WEBHOOKS") != "false", "Serve the LLMEndpoint admission webhooks (with the certificate in /tmp/k8s-webhook-server/serving-certs); off by default when ENABLE_WEBHOOKS=false.")
	flag.StringVar(&webhookAddr, "webhook-bind-address", ":9443", "Address the admission webhooks are served on.")
	flag.StringVar(&webhookCertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs", "Directory with the webhooks' serving certificate, tls.crt and tls.key (where OLM and config/default mount it).")
	zapOpts := zap.Options{Development: false}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")

	var tlsOpts []func(*tls.Config)
	if !enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	metricsOpts := metricsserver.Options{
		BindAddress:   metricsAddr,
		SecureServing: secureMetrics,
		TLSOpts:       tlsOpts,
	}
	if secureMetrics {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}

	webhookHost, webhookPort, err := splitHostPort(webhookAddr)
	if err != nil {
		log.Error(err, "bad --webhook-bind-address")
		os.Exit(1)
	}
	namespaces, err := parseWatchNamespaces(watchNamespaces)
	if err != nil {
		log.Error(err, "bad --watch-namespaces")
		os.Exit(1)
	}
	cacheOpts := controllers.CacheOptions()
	if len(namespaces) > 0 {
		// Informers per namespace: the operator then lists and watches
		// nothing outside them, which its namespaced RBAC would refuse.
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, n := range namespaces {
			cacheOpts.DefaultNamespaces[n] = cache.Config{}
		}
	}
	log.Info("watching", "namespaces", cmp.Or(strings.Join(namespaces, ","), "all"))

	webhookServer := webhook.NewServer(webhook.Options{Host: webhookHost, Port: webhookPort, CertDir: webhookCertDir, TLSOpts: tlsOpts})

	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsOpts,
		WebhookServer:           webhookServer,
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          enableLeaderElection,
		LeaderElectionNamespace: leaderElectionNamespace,
		// config/rbac/leader_election_role.yaml grants update on this
		// Lease by name.
		LeaderElectionID: "warmroute-operator.serving.warmroute.dev",
		// The manager exits right after losing the lease, so it can give
		// it up at once on shutdown.
		LeaderElectionReleaseOnCancel: true,
		Cache:                         cacheOpts,
	})
	if err != nil {
		log.Error(err, "unable to create the manager")
		os.Exit(1)
	}

	opts := controllers.Options{VLLMImage: vllmImage, RouterImage: routerImage}
	if err := pods.apply(mgr.GetConfig(), &opts, metricsAPI.port != 0); err != nil {
		log.Error(err, "unable to settle the pods' identity and network access")
		os.Exit(1)
	}
	log.Info("operand pods", "platform", pods.resolved,
		"vllmRunAsUser", ptrString(opts.VLLM.RunAsUser), "vllmFSGroup", ptrString(opts.VLLM.FSGroup),
		"metricsScraperAdmitted", opts.MetricsScraper != nil)
	store := metricsAPI.store()
	reconciler := &controllers.LLMEndpointReconciler{Client: mgr.GetClient(), Options: opts}
	if store != nil {
		// The scraper's figures set the vLLM pods' deletion costs.
		reconciler.Heat = store
	}
	if err := reconciler.SetupWithManager(mgr, maxConcurrentReconciles); err != nil {
		log.Error(err, "unable to set up the controller", "controller", "LLMEndpoint")
		os.Exit(1)
	}
	if *enableWebhooks {
		if err := webhooks.SetupLLMEndpointWebhookWithManager(mgr, namespaces); err != nil {
			log.Error(err, "unable to set up the webhooks", "webhook", "LLMEndpoint")
			os.Exit(1)
		}
	}

	if err := metricsAPI.setup(mgr, store); err != nil {
		log.Error(err, "unable to set up the custom metrics API")
		os.Exit(1)
	}

	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "unable to set up the health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		log.Error(err, "unable to set up the readiness check")
		os.Exit(1)
	}
	if *enableWebhooks {
		// Not ready until the webhooks answer: the API server sends every
		// LLMEndpoint write through them (failurePolicy Fail).
		if err := mgr.AddReadyzCheck("webhooks", webhookServer.StartedChecker()); err != nil {
			log.Error(err, "unable to set up the webhooks' readiness check")
			os.Exit(1)
		}
	}

	log.Info("starting the manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "the manager stopped with an error")
		os.Exit(1)
	}
}

// splitHostPort splits a listen address like ":9443" or "127.0.0.1:9443".
func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, fmt.Errorf("%q: the port must be a number in 1-65535", addr)
	}
	return host, port, nil
}

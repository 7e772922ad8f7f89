package main

import (
	"flag"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/warmroute/warmroute/internal/custommetrics"
)

// metricsAPIFlags configure the embedded custom metrics API
// (internal/custommetrics).
type metricsAPIFlags struct {
	port           int
	certDir        string
	scrapeInterval time.Duration
	statusPeriod   time.Duration
}

func (f *metricsAPIFlags) bind(fs *flag.FlagSet) {
	fs.IntVar(&f.port, "custom-metrics-port", 0, "HTTPS port of the custom metrics API (custom.metrics.k8s.io) for LLMEndpoints; 0 disables it, the load scraper and status.load.")
	fs.StringVar(&f.certDir, "custom-metrics-cert-dir", "/apiserver.local.config/certificates", "Directory with the custom metrics API's serving certificate, apiserver.crt and apiserver.key (where OLM mounts it) or tls.crt and tls.key; without them a self-signed pair is made there.")
	fs.DurationVar(&f.scrapeInterval, "custom-metrics-scrape-interval", 10*time.Second, "How often the routers' and vLLM pods' /metrics are read for the custom metrics API.")
	fs.DurationVar(&f.statusPeriod, "load-status-period", 30*time.Second, "Least time between two writes of an LLMEndpoint's status.load.")
}

// store is the in-memory store the scraper fills, or nil when the API is
// off.
func (f *metricsAPIFlags) store() *custommetrics.Store {
	if f.port == 0 {
		return nil
	}
	return custommetrics.NewStore()
}

// setup adds the scraper, the API server and the status publisher to the
// manager; all three read store (nil: the API is off).
func (f *metricsAPIFlags) setup(mgr ctrl.Manager, store *custommetrics.Store) error {
	if store == nil {
		return nil
	}
	kubeconfig := ""
	if fl := flag.Lookup(config.KubeconfigFlagName); fl != nil {
		kubeconfig = fl.Value.String()
	}
	srv, err := custommetrics.NewServer(custommetrics.ServerOptions{Port: f.port, CertDir: f.certDir, Kubeconfig: kubeconfig},
		// Figures missing from several scrapes in a row are not served.
		&custommetrics.Provider{Store: store, Reader: mgr.GetClient(), MaxAge: max(5*f.scrapeInterval, 30*time.Second)})
	if err != nil {
		return err
	}
	for _, r := range []manager.Runnable{
		&custommetrics.Scraper{Reader: mgr.GetClient(), Store: store, Interval: f.scrapeInterval},
		srv,
		&custommetrics.StatusPublisher{Client: mgr.GetClient(), Store: store, Period: f.statusPeriod,
			Recorder: mgr.GetEventRecorder("warmroute-operator")},
	} {
		if err := mgr.Add(r); err != nil {
			return fmt.Errorf("add to the manager: %w", err)
		}
	}
	return nil
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/warmroute/warmroute/sidecar/router/config"
	"github.com/warmroute/warmroute/sidecar/router/picker"
	"github.com/warmroute/warmroute/sidecar/router/proxy"
)

// pickerFlags say who decides for this replica (sidecar/router/picker).
type pickerFlags struct {
	picker, lease, podName, podIP, listen, keyFile string
	// leaseNamespace and leaseName are --lease, split by validate.
	leaseNamespace, leaseName                 string
	timeout                                   time.Duration
	leaseDuration, renewDeadline, retryPeriod time.Duration
}

func (p *pickerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.picker, "picker", proxy.PickerSelf, `who decides where requests go: "self" (this router, alone or as the picker of a fixed set), or host:port of the sibling's --pick-listen (benchmarks, tests); with --lease the election decides`)
	fs.StringVar(&p.lease, "lease", "", "namespace/name of the endpoint's Lease: the router replicas elect the picker with it")
	fs.StringVar(&p.podName, "pod-name", os.Getenv("POD_NAME"), "this replica's name, to the picker and in the Lease (default $POD_NAME, else hostname-pid)")
	fs.StringVar(&p.podIP, "pod-ip", os.Getenv("POD_IP"), "with --lease: this pod's IP, where siblings reach its pick listener (default $POD_IP)")
	fs.StringVar(&p.listen, "pick-listen", "", "address of the pick API, which siblings call while this replica is the picker (with --lease: default :9091)")
	fs.StringVar(&p.keyFile, "pick-key-file", "", "file holding the endpoint's key (the operator's Secret), which signs the pick API and keys the block hashes; required with --lease or a --picker address")
	fs.DurationVar(&p.timeout, "pick-timeout", picker.DefaultPickTimeout, "longest wait for the picker's answer before routing by the fallback")
	fs.DurationVar(&p.leaseDuration, "lease-duration", picker.DefaultLeaseDuration, "with --lease: how long a leader's Lease holds without renewal (a dead leader is replaced after about this)")
	fs.DurationVar(&p.renewDeadline, "lease-renew-deadline", picker.DefaultRenewDeadline, "with --lease: how long a leader retries renewing before it steps down")
	fs.DurationVar(&p.retryPeriod, "lease-retry-period", picker.DefaultRetryPeriod, "with --lease: period of Lease reads and renewals")
}

func (p *pickerFlags) validate() error {
	if p.lease != "" {
		if p.picker != proxy.PickerSelf {
			return errors.New("--lease and a --picker address are exclusive")
		}
		var err error
		if p.leaseNamespace, p.leaseName, err = config.ParseConfigMapRef(p.lease); err != nil {
			return fmt.Errorf("--lease: %w", err)
		}
		if p.podName == "" || p.podIP == "" {
			return errors.New("--lease needs --pod-name and --pod-ip (the downward API's POD_NAME and POD_IP)")
		}
		if p.listen == "" {
			p.listen = ":9091"
		}
	}
	if (p.lease != "" || p.picker != proxy.PickerSelf) && p.keyFile == "" {
		return errors.New("--pick-key-file is required with --lease or a --picker address: replicas must share the endpoint's key")
	}
	if p.picker != proxy.PickerSelf {
		if _, _, err := net.SplitHostPort(p.picker); err != nil {
			return fmt.Errorf("--picker %q: want self or host:port: %w", p.picker, err)
		}
	}
	if p.podName == "" {
		// Outside a pod several replicas may share a host (benchmarks,
		// tests); the pid keeps their names apart.
		h, err := os.Hostname()
		if err != nil || h == "" {
			return errors.New("--pod-name: no POD_NAME and no hostname")
		}
		p.podName = h + "-" + strconv.Itoa(os.Getpid())
	}
	return nil
}

// routerOptions are the proxy options that follow from the flags.
func (p *pickerFlags) routerOptions() (mode string, keys picker.Keys, err error) {
	mode = p.picker
	if p.lease != "" {
		mode = proxy.PickerElected
	}
	if p.keyFile != "" {
		if keys, err = picker.LoadKeys(p.keyFile); err != nil {
			return "", keys, err
		}
	}
	return mode, keys, nil
}

// pickServer is the pick API's listener (nil without --pick-listen), with
// limits of its own (picker.Server): its peers are sibling replicas,
// whose calls are small and fast, not clients.
func pickServer(f *flags, r *proxy.Router, log logr.Logger) *http.Server {
	if f.picker.listen == "" {
		return nil
	}
	return r.Picker().Server(f.picker.listen, proxy.StdLogger(log.WithName("pick").WithName("http")))
}

// startElection runs this replica as a candidate for picker when --lease
// is set.
func startElection(ctx context.Context, wg *sync.WaitGroup, f *flags, r *proxy.Router, log logr.Logger) error {
	if f.picker.lease == "" {
		return nil
	}
	client, err := kubeClient(f.kubeconfig)
	if err != nil {
		return err
	}
	_, port, err := net.SplitHostPort(f.picker.listen)
	if err != nil {
		return fmt.Errorf("--pick-listen: %w", err)
	}
	e := picker.Election{Client: client, Namespace: f.picker.leaseNamespace, Lease: f.picker.leaseName, Name: f.picker.podName,
		Address:       net.JoinHostPort(f.picker.podIP, port),
		LeaseDuration: f.picker.leaseDuration, RenewDeadline: f.picker.renewDeadline, RetryPeriod: f.picker.retryPeriod}
	wg.Go(func() {
		if err := r.Picker().Elect(ctx, e); err != nil {
			log.Error(err, "picker election stopped; routing by the fallback")
		}
	})
	return nil
}

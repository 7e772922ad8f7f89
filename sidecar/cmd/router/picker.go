package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/warmroute/warmroute/sidecar/router/config"
	"github.com/warmroute/warmroute/sidecar/router/picker"
	"github.com/warmroute/warmroute/sidecar/router/proxy"
)

// pickerFlags say who decides for this replica (sidecar/router/picker);
// the router's Picker, Replica and PickTimeout options are set directly.
type pickerFlags struct {
	lease, podIP, listen, keyFile string
	// leaseNamespace and leaseName are --lease, split by validate.
	leaseNamespace, leaseName                 string
	leaseDuration, renewDeadline, retryPeriod time.Duration
}

func (p *pickerFlags) register(fs *flag.FlagSet, o *proxy.Options) {
	fs.StringVar(&o.Picker, "picker", proxy.PickerSelf, `who decides where requests go: "self" (this router, alone or as the picker of a fixed set), or host:port of the sibling's --pick-listen (benchmarks, tests); with --lease the election decides`)
	fs.StringVar(&p.lease, "lease", "", "namespace/name of the endpoint's Lease: the router replicas elect the picker with it")
	fs.StringVar(&o.Replica, "pod-name", os.Getenv("POD_NAME"), "this replica's name, to the picker and in the Lease (default $POD_NAME, else hostname-pid)")
	fs.StringVar(&p.podIP, "pod-ip", os.Getenv("POD_IP"), "with --lease: this pod's IP, where siblings reach its pick listener (default $POD_IP)")
	fs.StringVar(&p.listen, "pick-listen", "", "address of the pick API, which siblings call while this replica is the picker (with --lease: default :9091)")
	fs.StringVar(&p.keyFile, "pick-key-file", "", "file holding the endpoint's key (the operator's Secret), which signs the pick API and keys the block hashes; required with --lease or a --picker address")
	fs.DurationVar(&o.PickTimeout, "pick-timeout", picker.DefaultPickTimeout, "longest wait for the picker's answer before routing by the fallback")
	fs.DurationVar(&p.leaseDuration, "lease-duration", picker.DefaultLeaseDuration, "with --lease: how long a leader's Lease holds without renewal (a dead leader is replaced after about this)")
	fs.DurationVar(&p.renewDeadline, "lease-renew-deadline", picker.DefaultRenewDeadline, "with --lease: how long a leader retries renewing before it steps down")
	fs.DurationVar(&p.retryPeriod, "lease-retry-period", picker.DefaultRetryPeriod, "with --lease: period of Lease reads and renewals")
}

func (p *pickerFlags) validate(o *proxy.Options) error {
	if p.lease != "" {
		if o.Picker != proxy.PickerSelf {
			return errors.New("--lease and a --picker address are exclusive")
		}
		var err error
		if p.leaseNamespace, p.leaseName, err = config.ParseConfigMapRef(p.lease); err != nil {
			return fmt.Errorf("--lease: %w", err)
		}
		if o.Replica == "" || p.podIP == "" {
			return errors.New("--lease needs --pod-name and --pod-ip (the downward API's POD_NAME and POD_IP)")
		}
		if p.listen == "" {
			p.listen = ":9091"
		}
		if _, _, err := net.SplitHostPort(p.listen); err != nil {
			return fmt.Errorf("--pick-listen: %w", err)
		}
	}
	if (p.lease != "" || o.Picker != proxy.PickerSelf) && p.keyFile == "" {
		return errors.New("--pick-key-file is required with --lease or a --picker address: replicas must share the endpoint's key")
	}
	if p.lease != "" {
		o.Picker = proxy.PickerElected
	} else if _, _, err := net.SplitHostPort(o.Picker); o.Picker != proxy.PickerSelf && err != nil {
		return fmt.Errorf("--picker %q: want self or host:port: %w", o.Picker, err)
	}
	if o.Replica == "" {
		// Outside a pod several replicas may share a host (benchmarks,
		// tests); the pid keeps their names apart.
		h, err := os.Hostname()
		if err != nil || h == "" {
			return errors.New("--pod-name: no POD_NAME and no hostname")
		}
		o.Replica = h + "-" + strconv.Itoa(os.Getpid())
	}
	return nil
}

// election stands this replica for picker with the Lease.
func (p *pickerFlags) election(client kubernetes.Interface, name string) picker.Election {
	_, port, _ := net.SplitHostPort(p.listen) // checked by validate
	return picker.Election{Client: client, Namespace: p.leaseNamespace, Lease: p.leaseName, Name: name,
		Address:       net.JoinHostPort(p.podIP, port),
		LeaseDuration: p.leaseDuration, RenewDeadline: p.renewDeadline, RetryPeriod: p.retryPeriod}
}

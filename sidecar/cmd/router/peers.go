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

	"github.com/warmroute/warmroute/sidecar/router/peers"
	"github.com/warmroute/warmroute/sidecar/router/proxy"
)

// peerFlags configure the exchange of load between router replicas
// (sidecar/router/peers).
type peerFlags struct {
	static, service, portName, podIP, replica string
	advertise                                 string
	interval, staleAfter, bootstrapWait       time.Duration
	peerPort                                  int
	debugRoute, forward                       bool
}

func (p *peerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.static, "peers", "", "host:port,... of the other replicas' metrics listeners (benchmarks, tests; may list this replica too)")
	fs.StringVar(&p.service, "peer-service", "", "namespace/name of a Service selecting the router pods: peers are its EndpointSlices' serving endpoints")
	fs.StringVar(&p.portName, "peer-port-name", "metrics", "with --peer-service: the Service port of the peers' metrics listener")
	fs.IntVar(&p.peerPort, "peer-port", 0, "with --peer-service: the peers' metrics port when the Service has no --peer-port-name port (0: required)")
	fs.StringVar(&p.podIP, "pod-ip", os.Getenv("POD_IP"), "this pod's IP, left out of --peer-service endpoints (default $POD_IP)")
	fs.StringVar(&p.replica, "replica-name", os.Getenv("POD_NAME"), "this replica's stable name in peer reports (default $POD_NAME, else hostname-pid)")
	fs.DurationVar(&p.interval, "peer-interval", peers.DefaultInterval, "how often each peer's load report is pulled")
	fs.DurationVar(&p.staleAfter, "peer-stale-after", peers.DefaultStaleAfter, "a peer failing this long is left out of the load picture until it answers again")
	fs.DurationVar(&p.bootstrapWait, "peer-bootstrap-wait", peers.DefaultBootstrapWait, "at start, how long to try to restore placements from a peer before serving without them")
	fs.BoolVar(&p.forward, "forward-to-owner", true, "with peers: send each request on to the replica that owns the instance it is placed on, which decides it with that instance's exact load (see sidecar/README.md)")
	fs.StringVar(&p.advertise, "advertise-address", "", "with --forward-to-owner: host:port where peers reach this replica's client port (default $POD_IP and the port of --listen; empty and no pod IP: this replica takes no forwarded requests)")
	fs.BoolVar(&p.debugRoute, "enable-debug-route", false, "serve POST /debug/route on the metrics listener: where a body would be routed, without sending it")
}

func (p *peerFlags) validate() error {
	if p.static != "" && p.service != "" {
		return errors.New("--peers and --peer-service are exclusive")
	}
	if _, err := peers.ParseStatic(p.static); err != nil {
		return fmt.Errorf("--peers: %w", err)
	}
	if p.service != "" {
		if _, _, err := peers.ParseServiceRef(p.service); err != nil {
			return fmt.Errorf("--peer-service: %w", err)
		}
	}
	if p.peerPort < 0 || p.peerPort > 65535 {
		return fmt.Errorf("--peer-port %d: not a port", p.peerPort)
	}
	if p.replica == "" {
		// Outside a pod several replicas may share a host (benchmarks,
		// tests); the pid keeps their names apart.
		h, err := os.Hostname()
		if err != nil || h == "" {
			return errors.New("--replica-name: no POD_NAME and no hostname")
		}
		p.replica = h + "-" + strconv.Itoa(os.Getpid())
	}
	return nil
}

// startPeers serves this replica's load report on the metrics mux, then,
// when peers are configured, restores placements from one of them (bounded
// by --peer-bootstrap-wait, before the listeners open so no request is
// decided on a cold picture) and keeps pulling their reports until ctx ends.
func startPeers(ctx context.Context, wg *sync.WaitGroup, f *flags, r *proxy.Router, admin *http.ServeMux, log logr.Logger) error {
	log = log.WithName("peers")
	var st peers.State = r.Policy()
	opts := peers.Options{Replica: f.peers.replica, Interval: f.peers.interval, StaleAfter: f.peers.staleAfter, BootstrapWait: f.peers.bootstrapWait}
	if f.peers.debugRoute {
		admin.Handle("POST /debug/route", r.DebugRoute(st.Peek))
	}
	var disc peers.Discovery
	switch {
	case f.peers.static != "":
		list, err := peers.ParseStatic(f.peers.static)
		if err != nil {
			return err
		}
		disc = list
	case f.peers.service != "":
		ns, name, err := peers.ParseServiceRef(f.peers.service)
		if err != nil {
			return err
		}
		client, err := kubeClient(f.kubeconfig)
		if err != nil {
			return err
		}
		disc = peers.EndpointSlices{Client: client, Namespace: ns, Service: name, PortName: f.peers.portName, Port: int32(f.peers.peerPort), SelfIP: f.peers.podIP}
	default:
		// Served all the same: a peer configured with this replica's
		// address still pulls its (empty) report.
		admin.Handle(peers.Prefix, peers.NewServer(opts, st, nil).Handler())
		return nil
	}
	if f.peers.forward {
		if addr := advertiseAddress(f); addr != "" {
			r.Policy().SetForward(f.peers.replica, addr)
		} else {
			log.Info("not taking forwarded requests: no --advertise-address and no pod IP; this replica decides every request it receives itself")
		}
	}
	puller := peers.NewPuller(opts, st, r.Metrics().Registry, log)
	admin.Handle(peers.Prefix, peers.NewServer(opts, st, puller).Handler())
	wg.Go(func() {
		if err := puller.Run(ctx, disc); err != nil {
			log.Error(err, "peer exchange stopped; deciding on the local picture")
		}
	})
	if err := puller.Bootstrap(ctx); err != nil {
		log.Info("starting without a peer snapshot", "reason", err.Error())
	}
	return nil
}

// advertiseAddress is where peers forward requests to this replica:
// --advertise-address, else the pod IP with the client port of --listen.
func advertiseAddress(f *flags) string {
	if f.peers.advertise != "" || f.peers.podIP == "" {
		return f.peers.advertise
	}
	_, port, err := net.SplitHostPort(f.listen)
	if err != nil || port == "" {
		return ""
	}
	return net.JoinHostPort(f.peers.podIP, port)
}

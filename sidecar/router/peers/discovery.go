package peers

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Discovery finds the peer replicas' addresses (host:port of their metrics
// listeners) and calls update with the whole set whenever it changes, until
// ctx ends.
type Discovery interface {
	Run(ctx context.Context, update func(addrs []string)) error
}

// Static is a fixed list of peers (benchmarks and tests). It may include
// this replica's own address: the puller recognises itself by name.
type Static []string

// ParseStatic parses "host:port,host:port".
func ParseStatic(list string) (Static, error) {
	var out Static
	for part := range strings.SplitSeq(list, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(part); err != nil {
			return nil, fmt.Errorf("peer %q: %w", part, err)
		}
		out = append(out, part)
	}
	return out, nil
}

// Run reports the list once.
func (s Static) Run(ctx context.Context, update func([]string)) error {
	update(slices.Clone(s))
	<-ctx.Done()
	return nil
}

// EndpointSlices follows the EndpointSlices of the Service that selects the
// router pods: one informer, scoped to the namespace and the Service's
// label, so the router needs only list and watch on EndpointSlices there.
type EndpointSlices struct {
	Client    kubernetes.Interface
	Namespace string
	Service   string
	// PortName is the Service port of the peers' metrics listener; when
	// the Service has no such port (the client-facing Service, which may be
	// a LoadBalancer, must not expose metrics), Port is used with the
	// endpoints' addresses.
	PortName string
	Port     int32
	// SelfIP is this pod's IP, left out of the peers.
	SelfIP string
}

// ParseServiceRef splits "namespace/name".
func ParseServiceRef(ref string) (namespace, name string, err error) {
	ns, n, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || n == "" || strings.Contains(n, "/") {
		return "", "", fmt.Errorf("peer service %q: want namespace/name", ref)
	}
	return ns, n, nil
}

// Run watches until ctx ends.
func (e EndpointSlices) Run(ctx context.Context, update func([]string)) error {
	selector := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: e.Service})
	factory := informers.NewSharedInformerFactoryWithOptions(e.Client, 0,
		informers.WithNamespace(e.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector.String() }))
	es := factory.Discovery().V1().EndpointSlices()
	inf, lister := es.Informer(), es.Lister()
	changed := make(chan struct{}, 1)
	notify := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: notify, UpdateFunc: func(_, o any) { notify(o) }, DeleteFunc: notify,
	}); err != nil {
		return fmt.Errorf("watch EndpointSlices of %s/%s: %w", e.Namespace, e.Service, err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}
	// The first update, even empty, tells the puller that discovery has
	// answered (a lone replica need not wait for a snapshot).
	var last []string
	first := true
	for {
		items, err := lister.EndpointSlices(e.Namespace).List(selector)
		if err != nil {
			return fmt.Errorf("list EndpointSlices of %s/%s: %w", e.Namespace, e.Service, err)
		}
		addrs := peerAddrs(items, e.PortName, e.Port, e.SelfIP)
		if first || !slices.Equal(addrs, last) {
			update(addrs)
			last, first = addrs, false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// peerAddrs takes the serving endpoints' addresses with the named port (or
// the fallback port), sorted and without duplicates (a pod may appear in two slices while
// they are rebalanced). Serving, not only ready, keeps a terminating
// replica that still finishes requests in the picture until it stops.
func peerAddrs(items []*discoveryv1.EndpointSlice, portName string, fallback int32, selfIP string) []string {
	var out []string
	for _, s := range items {
		port := fallback
		for _, p := range s.Ports {
			if p.Name != nil && *p.Name == portName && p.Port != nil {
				port = *p.Port
			}
		}
		if port == 0 {
			continue
		}
		for _, ep := range s.Endpoints {
			if !serving(ep.Conditions) {
				continue
			}
			for _, ip := range ep.Addresses {
				if ip != selfIP {
					out = append(out, net.JoinHostPort(ip, strconv.Itoa(int(port))))
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// serving follows the API's rule: an unknown condition counts as true.
func serving(c discoveryv1.EndpointConditions) bool {
	if c.Serving != nil {
		return *c.Serving
	}
	return c.Ready == nil || *c.Ready
}

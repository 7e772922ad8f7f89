package harness

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/warmroute/warmroute/internal/podspec"
)

// sliceManager names the harness as the controller of the EndpointSlices
// it writes, so the endpointslice controller leaves them alone.
const sliceManager = "harness.warmroute.dev"

// MirrorEndpointSlices plays the endpointslice controller for one Service
// until ctx ends. The real one runs in the local cluster but cannot publish
// its pods: their IPs are 127.x, and the API server refuses loopback
// addresses in IPv4 and IPv6 EndpointSlices, so the Service's own slices
// stay empty. This writes the same endpoints (the Service's selected pods
// with an IP, with the controller's ready/serving/terminating rules) into
// one slice of address type FQDN, whose addresses are validated as names,
// which a dotted IP is. Consumers that read addresses without looking at
// the type (the router's peer discovery) see what a cluster would give them.
func MirrorEndpointSlices(ctx context.Context, client kubernetes.Interface, namespace, service string) error {
	svc, err := client.CoreV1().Services(namespace).Get(ctx, service, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("mirror EndpointSlices of %s/%s: %w", namespace, service, err)
	}
	selector := labels.SelectorFromSet(svc.Spec.Selector)
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector.String() }))
	pods := factory.Core().V1().Pods()
	changed := make(chan struct{}, 1)
	notify := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: notify, UpdateFunc: func(_, o any) { notify(o) }, DeleteFunc: notify,
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	go func() {
		defer factory.Shutdown()
		if !cache.WaitForCacheSync(ctx.Done(), pods.Informer().HasSynced) {
			return
		}
		for {
			list, err := pods.Lister().Pods(namespace).List(selector)
			if err == nil {
				err = writeSlice(ctx, client, svc, list)
			}
			var retry <-chan time.Time
			if err != nil {
				// Conflicts and the like: try again shortly; the tests
				// wait on what the consumers see.
				retry = time.After(time.Second)
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			case <-retry:
			}
		}
	}()
	return nil
}

// writeSlice creates or updates the Service's mirrored slice.
func writeSlice(ctx context.Context, client kubernetes.Interface, svc *corev1.Service, pods []*corev1.Pod) error {
	slices.SortFunc(pods, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	want := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: svc.Name + "-harness", Namespace: svc.Namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy:   sliceManager,
			},
			// Collected with the Service, like the controller's slices.
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID}},
		},
		AddressType: discoveryv1.AddressTypeFQDN,
		Endpoints:   []discoveryv1.Endpoint{},
	}
	for _, sp := range svc.Spec.Ports {
		// Named target ports resolve to the pods' container ports, as
		// the controller does; every router pod declares the same.
		port := sp.TargetPort.IntVal
		if name := sp.TargetPort.StrVal; name != "" && len(pods) > 0 {
			port = podspec.ContainerPort(pods[0], name)
		}
		if port == 0 {
			continue
		}
		want.Ports = append(want.Ports, discoveryv1.EndpointPort{Name: ptr.To(sp.Name), Port: ptr.To(port), Protocol: ptr.To(sp.Protocol)})
	}
	for _, pod := range pods {
		if pod.Status.PodIP == "" || pod.Spec.NodeName == "" {
			continue
		}
		ready := podReady(pod)
		terminating := pod.DeletionTimestamp != nil
		want.Endpoints = append(want.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{pod.Status.PodIP},
			Conditions: discoveryv1.EndpointConditions{
				Ready: ptr.To(ready && !terminating), Serving: ptr.To(ready), Terminating: ptr.To(terminating),
			},
			NodeName:  ptr.To(pod.Spec.NodeName),
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		})
	}
	api := client.DiscoveryV1().EndpointSlices(svc.Namespace)
	got, err := api.Get(ctx, want.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = api.Create(ctx, want, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	got.Endpoints, got.Ports = want.Endpoints, want.Ports
	_, err = api.Update(ctx, got, metav1.UpdateOptions{})
	return err
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

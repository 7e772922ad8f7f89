package peers

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/warmroute/warmroute/test/localcluster"
)

func routerSlice(namespace, name, service string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints:   eps,
	}
}

// followSlices runs EndpointSlices discovery for team/chat as the pod at
// 10.0.0.9 through client (admin) and watcher (the router's identity), and
// checks the peers it reports as the slices change.
func followSlices(t *testing.T, admin, watcher kubernetes.Interface) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	slicesAPI := admin.DiscoveryV1().EndpointSlices("team")
	create := func(s *discoveryv1.EndpointSlice) {
		t.Helper()
		if _, err := admin.DiscoveryV1().EndpointSlices(s.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(routerSlice("team", "chat-a", "chat",
		endpoint("10.0.0.1", ptr.To(true), nil), endpoint("10.0.0.2", ptr.To(true), nil), endpoint("10.0.0.9", ptr.To(true), nil)))
	// Neither another Service's endpoints nor the same name elsewhere.
	create(routerSlice("team", "other-a", "other", endpoint("10.0.1.1", nil, nil)))
	create(routerSlice("elsewhere", "chat-a", "chat", endpoint("10.0.2.1", nil, nil)))

	updates := make(chan []string, 16)
	done := make(chan error, 1)
	go func() {
		done <- EndpointSlices{Client: watcher, Namespace: "team", Service: "chat", PortName: "metrics", Port: 9090, SelfIP: "10.0.0.9"}.
			Run(ctx, func(a []string) { updates <- a })
	}()
	expect := func(what string, want ...string) {
		t.Helper()
		for {
			select {
			case got := <-updates:
				if slices.Equal(got, want) {
					return
				}
			case err := <-done:
				t.Fatalf("%s: discovery stopped: %v", what, err)
			case <-ctx.Done():
				t.Fatalf("%s: never saw %v", what, want)
			}
		}
	}
	expect("initial", "10.0.0.1:9090", "10.0.0.2:9090")

	s, err := slicesAPI.Get(ctx, "chat-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Endpoints[1].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(false), Terminating: ptr.To(true)}
	if _, err := slicesAPI.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("a peer stops serving", "10.0.0.1:9090")

	create(routerSlice("team", "chat-b", "chat", endpoint("10.0.0.3", ptr.To(true), nil)))
	expect("a second slice", "10.0.0.1:9090", "10.0.0.3:9090")

	if err := slicesAPI.Delete(ctx, "chat-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("a slice deleted", "10.0.0.3:9090")
	cancel()
	if err := <-done; err != nil {
		t.Errorf("discovery ended with %v", err)
	}
}

func TestEndpointSliceDiscoveryFake(t *testing.T) {
	client := fake.NewClientset()
	followSlices(t, client, client)
}

// Against a real API server, with only the rights the operator gives the
// router's ServiceAccount (list and watch EndpointSlices in its namespace).
func TestEndpointSliceDiscoveryAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kube-apiserver")
	}
	bin, err := localcluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Options{BinDir: bin})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Stop() }()
	admin := kubernetes.NewForConfigOrDie(c.Config)
	for _, ns := range []string{"team", "elsewhere"} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	asRouter := rest.CopyConfig(c.Config)
	asRouter.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:team:chat-router",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated"}}
	router := kubernetes.NewForConfigOrDie(asRouter)
	// The identity really is constrained: nothing is granted yet.
	if _, err := router.DiscoveryV1().EndpointSlices("team").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("list as the router before the Role: %v, want Forbidden", err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "chat-router"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}}}}
	if _, err := admin.RbacV1().Roles("team").Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "chat-router"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "chat-router"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "team", Name: "chat-router"}}}
	if _, err := admin.RbacV1().RoleBindings("team").Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	followSlices(t, admin, router)
}

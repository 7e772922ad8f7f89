package main

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	"github.com/warmroute/warmroute/test/localcluster"
)

// TestActivationStampsTheLease: on a real API server, a held request
// stamps the election Lease with the demand time, keeps what the election
// wrote there, and a second one within activationInterval writes nothing.
func TestActivationStampsTheLease(t *testing.T) {
	client := kubernetes.NewForConfigOrDie(localcluster.APIServer(t))
	leases := client.CoordinationV1().Leases("default")
	ctx := context.Background()
	if _, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "ep-router"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("router-0@10.0.0.1:9091")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := &leaseStamp{client: client, namespace: "default", lease: "ep-router", log: logr.Discard(),
		annotation: routingv1alpha1.DemandAnnotation, interval: activationInterval}
	stamp := func() (string, string) {
		l, err := leases.Get(ctx, "ep-router", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l.Annotations[routingv1alpha1.DemandAnnotation], ptr.Deref(l.Spec.HolderIdentity, "")
	}
	before := time.Now().UTC()
	a.request()
	a.request() // within the interval: no second write
	var at string
	for deadline := time.Now().Add(10 * time.Second); at == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		at, _ = stamp()
	}
	when, err := time.Parse(time.RFC3339Nano, at)
	if err != nil || when.Before(before) {
		t.Fatalf("demand stamp %q (%v), want a time from %s on", at, err, before)
	}
	time.Sleep(300 * time.Millisecond)
	again, holder := stamp()
	if again != at {
		t.Fatalf("a second write within %s: %q then %q", activationInterval, at, again)
	}
	if holder != "router-0@10.0.0.1:9091" {
		t.Fatalf("the election's holder was lost: %q", holder)
	}
}

// TestLastRequestNeverMovesBack: a replica whose stamp is older than the
// one on the Lease (another replica served later) leaves it.
func TestLastRequestNeverMovesBack(t *testing.T) {
	client := kubernetes.NewForConfigOrDie(localcluster.APIServer(t))
	leases := client.CoordinationV1().Leases("default")
	ctx := context.Background()
	later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	if _, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "ep2-router",
		Annotations: map[string]string{routingv1alpha1.LastRequestAnnotation: later}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := &leaseStamp{client: client, namespace: "default", lease: "ep2-router", log: logr.Discard(),
		annotation: routingv1alpha1.LastRequestAnnotation, interval: routingv1alpha1.LastRequestInterval}
	a.write(time.Now())
	l, err := leases.Get(ctx, "ep2-router", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Annotations[routingv1alpha1.LastRequestAnnotation]; got != later {
		t.Fatalf("last-request-at moved back: %q, want %q", got, later)
	}
	a.write(time.Now().Add(2 * time.Hour))
	if l, err = leases.Get(ctx, "ep2-router", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := l.Annotations[routingv1alpha1.LastRequestAnnotation]; got == later {
		t.Fatalf("a newer stamp was not written: %q", got)
	}
}

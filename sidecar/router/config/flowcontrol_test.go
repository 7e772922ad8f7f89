package config

import (
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

// flowControlDoc is a routing document of generation gen with the given
// flowControl JSON ("" for none).
func flowControlDoc(gen int, flowControl string) []byte {
	d := `{"apiVersion":"routing.warmroute.dev/v1alpha1","kind":"RoutingConfig","model":"m","generation":` + strconv.Itoa(gen) +
		`,"instances":[{"id":"a","address":"127.0.0.1:9000"}]`
	if flowControl != "" {
		d += `,"flowControl":` + flowControl
	}
	return []byte(d + "}")
}

// TestLoaderFlowControl: the router takes flow control from the routing
// document as the operator wrote it, refuses a document whose flow control
// it cannot use (naming the field), keeps the last good one in force, and
// turns flow control off when a later document drops it.
func TestLoaderFlowControl(t *testing.T) {
	var (
		mu      sync.Mutex
		inForce *routingv1alpha1.Document
	)
	l := &Loader{Log: logr.Discard(), Apply: func(d *routingv1alpha1.Document) error {
		mu.Lock()
		defer mu.Unlock()
		inForce = d
		return nil
	}}
	current := func() *routingv1alpha1.Document {
		mu.Lock()
		defer mu.Unlock()
		return inForce
	}
	const good = `{"default":{"weight":1,"priority":0,"maxQueued":100},"tenants":{"team-a":{"weight":3,"priority":100,"tokensPerMinute":50000,"maxQueued":10}},"queueTimeoutMillis":30000,"maxQueued":1000}`

	if res, err := l.Offer(SourceAPI, flowControlDoc(1, good)); res != Applied {
		t.Fatalf("a good document: %s (%v)", res, err)
	}
	fc := current().FlowControl
	if fc == nil || fc.Tenants["team-a"] != (routingv1alpha1.TenantLimits{Weight: 3, Priority: 100, TokensPerMinute: 50000, MaxQueued: 10}) ||
		fc.Default.Weight != 1 || fc.QueueTimeoutMillis != 30000 || fc.MaxQueued != 1000 {
		t.Fatalf("flow control in force: %+v", fc)
	}

	for _, tc := range []struct{ name, flowControl, wantErr string }{
		{"a weight of 0", strings.Replace(good, `"weight":3`, `"weight":0`, 1), `flowControl.tenants["team-a"].weight: 0 is outside 1..1000`},
		{"a negative tenant queue", strings.Replace(good, `"maxQueued":10}`, `"maxQueued":-1}`, 1), `flowControl.tenants["team-a"].maxQueued: -1`},
		{"no queue timeout", strings.Replace(good, `"queueTimeoutMillis":30000`, `"queueTimeoutMillis":0`, 1), "flowControl.queueTimeoutMillis: 0"},
		{"an unknown field", strings.Replace(good, `"priority":100`, `"prio":100`, 1), `unknown field "flowControl.tenants.team-a.prio"`},
	} {
		res, err := l.Offer(SourceAPI, flowControlDoc(2, tc.flowControl))
		if res != Rejected || err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: %s, error %v; want rejected naming %q", tc.name, res, err, tc.wantErr)
		}
		if d := current(); d.Generation != 1 || d.FlowControl.Tenants["team-a"].Weight != 3 {
			t.Fatalf("%s: the last good document is no longer in force: generation %d, %+v", tc.name, d.Generation, d.FlowControl)
		}
	}

	if res, err := l.Offer(SourceAPI, flowControlDoc(3, "")); res != Applied || current().FlowControl != nil {
		t.Fatalf("a document without flow control: %s (%v), flow control %+v", res, err, current().FlowControl)
	}
}

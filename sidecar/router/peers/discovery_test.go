package peers

import (
	"slices"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

func endpoint(ip string, ready, serving *bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ready, Serving: serving}}
}

func TestPeerAddrs(t *testing.T) {
	named := []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}, {Name: ptr.To("metrics"), Port: ptr.To[int32](9090)}}
	httpOnly := []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}}
	for _, tc := range []struct {
		name     string
		slices   []*discoveryv1.EndpointSlice
		fallback int32
		want     []string
	}{
		{"named port, self and unready left out", []*discoveryv1.EndpointSlice{{Ports: named, Endpoints: []discoveryv1.Endpoint{
			endpoint("10.0.0.3", nil, nil), endpoint("10.0.0.1", ptr.To(true), nil), endpoint("10.0.0.2", ptr.To(false), nil),
			endpoint("10.0.0.9", ptr.To(true), nil)}}}, 0, []string{"10.0.0.1:9090", "10.0.0.3:9090"}},
		{"terminating but serving stays", []*discoveryv1.EndpointSlice{{Ports: named, Endpoints: []discoveryv1.Endpoint{
			endpoint("10.0.0.1", ptr.To(false), ptr.To(true)), endpoint("10.0.0.2", ptr.To(false), ptr.To(false))}}}, 0, []string{"10.0.0.1:9090"}},
		{"no metrics port and no fallback", []*discoveryv1.EndpointSlice{{Ports: httpOnly, Endpoints: []discoveryv1.Endpoint{
			endpoint("10.0.0.1", nil, nil)}}}, 0, nil},
		{"fallback port", []*discoveryv1.EndpointSlice{{Ports: httpOnly, Endpoints: []discoveryv1.Endpoint{
			endpoint("10.0.0.1", nil, nil)}}}, 9090, []string{"10.0.0.1:9090"}},
		{"a pod in two slices once; IPv6 bracketed", []*discoveryv1.EndpointSlice{
			{Ports: named, Endpoints: []discoveryv1.Endpoint{endpoint("10.0.0.1", nil, nil)}},
			{Ports: named, Endpoints: []discoveryv1.Endpoint{endpoint("10.0.0.1", nil, nil), endpoint("fd00::1", nil, nil)}}}, 0,
			[]string{"10.0.0.1:9090", "[fd00::1]:9090"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := peerAddrs(tc.slices, "metrics", tc.fallback, "10.0.0.9"); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

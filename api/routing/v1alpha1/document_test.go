package v1alpha1

import (
	"strings"
	"testing"
)

func TestInstanceAddresses(t *testing.T) {
	for _, tc := range []struct {
		addr, wantErr string
		loopback      bool
	}{
		{addr: "10.0.0.1:8000"},
		{addr: "[fd00::6]:8000"},
		{addr: "127.0.0.1:8000", loopback: true},
		{addr: "127.1.0.4:8000", loopback: true},
		{addr: "[::1]:8000", loopback: true},
		{addr: "[::ffff:127.0.0.1]:8000", loopback: true},
		{addr: "vllm-0.vllm:8000", wantErr: "not a name"},
		{addr: "localhost:8000", wantErr: "not a name"},
		{addr: "10.0.0.1", wantErr: "not IP:port"},
		{addr: "10.0.0.1:0", wantErr: "no valid port"},
		{addr: "0.0.0.0:8000", wantErr: "unspecified"},
		{addr: "[::]:8000", wantErr: "unspecified"},
		{addr: "169.254.169.254:80", wantErr: "link-local"},
		{addr: "[fe80::1]:8000", wantErr: "link-local"},
		{addr: "[fe80::1%eth0]:8000", wantErr: "not a name"},
		{addr: "[::ffff:169.254.169.254]:80", wantErr: "link-local"},
		{addr: "224.0.0.1:8000", wantErr: "multicast"},
		{addr: "[ff02::1]:8000", wantErr: "multicast"},
	} {
		err := validAddress(tc.addr)
		if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: error %v, want %q", tc.addr, err, tc.wantErr)
		}
		if got := IsLoopbackAddress(tc.addr); got != tc.loopback {
			t.Errorf("%s: loopback %v", tc.addr, got)
		}
	}
	d := Document{APIVersion: APIVersion, Kind: Kind, Model: "m", Instances: []Instance{{ID: "a", Address: "169.254.169.254:80"}}}
	d.Default()
	if err := d.Validate(); err == nil || !strings.Contains(err.Error(), "instances[0].address") {
		t.Fatalf("document with a link-local instance: %v", err)
	}
}

// TestDrainingIsOnlyWrittenWhenSet: a document with no draining instance
// encodes as before the field existed (routers of that version read it),
// and a draining mark survives a round trip.
func TestDrainingIsOnlyWrittenWhenSet(t *testing.T) {
	d := Document{APIVersion: APIVersion, Kind: Kind, Model: "m", Instances: []Instance{{ID: "a", Address: "10.0.0.1:8000"}}}
	d.Default()
	data, err := d.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "draining") {
		t.Errorf("a document without draining instances mentions the field:\n%s", data)
	}
	d.Instances = append(d.Instances, Instance{ID: "b", Address: "10.0.0.2:8000", Draining: true})
	if data, err = d.Encode(); err != nil {
		t.Fatal(err)
	}
	got, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.Instances[0].Draining || !got.Instances[1].Draining {
		t.Errorf("decoded instances %+v, want only b draining", got.Instances)
	}
}

package v1alpha1

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzDecode checks that no input makes the decoder panic, and that every
// document it accepts survives an Encode/Decode round trip unchanged (the
// operator's skip-unchanged-writes relies on Encode being faithful). The
// comparison is on encoded bytes, since an empty list and an absent one
// encode alike.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"routing.warmroute.dev/v1alpha1","kind":"RoutingConfig","model":"m","hashSeed":7,
"instances":[{"id":"a","address":"10.0.0.1:8000"},{"id":"b","address":"10.0.0.2:8000","weight":2}],
"adapters":[{"name":"l","ready":["a"]}]}`))
	f.Add([]byte(`{"apiVersion":"routing.warmroute.dev/v1alpha1","kind":"RoutingConfig","strategy":"RANDOM","prefixAware":{"prefixLength":1024,"concurrencyThreshold":1}}`))
	f.Add([]byte(`{"apiVersion":"routing.warmroute.dev/v1alpha1","kind":"RoutingConfig","flowControl":{"default":{"weight":1,"priority":0,"maxQueued":100},
"tenants":{"a":{"weight":3,"priority":-5,"requestsPerMinute":60,"tokensPerMinute":9000,"maxQueued":0}},"queueTimeoutMillis":30000,"maxQueued":1000,
"objectives":{"batch":-50}}}`))
	f.Add([]byte(`{"kind":"x"}`))
	f.Add([]byte(`{} {}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Decode(data)
		if err != nil {
			return
		}
		out, err := d.Encode()
		if err != nil {
			t.Fatalf("encode accepted document: %v", err)
		}
		d2, err := Decode(out)
		if err != nil {
			t.Fatalf("re-decode %s: %v", out, err)
		}
		out2, err := d2.Encode()
		if err != nil || !bytes.Equal(out, out2) {
			t.Fatalf("round trip changed the document:\n%s\n%s", out, out2)
		}
	})
}

func TestDecodeRefusesMisspelledKeys(t *testing.T) {
	for _, tc := range []struct{ doc, field string }{
		{`{"apiVersion":"routing.warmroute.dev/v1alpha1","kind":"RoutingConfig","HashSeed":7}`, `"HashSeed"`},
		{`{"apiVersion":"routing.warmroute.dev/v1alpha1","kind":"RoutingConfig","instances":[{"ID":"a","address":"10.0.0.1:8000"}]}`, `"instances[0].ID"`},
		{`{"ApiVersion":"routing.warmroute.dev/v1alpha1","kind":"RoutingConfig"}`, `"ApiVersion"`},
		{`{"apiVersion":"routing.warmroute.dev/v1alpha1","kind":"RoutingConfig","prefixAware":{"prefixlength":2048}}`, `"prefixAware.prefixlength"`},
	} {
		if _, err := Decode([]byte(tc.doc)); err == nil || !strings.Contains(err.Error(), "unknown field "+tc.field) {
			t.Errorf("Decode(%s) = %v, want an unknown field error naming %s", tc.doc, err, tc.field)
		}
	}
	for _, doc := range []string{`{} {}`, `{}}`, `{"kind":`} {
		if _, err := Decode([]byte(doc)); err == nil {
			t.Errorf("Decode(%s) accepted malformed JSON", doc)
		}
	}
	ok := `{"apiVersion":"routing.warmroute.dev/v1alpha1","kind":"RoutingConfig","hashSeed":7,"instances":[{"id":"a","address":"10.0.0.1:8000"}],"adapters":[]}`
	if _, err := Decode([]byte(ok)); err != nil {
		t.Errorf("Decode(%s): %v", ok, err)
	}
}

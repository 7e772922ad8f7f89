package picker

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func counter(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

func TestCallSignatures(t *testing.T) {
	keys := testKeys(t, testSecret)
	other := testKeys(t, []byte("another endpoint's key, 32 bytes"))
	now := time.Now()
	body := []byte("a pick")
	signed := func(k Keys, at time.Time, b []byte) *http.Request {
		req, _ := http.NewRequest(http.MethodPost, "http://x"+PathPick, bytes.NewReader(b))
		k.signCall(req, "router-1", b, at)
		return req
	}
	for _, tc := range []struct {
		name string
		req  *http.Request
		body []byte
		ok   bool
	}{
		{"signed", signed(keys, now, body), body, true},
		{"another endpoint's key", signed(other, now, body), body, false},
		{"unsigned", func() *http.Request { r, _ := http.NewRequest(http.MethodPost, "http://x"+PathPick, nil); return r }(), body, false},
		{"body changed", signed(keys, now, body), []byte("another pick"), false},
		{"too old", signed(keys, now.Add(-2*maxSkew), body), body, false},
		{"from the future", signed(keys, now.Add(2*maxSkew), body), body, false},
	} {
		caller, _, err := keys.verifyCall(tc.req, tc.body, now)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want ok %v", tc.name, err, tc.ok)
		}
		if tc.ok && caller != "router-1" {
			t.Errorf("%s: caller %q", tc.name, caller)
		}
	}
	if _, err := DeriveKeys([]byte("short")); err == nil {
		t.Error("derived keys from 5 bytes of secret")
	}
	if keys.HashSeed == other.HashSeed {
		t.Error("two secrets gave one hash seed")
	}
}

func TestAnswerSignatures(t *testing.T) {
	keys := testKeys(t, testSecret)
	other := testKeys(t, []byte("another endpoint's key, 32 bytes"))
	h := http.Header{}
	keys.signAnswer(h, "call-mac", []byte("answer"))
	if err := keys.verifyAnswer(h, "call-mac", []byte("answer")); err != nil {
		t.Fatal(err)
	}
	if keys.verifyAnswer(h, "another call", []byte("answer")) == nil {
		t.Error("accepted an answer to another call")
	}
	if other.verifyAnswer(h, "call-mac", []byte("answer")) == nil {
		t.Error("accepted an answer signed with another key")
	}
}

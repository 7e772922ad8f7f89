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

// A call's header is checked before its body is read: it covers method,
// path, caller, session, sequence number, time and the body's length.
func TestCallSignatures(t *testing.T) {
	keys := testKeys(t, testSecret)
	other := testKeys(t, []byte("another endpoint's key, 32 bytes"))
	now := time.Now()
	s := keys.newSession()
	signed := func(k Keys, at time.Time, length int64, path string) *http.Request {
		req, _ := http.NewRequest(http.MethodPost, "http://x"+path, nil)
		req.ContentLength = 512
		k.signCall(req, "router-1", s, 7, length, at)
		return req
	}
	moved := signed(keys, now, 512, PathHandoff)
	moved.URL.Path = PathPick
	for _, tc := range []struct {
		name string
		req  *http.Request
		ok   bool
	}{
		{"signed", signed(keys, now, 512, PathPick), true},
		{"another endpoint's key", signed(other, now, 512, PathPick), false},
		{"unsigned", func() *http.Request { r, _ := http.NewRequest(http.MethodPost, "http://x"+PathPick, nil); return r }(), false},
		{"body length changed", signed(keys, now, 256, PathPick), false},
		{"another path", moved, false},
		{"too old", signed(keys, now.Add(-2*maxSkew), 512, PathPick), false},
		{"from the future", signed(keys, now.Add(2*maxSkew), 512, PathPick), false},
	} {
		h, err := keys.verifyCall(tc.req, now)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want ok %v", tc.name, err, tc.ok)
		}
		if tc.ok && (h.caller != "router-1" || h.seq != 7 || h.session != s.id) {
			t.Errorf("%s: caller %q, seq %d", tc.name, h.caller, h.seq)
		}
	}
	if _, err := DeriveKeys([]byte("short")); err == nil {
		t.Error("derived keys from 5 bytes of secret")
	}
	if keys.HashSeed == other.HashSeed {
		t.Error("two secrets gave one hash seed")
	}
}

// The replay window accepts each sequence number once, in any order
// within the window, and nothing older.
func TestReplayWindow(t *testing.T) {
	var p peer
	now := time.Now()
	for _, tc := range []struct {
		seq  uint64
		ok   bool
		what string
	}{
		{5, true, "the first call"},
		{5, false, "the same call again"},
		{3, true, "an earlier call overtaken by a later one"},
		{3, false, "the overtaken call again"},
		{replayWindow + 4, true, "a jump of almost a window"},
		{replayWindow + 3, true, "a number skipped by the jump, in the slot of 3"},
		{replayWindow + 3, false, "that number again"},
		{4, false, "a call older than the window"},
		{3 * replayWindow, true, "a jump of more than a window"},
		{3*replayWindow - 1, true, "a number skipped by that jump"},
	} {
		if got := p.accept(tc.seq, now); got != tc.ok {
			t.Errorf("%s (seq %d): accepted %v, want %v", tc.what, tc.seq, got, tc.ok)
		}
	}
}

// Padding hides a body's length within its bucket, and the body comes
// back whole.
func TestPadding(t *testing.T) {
	for _, n := range []int{0, 1, 100, 250, 300, 2048, 5000, maxBucket, 3*maxBucket + 1} {
		body := bytes.Repeat([]byte{7}, n)
		p := padded(body, 16)
		if len(p) < minBucket || (len(p) <= maxBucket && len(p)&(len(p)-1) != 0) || (len(p) > maxBucket && len(p)%maxBucket != 0) {
			t.Errorf("%d bytes padded to %d, not a bucket", n, len(p))
		}
		got, err := unpadded(p)
		if err != nil || !bytes.Equal(got, body) {
			t.Errorf("%d bytes: came back as %d (%v)", n, len(got), err)
		}
	}
	if len(padded(make([]byte, 100), 16)) != len(padded(make([]byte, 200), 16)) {
		t.Error("100 and 200 bytes padded to different sizes")
	}
}

package picker

import (
	"reflect"
	"testing"

	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// TestWarmOnTheWire: the answer carries the warm target and its tokens,
// and the replica's eventWarmed carries whether the copy was answered.
func TestWarmOnTheWire(t *testing.T) {
	a := answer{Epoch: 3, Order: []string{"vllm-0", "vllm-2"}, Prompt: 900, Prefill: 40,
		Decision: policy.Decision{Strategy: policy.PrefixAware}, Warm: "vllm-2", WarmTokens: 900}
	got, err := decodeAnswer(a.append(nil))
	if err != nil || !reflect.DeepEqual(got, a) {
		t.Fatalf("answer round trip: %+v, %v; want %+v", got, err, a)
	}
	// An answer without a warm target carries no warm fields, so that it
	// is byte for byte what a picker of the version before warming sends,
	// which both versions read.
	warm := a.append(nil)
	a.Warm, a.WarmTokens = "", 0
	plain := a.append(nil)
	if len(warm)-len(plain) != 1+len("vllm-2")+2 {
		t.Fatalf("an answer without a warm target is %d bytes, with one %d: the warm fields are not left out", len(plain), len(warm))
	}
	if got, err := decodeAnswer(plain); err != nil || !reflect.DeepEqual(got, a) {
		t.Fatalf("answer without a warm target: %+v, %v; want %+v", got, err, a)
	}
	evs := []event{{Kind: eventWarmed, Seq: 5, OK: true}, {Kind: eventWarmed, Seq: 6}, {Kind: eventDone, Seq: 5}}
	back, err := decodeEvents(appendEvents(nil, evs))
	if err != nil || !reflect.DeepEqual(back, evs) {
		t.Fatalf("events round trip: %+v, %v; want %+v", back, err, evs)
	}
}

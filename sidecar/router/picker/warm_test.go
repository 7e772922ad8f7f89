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
	// A picker of a version before warming sends no warm fields (an empty
	// target and zero tokens are a byte each).
	a.Warm, a.WarmTokens = "", 0
	old := a.append(nil)
	if got, err := decodeAnswer(old[:len(old)-2]); err != nil || !reflect.DeepEqual(got, a) {
		t.Fatalf("answer of an older picker: %+v, %v; want %+v", got, err, a)
	}
	evs := []event{{Kind: eventWarmed, Seq: 5, OK: true}, {Kind: eventWarmed, Seq: 6}, {Kind: eventDone, Seq: 5}}
	back, err := decodeEvents(appendEvents(nil, evs))
	if err != nil || !reflect.DeepEqual(back, evs) {
		t.Fatalf("events round trip: %+v, %v; want %+v", back, err, evs)
	}
}

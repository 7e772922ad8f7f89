package v1alpha1

import (
	"fmt"
	"strings"
	"testing"
)

// flowDoc is a routing document whose flowControl is the given JSON.
func flowDoc(flowControl string) []byte {
	return []byte(`{"apiVersion":"routing.warmroute.dev/v1alpha1","kind":"RoutingConfig","model":"m","instances":[],"flowControl":` + flowControl + `}`)
}

// TestDecodeFlowControl: the routers take flow control as the operator
// wrote it, defaults filled in, and refuse a value outside the API's
// bounds or a field they do not know, naming it, rather than guess.
func TestDecodeFlowControl(t *testing.T) {
	const entry = `{"weight":1,"priority":0,"maxQueued":100}`
	valid := func(def, tenants string) string {
		return `{"default":` + def + `,"tenants":` + tenants + `,"queueTimeoutMillis":30000,"maxQueued":1000}`
	}
	objectives := func(objectives string) string {
		return `{"default":` + entry + `,"queueTimeoutMillis":30000,"maxQueued":1000,"objectives":` + objectives + `}`
	}
	for _, tc := range []struct {
		name, flowControl, wantErr string
	}{
		{"defaults", valid(entry, `{}`), ""},
		{"every field at its lowest", `{"default":{"weight":1,"priority":-1000,"requestsPerMinute":1,"tokensPerMinute":1,"maxQueued":0},"queueTimeoutMillis":100,"maxQueued":1}`, ""},
		{"every field at its highest", `{"default":{"weight":1000,"priority":1000,"requestsPerMinute":10000000,"tokensPerMinute":10000000000,"maxQueued":10000},"queueTimeoutMillis":600000,"maxQueued":100000}`, ""},
		{"tenant ids with spaces and punctuation", valid(entry, `{"team a":`+entry+`,"x@y.z":`+entry+`}`), ""},

		{"weight 0: never defaulted by the router", valid(`{"priority":0,"maxQueued":100}`, `{}`), "flowControl.default.weight: 0 is outside 1..1000"},
		{"weight too high", valid(entry, `{"a":{"weight":1001,"priority":0,"maxQueued":100}}`), `flowControl.tenants["a"].weight: 1001 is outside 1..1000`},
		{"priority too low", valid(`{"weight":1,"priority":-1001,"maxQueued":100}`, `{}`), "flowControl.default.priority: -1001 is outside -1000..1000"},
		{"negative rate", valid(`{"weight":1,"priority":0,"requestsPerMinute":-1,"maxQueued":100}`, `{}`), "flowControl.default.requestsPerMinute: -1 is outside 0 (unlimited)..10000000"},
		{"token rate too high", valid(`{"weight":1,"priority":0,"tokensPerMinute":10000000001,"maxQueued":100}`, `{}`), "flowControl.default.tokensPerMinute: 10000000001 is outside 0 (unlimited)..10000000000"},
		{"negative tenant queue", valid(entry, `{"a":{"weight":1,"priority":0,"maxQueued":-1}}`), `flowControl.tenants["a"].maxQueued: -1 is outside 0..10000`},
		{"no queue timeout", `{"default":` + entry + `,"maxQueued":1000}`, "flowControl.queueTimeoutMillis: 0 is outside 100..600000"},
		{"no total queue", `{"default":` + entry + `,"queueTimeoutMillis":30000}`, "flowControl.maxQueued: 0 is outside 1..100000"},
		{"empty tenant id", valid(entry, `{"":`+entry+`}`), `flowControl.tenants[""]: a tenant id must be 1 to 64 characters`},
		{"hidden tenant id", valid(entry, `{".a":`+entry+`}`), `flowControl.tenants[".a"]: tenant id ".a" starts with '.'`},
		{"tenant id with a control character", valid(entry, `{"a\tb":`+entry+`}`), "is not printable ASCII"},
		{"tenant id too long", valid(entry, `{"`+strings.Repeat("a", 65)+`":`+entry+`}`), "must be 1 to 64 characters, not 65"},
		{"misspelled field", valid(`{"wieght":1,"priority":0,"maxQueued":100}`, `{}`), `unknown field "flowControl.default.wieght"`},
		{"a field of a newer schema", `{"default":` + entry + `,"queueTimeoutMillis":30000,"maxQueued":1000,"shedPolicy":"x"}`, `unknown field "flowControl.shedPolicy"`},
		{"objectives by InferenceObjective name", objectives(`{"batch":-50,"chat.interactive":1000,"low":-1000}`), ""},
		{"objective priority too low", objectives(`{"batch":-1001}`), `flowControl.objectives["batch"]: priority -1001 is outside -1000..1000`},
		{"objective priority too high", objectives(`{"batch":1001}`), `flowControl.objectives["batch"]: priority 1001 is outside -1000..1000`},
		{"objective name not a Kubernetes name", objectives(`{"Batch_Jobs":-5}`), `flowControl.objectives["Batch_Jobs"]: not an InferenceObjective name`},
		{"empty objective name", objectives(`{"":-5}`), `flowControl.objectives[""]: not an InferenceObjective name`},
		{"objective priority given as a string", objectives(`{"batch":"-5"}`), "objectives"},
		{"a milliseconds field given as a duration", `{"default":` + entry + `,"queueTimeoutMillis":"30s","maxQueued":1000}`, "queueTimeoutMillis"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Decode(flowDoc(tc.flowControl))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantErr == "" && d.FlowControl == nil:
				t.Fatal("flowControl lost")
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestFlowControlObjectiveCount(t *testing.T) {
	f := FlowControl{Default: TenantLimits{Weight: 1}, QueueTimeoutMillis: 1000, MaxQueued: 1, Objectives: map[string]int{}}
	for i := range MaxFlowObjectives + 1 {
		f.Objectives[fmt.Sprint("objective-", i)] = -1
	}
	if err := f.Validate("flowControl"); err == nil || !strings.Contains(err.Error(), "flowControl.objectives: 1001 objectives, at most 1000") {
		t.Errorf("1001 objectives: %v", err)
	}
	delete(f.Objectives, "objective-0")
	if err := f.Validate("flowControl"); err != nil {
		t.Errorf("1000 objectives: %v", err)
	}
}

func TestFlowControlTenantCount(t *testing.T) {
	f := FlowControl{Default: TenantLimits{Weight: 1}, QueueTimeoutMillis: 1000, MaxQueued: 1, Tenants: map[string]TenantLimits{}}
	for i := range MaxFlowTenants + 1 {
		f.Tenants[strings.Repeat("t", 1+i/26)+string(rune('a'+i%26))] = TenantLimits{Weight: 1}
	}
	if err := f.Validate("flowControl"); err == nil || !strings.Contains(err.Error(), "257 tenants, at most 256") {
		t.Errorf("257 tenants: %v", err)
	}
	delete(f.Tenants, "ta")
	if err := f.Validate("flowControl"); err != nil {
		t.Errorf("256 tenants: %v", err)
	}
}

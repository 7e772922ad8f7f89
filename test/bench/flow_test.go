package bench

import (
	"context"
	"strings"
	"testing"
)

// TestFlowSet runs the flow-control set at a small size through the real
// router binary, each tenant with its own API key, and checks what must
// hold whatever the machine's speed:
//
//   - every request of every run is answered (200, or a refusal with a
//     status and an OpenAI error code), none left without a response;
//   - a tenant alone, and every tenant without flow control, get only 200;
//   - without flow control the flooder's backlog reaches B in the engines:
//     B's engine TTFT p90 (simulated time, free of host delays) grows
//     past twice its p90 alone;
//   - with flow control the flooder is refused (its tenant queue is
//     bounded) while B and the interactive tenant get only 200, and the
//     router's counters agree with the flooder's refusals;
//   - the report renders both cases.
func TestFlowSet(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the router and runs for about a minute")
	}
	cfg := Config{Flow: ShortFlow(), WorkDir: t.TempDir(), Log: t.Logf, Command: "go test ./test/bench"}
	rep, err := RunFlow(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Runs {
		for _, tn := range r.Tenants {
			for o, n := range tn.Outcomes {
				answered := o == "200" || strings.HasPrefix(o, "429 ") || strings.HasPrefix(o, "503 ")
				if !answered {
					t.Errorf("%s %s: %s got %d × %q", r.Case, r.Row, tn.Tenant, n, o)
				}
			}
			if r.Row != flowWith && tn.Outcomes["200"] != tn.Requests {
				t.Errorf("%s %s: %s got %v, want only 200", r.Case, r.Row, tn.Tenant, tn.Outcomes)
			}
		}
	}
	b := func(row string) TenantOutcome {
		t.Helper()
		runs := rep.runsOf(FlowNoisyNeighbour, row)
		if len(runs) == 0 {
			t.Fatalf("no %s run", row)
		}
		o, ok := runs[0].tenant(tenantB)
		if !ok {
			t.Fatalf("%s: no %s", row, tenantB)
		}
		return o
	}
	if alone, without := b(flowAlone).Summary.EngineTTFT.P90, b(flowWithout).Summary.EngineTTFT.P90; without < 2*alone {
		t.Errorf("without flow control %s's engine TTFT p90 is %s, alone %s: the flooder did not saturate the fleet", tenantB, secs(without), secs(alone))
	}
	for _, c := range []struct{ cse, flooder, protected string }{
		{FlowNoisyNeighbour, tenantA, tenantB}, {FlowPriority, tenantBatch, tenantInteractive},
	} {
		run := rep.runsOf(c.cse, flowWith)[0]
		p, _ := run.tenant(c.protected)
		if p.Outcomes["200"] != p.Requests {
			t.Errorf("%s with flow control: %s got %v, want only 200", c.cse, c.protected, p.Outcomes)
		}
		f, _ := run.tenant(c.flooder)
		refused, shed := f.Requests-f.Outcomes["200"], int64(0)
		for k, n := range run.Shed {
			if strings.HasPrefix(k, c.flooder+" ") {
				shed += n
			}
		}
		if refused == 0 || int64(refused) != shed {
			t.Errorf("%s with flow control: %s refused %d (%v), the router shed %d (%v)", c.cse, c.flooder, refused, f.Outcomes, shed, run.Shed)
		}
	}
	md := rep.Markdown()
	for _, want := range []string{FlowHeading + "\n", "| " + FlowNoisyNeighbour + " | " + flowWith + " | 1 | " + tenantB + " |", "| " + FlowPriority + " | " + flowAlone + " | 1 | " + tenantInteractive + " |"} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q:\n%s", want, md)
		}
	}
	t.Log("\n" + md)
}

package policy

import (
	"testing"

	"github.com/warmroute/warmroute/sidecar/router/extract"
	"github.com/warmroute/warmroute/test/workload"
)

// workloadRequests turns a workload into what the policy sees, extracted
// from the bodies exactly as the router does.
func workloadRequests(t testing.TB, w workload.Workload) []Request {
	t.Helper()
	lim := extract.Limits{Window: 4096, Lookahead: lookaheadBytes}
	out := make([]Request, 0, len(w.Requests))
	for _, r := range w.Requests {
		body, err := workload.Body(r, workload.Options{Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		x, err := extract.OpenAI(extract.Chat, body, "", lim)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, Request{Model: x.Model, Tenant: x.Tenant, Text: x.Text, WindowBytes: x.WindowBytes, PromptBytes: r.PromptChars()})
	}
	return out
}

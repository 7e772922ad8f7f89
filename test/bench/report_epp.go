package bench

import (
	"fmt"
	"strings"
	"time"
)

// eppTargets check each run through the protocol against the standalone
// router (issue 38): hit rate within 1 point, TTFT p90 within 5 %.
func (r *Report) eppTargets() []Target {
	var out []Target
	for _, x := range r.EPP {
		ref, ok := r.standalone(x.Workload)
		if !ok || x.Repeat > 0 {
			continue
		}
		epp, _ := r.eppRuns(x.Workload, x.Gateways)
		d := ref.hit - epp.hit
		out = append(out,
			Target{Name: fmt.Sprintf("through the Endpoint Picker Protocol (%s): hit rate within 1 point of the standalone router's", gateways(x.Gateways)), Workload: x.Workload,
				Measured: fmt.Sprintf("%s vs %s (%+.1f points)", epp.hitOf(), ref.hitOf(), -100*d),
				Required: "≥ standalone − 1 point", Met: d <= 0.01, Gap: fmt.Sprintf("%.1f points under", 100*(d-0.01))},
			Target{Name: fmt.Sprintf("through the Endpoint Picker Protocol (%s): TTFT p90 within 5 %% of the standalone router's", gateways(x.Gateways)), Workload: x.Workload,
				Measured: fmt.Sprintf("%s vs %s (%+.1f %%)", epp.of(epp.p90), ref.of(ref.p90), 100*(ratio(epp.p90, ref.p90)-1)),
				Required: "≤ +5 %", Met: epp.p90 <= 1.05*ref.p90, Gap: fmt.Sprintf("%.1f points over", 100*(ratio(epp.p90, ref.p90)-1.05))})
	}
	return out
}

// eppRun is the round-th run of workload w through n gateways.
func (r *Report) eppRun(w string, n, round int) (EPPRun, bool) {
	for _, x := range r.EPP {
		if x.Workload == w && x.Gateways == n && x.Repeat == round {
			return x, true
		}
	}
	return EPPRun{}, false
}

// eppRuns sums up the runs of workload w through n gateways.
func (r *Report) eppRuns(w string, n int) (reference, bool) {
	var runs []RunResult
	for _, x := range r.EPP {
		if x.Workload == w && x.Gateways == n {
			runs = append(runs, x.RunResult)
		}
	}
	return referenceOf(runs)
}

// eppMarkdown renders the runs through the protocol.
func (r *Report) eppMarkdown(b *strings.Builder) {
	if len(r.EPP) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("\n## Through the Endpoint Picker Protocol\n\n")
	p("The same workloads through a Gateway API gateway's data plane instead of the router's proxy: one PREFIX_AWARE router binary serving the Endpoint Picker Protocol (`--epp-listen`, Envoy ext_proc v3, `FULL_DUPLEX_STREAMED`), and in the load generator *gateways* that act as Envoy does, with go-control-plane's ext_proc client, one gRPC connection each, requests taken in turn (`test/bench/gateway.go`): the request headers, the body in %d KiB chunks with end of stream on the last; the endpoint read from `x-gateway-destination-endpoint` (checked against the `envoy.lb` metadata), the header mutation applied and the body the picker streams back sent to that simulator; then the response headers, each response body chunk as the simulator sends it and the trailers through the stream, so the picker's accounting of each request ends with its response. Fresh simulators and router for every run; the runs through the protocol alternate with the replica section's one-router runs, so that a change in the shared machine's load falls on both alike. *Standalone* is the median of this run's one-router PREFIX_AWARE runs (the strategy table's and the replica section's); where a workload ran several times through the protocol (`-epp-runs`), the targets compare the median of those runs with it, since one run's hit rate moves by a point or two from the next one's. *Picker added* is wall time per placed request, from the gateway's sending the body's last chunk to its receiving the destination (decision, the protocol's messages and the gRPC hops on loopback, on the shared CPUs); *decision mean* is the router's own `decision_duration_seconds` over the run, the part of it that is the decision. *Router CPU per request* is the router process's CPU time (user + system, `/proc`) over the run divided by its requests, beside the standalone runs' median (it moves with the shared machine's load as well: compare it within a run). *Client p90* is the load generator's TTFT through the gateway (or the standalone router), host delays multiplied by 1/time scale: it carries the cost of the response's chunks passing through the picker. *Left in flight* is the router's `in_flight_requests` summed once every response had ended.\n\n", gatewayChunk>>10)
	p("| workload | gateways | hit rate | standalone | TTFT p50 | p90 | standalone p90 | p90 vs standalone | client p90 | standalone client p90 | picker added p50 | p90 | p99 | decision mean | router CPU per request | standalone | most in flight | left in flight | spills | failures |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.EPP {
		ref, ok := r.standalone(x.Workload)
		hit, p90, vs, client, cpu := "", "", "", "", ""
		if ok {
			hit, p90, client = fmt.Sprintf("%.1f %%", 100*ref.hit), secs(ref.p90), secs(ref.clientP90)
			cpu = micros(time.Duration(ref.cpu * float64(time.Second)))
			vs = fmt.Sprintf("%+.1f %%", 100*(ratio(x.Summary.EngineTTFT.P90, ref.p90)-1))
		}
		e := x.Summary.EngineTTFT
		count := fmt.Sprint(x.Gateways)
		if x.Repeat > 0 {
			count += fmt.Sprintf(" (run %d)", x.Repeat+1)
		}
		p("| %s | %s | %.1f %% | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %g | %s | %d |\n",
			x.Workload, count, 100*x.HitRate, hit, secs(e.P50), secs(e.P90), p90, vs, secs(x.Summary.TTFT.P90), client,
			micros(x.AddedP50), micros(x.AddedP90), micros(x.AddedP99), micros(x.DecisionMean), micros(x.CPUPerRequest()), cpu, x.MaxInFlight, x.LeftInFlight, spills(x.RunResult), x.Summary.Failures)
	}
}

func gateways(n int) string {
	if n == 1 {
		return "1 gateway"
	}
	return fmt.Sprintf("%d gateways", n)
}

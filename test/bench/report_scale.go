package bench

import (
	"fmt"
	"strings"
)

// scaleEventsMarkdown reports the scale-event runs (scale.go).
func (r *Report) scaleEventsMarkdown(b *strings.Builder) {
	if len(r.ScaleEvents) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("\n## Scale events\n\n")
	p("The %s workload through one router (PREFIX_AWARE) while the fleet changes as the operator would change the routing document: %d instances, %d from %.0f s, %d again from %.0f s. "+
		"The scale-in's two instances are chosen as the ReplicaSet would by pod-deletion-cost: *by age*, the youngest (the two that joined); *by cache*, the two whose caches served the fewest hit tokens (the operator's rule). "+
		"Each row is the requests sent in the %.0f simulated seconds from its start (hit rate from the responses' cached-token headers; engine TTFT p90 in simulated seconds). All runs replay the same traffic, so the warmed runs' first two rows differ only by timing noise: that spread is the measure of the others. "+
		"At the scale-in the leaving instances first drain in the routing document for %d s, as the operator keeps them, then leave it. "+
		"The run with warming off (--warm=false) moves keys cold: the joiners' at the scale-out, the leavers' as soon as they drain; with warming on the router first sends each key's next owner (a joiner, or where a leaver's key goes next) a one-token copy of it, then moves it (sidecar/README.md, \"Warming joiners and leavers\"): compare their rows after each event.\n\n",
		NameScaleEvents, scaleFrom, scaleTo, scaleOutAt, scaleFrom, scaleInAt, scaleWindow, drainSeconds)
	p("| scale-in | warming | window | from | requests | hit rate | TTFT p90 |\n|---|---|---|---:|---:|---:|---:|\n")
	for _, run := range r.ScaleEvents {
		for _, w := range run.Windows {
			p("| by %s | %s | %s | %.0f s | %d | %.1f %% | %s |\n", run.Removal, onOff(run.Warm), w.Name, w.From, w.Requests, 100*w.HitRate, secs(w.TTFTP90))
		}
	}
	p("\n")
	for _, run := range r.ScaleEvents {
		p("By %s, warming %s, the scale-in removed %s; %d requests failed over the run.\n", run.Removal, onOff(run.Warm), strings.Join(run.Removed, " and "), run.Failures)
	}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

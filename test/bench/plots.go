package bench

import (
	"fmt"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// label is a strategy's short name in plots.
func label(s policy.Strategy) string {
	switch s {
	case policy.Random:
		return "random"
	case policy.LeastOutstandingRequests:
		return "least-outstanding"
	case Baseline:
		return "sagemaker-baseline"
	case policy.PrefixAware:
		return "prefix-aware"
	}
	return strings.ToLower(string(s))
}

// series is one set of bars: a value per group.
type series struct {
	name   string
	values []float64
}

// groupedBars draws bars of every series side by side within each group.
func groupedBars(title, ylabel string, groups []string, ss []series, path string) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	top := 0.0
	for _, s := range ss {
		for _, v := range s.values {
			top = max(top, v)
		}
	}
	p.Y.Max = 1.35 * top // room for the legend above the bars
	p.Legend.Top = true
	width := vg.Points(min(18, 300/float64(max(1, len(groups)*len(ss)))))
	for i, s := range ss {
		bars, err := plotter.NewBarChart(plotter.Values(s.values), width)
		if err != nil {
			return fmt.Errorf("plot %s: %w", title, err)
		}
		bars.LineStyle.Width = vg.Length(0)
		bars.Color = plotutil.Color(i)
		bars.Offset = width * vg.Length(float64(i)-float64(len(ss)-1)/2)
		p.Add(bars)
		p.Legend.Add(s.name, bars)
	}
	p.NominalX(groups...)
	if err := p.Save(vg.Points(max(480, float64(len(groups)*len(ss))*22+120)), 320, path); err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	return nil
}

// byStrategy returns one series per strategy with f of its run on each
// workload, in the report's orders.
func (r *Report) byStrategy(f func(RunResult) float64) []series {
	var out []series
	for _, s := range r.Config.Strategies {
		se := series{name: label(s)}
		for _, w := range r.workloadNames() {
			v := 0.0
			if run, ok := r.run(w, s); ok {
				v = f(run)
			}
			se.values = append(se.values, v)
		}
		out = append(out, se)
	}
	return out
}

// Plot names, relative to the report's directory.
const (
	PlotHitRate = "img/bench-hit-rate.png"
	PlotTTFTP50 = "img/bench-ttft-p50.png"
	PlotTTFTP90 = "img/bench-ttft-p90.png"
	PlotShare   = "img/bench-share.png"
	PlotRemap   = "img/bench-remap.png"
)

// PlotInstanceShare is the per-instance share plot of a workload.
func PlotInstanceShare(workload string) string { return "img/bench-share-" + workload + ".png" }

// WritePlots renders the report's plots under dir (the docs directory).
func (r *Report) WritePlots(dir string) error {
	names := r.workloadNames()
	if len(r.Runs) == 0 {
		return nil // a run of the scale events alone, say
	}
	hit := r.byStrategy(func(x RunResult) float64 { return 100 * x.HitRate })
	oracle := series{name: "pooled oracle"}
	for _, w := range names {
		oracle.values = append(oracle.values, 100*r.Oracles[w].HitRate)
	}
	plots := []struct {
		path, title, y string
		ss             []series
	}{
		{PlotHitRate, "Prefix-cache hit rate (token-weighted)", "% of prompt tokens", append(hit, oracle)},
		{PlotTTFTP50, "Time to first token, p50 (engine)", "simulated seconds", r.byStrategy(func(x RunResult) float64 { return x.Summary.EngineTTFT.P50 })},
		{PlotTTFTP90, "Time to first token, p90 (engine)", "simulated seconds", r.byStrategy(func(x RunResult) float64 { return x.Summary.EngineTTFT.P90 })},
		{PlotShare, "Busiest instance's request share ÷ average", "max/avg", r.byStrategy(func(x RunResult) float64 { return x.Summary.ShareMaxAvg })},
	}
	for _, p := range plots {
		if err := groupedBars(p.title, p.y, names, p.ss, filepath.Join(dir, p.path)); err != nil {
			return err
		}
	}
	for _, w := range names {
		if err := r.plotInstanceShare(w, filepath.Join(dir, PlotInstanceShare(w))); err != nil {
			return err
		}
	}
	return r.plotRemap(filepath.Join(dir, PlotRemap))
}

func (r *Report) plotInstanceShare(w, path string) error {
	var groups []string
	for i := range r.Config.Instances {
		groups = append(groups, instanceID(i))
	}
	var ss []series
	for _, s := range r.Config.Strategies {
		run, ok := r.run(w, s)
		if !ok {
			continue
		}
		total := 0
		for _, n := range run.Summary.Share {
			total += n
		}
		se := series{name: label(s)}
		for _, id := range groups {
			se.values = append(se.values, 100*float64(run.Summary.Share[id])/float64(max(1, total)))
		}
		ss = append(ss, se)
	}
	return groupedBars("Requests per instance: "+w, "% of requests", groups, ss, path)
}

func (r *Report) plotRemap(path string) error {
	if len(r.Remap) == 0 {
		return nil // a quick run without the remap measurement
	}
	var groups []string
	moved := series{name: "moved"}
	ideal := series{name: "least possible"}
	between := series{name: "moved between survivors"}
	for _, m := range r.Remap {
		groups = append(groups, fmt.Sprintf("%s %d→%d", shortKeys(m.Keys), m.From, m.To))
		moved.values = append(moved.values, 100*m.Moved)
		ideal.values = append(ideal.values, 100*m.Ideal)
		between.values = append(between.values, 100*m.BetweenSurvivors)
	}
	return groupedBars("Keys moved when the fleet changes size (PREFIX_AWARE)", "% of keys", groups, []series{moved, ideal, between}, path)
}

// shortKeys shortens a remap key-set name for an axis label.
func shortKeys(k string) string {
	k = strings.Replace(k, " requests", "", 1)
	if strings.Contains(k, "distinct prefixes") {
		if strings.Contains(k, "pure HRW") {
			return "synthetic, pure HRW"
		}
		return "synthetic"
	}
	return k
}

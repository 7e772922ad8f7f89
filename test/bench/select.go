package bench

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// Select narrows the configuration for a quick experiment: strategies and
// replica counts are comma-separated lists ("" keeps the defaults, "none"
// runs none), and extras false leaves out every measurement other than the
// workloads' runs.
func (c *Config) Select(strategies, replicas string, extras bool) error {
	c.SkipExtras = !extras
	if !extras {
		c.Replicas.Restart = ""
		c.Replicas.HotPrefix = nil
		c.ScaleEvents = nil
	}
	if strategies != "" {
		c.Strategies = []policy.Strategy{}
		for _, s := range list(strategies) {
			st := policy.Strategy(s)
			if err := policy.ValidStrategy(st, true); err != nil && st != Baseline {
				return fmt.Errorf("-strategies: %w", err)
			}
			c.Strategies = append(c.Strategies, st)
		}
	}
	if replicas != "" {
		c.Replicas.Counts = []int{}
		for _, s := range list(replicas) {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				return fmt.Errorf("-replicas: %q is not a replica count (1 or more)", s)
			}
			c.Replicas.Counts = append(c.Replicas.Counts, n)
		}
	}
	return nil
}

// list splits a comma-separated flag value; "none" is the empty list.
func list(v string) []string {
	if strings.TrimSpace(v) == "none" {
		return nil
	}
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

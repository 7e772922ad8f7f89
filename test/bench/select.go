package bench

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// Select narrows the configuration for a quick experiment: strategies,
// replica counts and gateway counts through the Endpoint Picker Protocol
// are comma-separated lists ("" keeps the defaults, "none" runs none),
// and extras false leaves out every measurement other than the workloads'
// runs.
func (c *Config) Select(strategies, replicas, eppGateways string, extras bool) error {
	c.SkipExtras = !extras
	if !extras {
		c.Replicas.Restart = ""
		c.Replicas.HotPrefix = nil
		c.ScaleEvents = nil
		c.FromZero = nil
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
	var err error
	if replicas != "" {
		if c.Replicas.Counts, err = counts("-replicas", "replica", replicas); err != nil {
			return err
		}
	}
	if eppGateways != "" {
		if c.EPPGateways, err = counts("-epp", "gateway", eppGateways); err != nil {
			return err
		}
	}
	return nil
}

// counts parses a list of counts of 1 or more.
func counts(flag, what, v string) ([]int, error) {
	out := []int{}
	for _, s := range list(v) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %q is not a %s count (1 or more)", flag, s, what)
		}
		out = append(out, n)
	}
	return out, nil
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

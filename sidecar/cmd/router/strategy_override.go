//go:build benchstrategies

package main

import (
	"flag"
	"strings"

	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// test/bench builds the router with the benchstrategies tag, which adds
// the benchmark baseline to the policy and this flag to run it (and every
// other strategy) through the real binary whatever the routing document
// says.
func init() {
	benchmarkFlags = func(fs *flag.FlagSet, f *flags) {
		var names []string
		for _, s := range policy.Strategies(true) {
			names = append(names, string(s))
		}
		fs.StringVar(&f.strategyOverride, "strategy-override", "", "replace the document's strategy, benchmark-only ones included: "+strings.Join(names, ", "))
	}
}

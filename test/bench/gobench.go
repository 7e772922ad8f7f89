package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// benchResultLine is one result line of `go test -bench`: the benchmark's
// name (its -GOMAXPROCS suffix cut), the iteration count, then value-unit
// pairs.
var benchResultLine = regexp.MustCompile(`^(Benchmark\S*?)(?:-\d+)?\s+\d+\s+(.*)$`)

// goBench runs the benchmarks of pkg matching pattern in the module tree
// dir and returns each benchmark's figures by unit ("ns/op", "p99-µs").
func goBench(ctx context.Context, dir, pkg, pattern, benchtime string) (map[string]map[string]float64, error) {
	cmd := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", pattern, "-benchtime", benchtime, "-benchmem", pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-count=1")
	res, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("go test -bench %s %s: %w\n%s", pattern, pkg, err, res)
	}
	out := map[string]map[string]float64{}
	for _, line := range strings.Split(string(res), "\n") {
		m := benchResultLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		figures := map[string]float64{}
		f := strings.Fields(m[2])
		for j := 0; j+1 < len(f); j += 2 {
			if v, err := strconv.ParseFloat(f[j], 64); err == nil {
				figures[f[j+1]] = v
			}
		}
		out[m[1]] = figures
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("go test -bench %s %s printed no result:\n%s", pattern, pkg, res)
	}
	return out, nil
}

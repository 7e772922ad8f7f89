package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/warmroute/warmroute/test/gobuild"
)

// routerBinary is a router executable the benchmark runs: the working
// tree's, or the baseline's.
type routerBinary struct {
	path string
	// revision is the git revision it was built from ("" for the working
	// tree); it names the baseline's runs and directories.
	revision string
}

// pickerFlag: the router serves the pick API its replicas ask the one
// elected picker through, which the replica runs need. Every router that
// has it also has the other flags the benchmark passes
// (--allow-loopback-backends and --cache-salt-key-file came before it).
var pickerFlag = regexp.MustCompile(`(?m)^\s+-pick-listen\b`)

// probeRouter checks from its usage that the router at path is one the
// benchmark can run.
func probeRouter(ctx context.Context, path, revision string) (routerBinary, error) {
	// The usage is on stderr; what it lists counts, not the exit status.
	out, err := exec.CommandContext(ctx, path, "-h").CombinedOutput()
	if len(out) == 0 && err != nil {
		return routerBinary{}, fmt.Errorf("%s -h: %w", path, err)
	}
	if !pickerFlag.Match(out) {
		return routerBinary{}, fmt.Errorf("the router at %s predates the elected picker (no --pick-listen), whose replicas the benchmark runs: choose a later baseline", cmp.Or(revision, "the working tree"))
	}
	return routerBinary{path: path, revision: revision}, nil
}

// saltKeyArgs writes a cache salt key into dir for every replica of a
// fleet to share, as the operator's Secret is shared by a Deployment's
// (without one, each replica salts tenants with a key of its own and
// splits their cache hits).
func saltKeyArgs(dir string) ([]string, error) {
	path := filepath.Join(dir, "cache-salt-key")
	if err := os.WriteFile(path, []byte("warmroute benchmark cache salt key, 32+ bytes"), 0o600); err != nil {
		return nil, fmt.Errorf("write cache salt key: %w", err)
	}
	return []string{"--cache-salt-key-file", path}, nil
}

// suffix tells the baseline's run directories from the working tree's.
func (b routerBinary) suffix() string {
	if b.revision == "" {
		return ""
	}
	return "@" + b.revision
}

// buildBaseline checks the baseline revision out into a detached git
// worktree under WorkDir and builds its router there; cleanup removes the
// worktree. The worktree stays for the run: the decision benchmark runs in
// it too.
func (c *Config) buildBaseline(ctx context.Context) (routerBinary, func(), error) {
	root, err := gobuild.ModuleRoot(ctx)
	if err != nil {
		return routerBinary{}, nil, err
	}
	short, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--short", c.Baseline).Output()
	if err != nil {
		return routerBinary{}, nil, fmt.Errorf("baseline revision %q: %w", c.Baseline, err)
	}
	rev := strings.TrimSpace(string(short))
	src := filepath.Join(c.WorkDir, "baseline-src")
	if out, err := exec.CommandContext(ctx, "git", "-C", root, "worktree", "add", "--detach", src, rev).CombinedOutput(); err != nil {
		return routerBinary{}, nil, fmt.Errorf("check out %s: %w\n%s", rev, err, out)
	}
	cleanup := func() {
		_ = exec.Command("git", "-C", root, "worktree", "remove", "--force", src).Run()
	}
	c.baselineSrc = src
	bin := filepath.Join(c.WorkDir, "router@"+rev)
	build := exec.CommandContext(ctx, "go", "build", "-tags", routerTags, "-o", bin, "./sidecar/cmd/router")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		cleanup()
		return routerBinary{}, nil, fmt.Errorf("build the router at %s: %w\n%s", rev, err, out)
	}
	b, err := probeRouter(ctx, bin, rev)
	if err != nil {
		cleanup()
		return routerBinary{}, nil, err
	}
	return b, cleanup, nil
}

// DecisionBench is one revision's BenchmarkDecision (sidecar/router/proxy:
// extract + PREFIX_AWARE decide for 64 KiB chat bodies), the median over
// rounds run alternately with the other revision's.
type DecisionBench struct {
	Revision       string
	Rounds         int
	NsPerOp        float64
	P50us, P99us   float64
	BytesPerOp     float64
	AllocsPerOp    float64
	RawP50, RawP99 []float64
}

// decisionBenchRounds is how many times each revision's benchmark runs,
// alternately, so that both see the same machine load. Each round's p99 is
// the 50th slowest of 5,000 decisions, which a scheduling hiccup moves a
// lot (one run's rounds: 17.9 to 49.7 µs); at 5 rounds the median p99 of
// the same code differed by 7 points between two runs, as wide as the
// target's 10 %, so 9 (about 45 s more).
const decisionBenchRounds = 9

// decisionBenchName is the BenchmarkDecision case both trees run.
const decisionBenchName = "BenchmarkDecision/PREFIX_AWARE/chat/64KiB"

// compareDecisionBench runs BenchmarkDecision of the baseline's tree and of
// this one, alternately.
func (c *Config) compareDecisionBench(ctx context.Context, b routerBinary) ([]DecisionBench, error) {
	root, err := gobuild.ModuleRoot(ctx)
	if err != nil {
		return nil, err
	}
	trees := []struct{ rev, dir string }{{b.revision, c.baselineSrc}, {"now", root}}
	out := make([]DecisionBench, len(trees))
	samples := make([]map[string][]float64, len(trees))
	for i := range trees {
		out[i] = DecisionBench{Revision: trees[i].rev, Rounds: decisionBenchRounds}
		samples[i] = map[string][]float64{}
	}
	for range decisionBenchRounds {
		for i, t := range trees {
			res, err := goBench(ctx, t.dir, "./sidecar/router/proxy", "^BenchmarkDecision$/^PREFIX_AWARE$/^chat$", "5000x")
			if err != nil {
				return nil, fmt.Errorf("at %s: %w", t.rev, err)
			}
			figures, ok := res[decisionBenchName]
			if !ok {
				return nil, fmt.Errorf("BenchmarkDecision at %s printed no %s line", t.rev, decisionBenchName)
			}
			for unit, v := range figures {
				samples[i][unit] = append(samples[i][unit], v)
			}
		}
	}
	for i := range out {
		s := samples[i]
		out[i].NsPerOp, out[i].P50us, out[i].P99us = median(s["ns/op"]), median(s["p50-µs"]), median(s["p99-µs"])
		out[i].BytesPerOp, out[i].AllocsPerOp = median(s["B/op"]), median(s["allocs/op"])
		out[i].RawP50, out[i].RawP99 = s["p50-µs"], s["p99-µs"]
	}
	return out, nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 0 {
		// The mean of the middle two: the upper one alone would flatter
		// every even count of runs.
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[n/2]
}

// pickerArgs returns each replica's picker flags: the first replica is
// the picker and serves the pick API on pickAddr, the others ask it there,
// all signing with one key written to dir (what the operator's Secret is
// in a cluster).
func pickerArgs(dir, pickAddr string) (func(name string) []string, error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "pick.key")
	if err := os.WriteFile(path, []byte(hex.EncodeToString(secret)), 0o600); err != nil {
		return nil, fmt.Errorf("write pick key: %w", err)
	}
	return func(name string) []string {
		args := []string{"--pick-key-file", path, "--pod-name", name}
		if name == "router-0" {
			return append(args, "--picker", "self", "--pick-listen", pickAddr)
		}
		return append(args, "--picker", pickAddr)
	}, nil
}

package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/warmroute/warmroute/sidecar/router/extract"
	"github.com/warmroute/warmroute/sidecar/router/policy"
	"github.com/warmroute/warmroute/test/workload"
)

// DecisionLatency is the cost of one routing decision for a body size:
// extracting the routing text from the JSON and picking an instance
// (PREFIX_AWARE over the fleet), in process.
type DecisionLatency struct {
	BodyBytes int
	// Text says what the prompt text is when it is not ASCII words.
	Text    string
	Samples int
	// P50 and P99 of extraction plus decision; PickP50 and PickP99 of the
	// decision alone.
	P50, P99, PickP50, PickP99 time.Duration
}

// decisionBodySizes are the body sizes timed.
var decisionBodySizes = []int{1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10}

// escapedBodyBytes is the size of the bodies whose text is CJK escaped as
// \uXXXX, which cost the scanner a step per character, timed against the
// same text as raw UTF-8.
const escapedBodyBytes = 1 << 20

// measureDecisions times decisions for each body size. Each body is a chat
// request with a system prompt shared by all bodies of the size (half of
// it) and a distinct user message, which exercises block hashing, the
// popularity sketch, the index and the look-ahead past a shared window.
// Then the same for CJK text escaped as Python's json.dumps sends it and
// as raw UTF-8, fewer bodies and samples as each is large.
func (c *Config) measureDecisions() []DecisionLatency {
	ids := make([]string, c.Instances)
	for i := range ids {
		ids[i] = instanceID(i)
	}
	chatBodies := func(n int, system string, user func() string) [][]byte {
		bodies := make([][]byte, n)
		for i := range bodies {
			bodies[i], _ = workload.Body(workload.Request{Messages: []workload.Message{
				{Role: "system", Content: system},
				{Role: "user", Content: user()},
			}}, workload.Options{Model: c.Model})
		}
		return bodies
	}
	var out []DecisionLatency
	for _, size := range decisionBodySizes {
		rng := rand.New(rand.NewPCG(c.Seed, uint64(size)))
		bodies := chatBodies(256, randomText(rng, size/2), func() string { return randomText(rng, size/2-100) })
		out = append(out, c.timeDecisions(ids, bodies, size, c.DecisionSamples))
	}
	rng := rand.New(rand.NewPCG(c.Seed, escapedBodyBytes))
	chars := escapedBodyBytes / 2 / len(`\u4e2d`)
	raw := chatBodies(16, randomCJK(rng, chars), func() string { return randomCJK(rng, chars-20) })
	escaped := make([][]byte, len(raw))
	for i, b := range raw {
		escaped[i] = escapeNonASCII(b)
	}
	n := min(c.DecisionSamples, 1000)
	e, r := c.timeDecisions(ids, escaped, len(escaped[0]), n), c.timeDecisions(ids, raw, len(raw[0]), n)
	e.Text, r.Text = "CJK as \\uXXXX", "the same CJK as UTF-8"
	return append(out, e, r)
}

// randomCJK returns n random CJK ideographs.
func randomCJK(rng *rand.Rand, n int) string {
	r := make([]rune, n)
	for i := range r {
		r[i] = rune(0x4e00 + rng.IntN(0x5000))
	}
	return string(r)
}

// escapeNonASCII writes every non-ASCII character of a JSON document as
// \uXXXX (a surrogate pair above U+FFFF), as Python's json.dumps does.
func escapeNonASCII(doc []byte) []byte {
	out := make([]byte, 0, 2*len(doc))
	for _, r := range string(doc) {
		switch {
		case r < utf8.RuneSelf:
			out = append(out, byte(r))
		case r > 0xffff:
			hi, lo := utf16.EncodeRune(r)
			out = fmt.Appendf(out, `\u%04x\u%04x`, hi, lo)
		default:
			out = fmt.Appendf(out, `\u%04x`, r)
		}
	}
	return out
}

// timeDecisions times n decisions over the bodies (of about size bytes),
// after a tenth more to warm up, with a fresh policy.
func (c *Config) timeDecisions(ids []string, bodies [][]byte, size, n int) DecisionLatency {
	p := policy.New(policy.DefaultTuning())
	if err := p.Update(c.policyConfig(ids)); err != nil {
		panic(err)
	}
	runtime.GC() // the previous size's garbage is not this size's cost
	lim := extract.Limits{Window: c.PrefixLength, Lookahead: p.LookaheadBytes()}
	total := make([]time.Duration, 0, n)
	pick := make([]time.Duration, 0, n)
	for i := range n + n/10 {
		body := bodies[i%len(bodies)]
		t0 := time.Now()
		r, err := extract.OpenAI(extract.Chat, body, "", lim)
		if err != nil {
			panic(err)
		}
		t1 := time.Now()
		ch, err := p.Pick(p.Key(policy.Request{Model: r.Model, Tenant: r.Tenant, Text: r.Text, WindowBytes: r.WindowBytes}))
		if err != nil {
			panic(err)
		}
		t2 := time.Now()
		ch.Done()
		if i >= n/10 { // the first tenth warms up
			total = append(total, t2.Sub(t0))
			pick = append(pick, t2.Sub(t1))
		}
	}
	d := DecisionLatency{BodyBytes: size, Samples: n}
	d.P50, d.P99 = quantile(total, 0.5), quantile(total, 0.99)
	d.PickP50, d.PickP99 = quantile(pick, 0.5), quantile(pick, 0.99)
	return d
}

func quantile(xs []time.Duration, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[max(0, int(math.Ceil(q*float64(len(s))))-1)]
}

// ProxyOverhead compares requests sent straight to a simulator with the same
// requests sent through the router binary in front of it.
type ProxyOverhead struct {
	BodyBytes int
	Samples   int
	// Direct and Routed are the latency percentiles of each path; Added
	// is the difference of the medians (and of the 99th percentiles).
	DirectP50, DirectP99, RoutedP50, RoutedP99, AddedP50, AddedP99 time.Duration
}

// proxyTimeScale makes the simulator answer in microseconds, so that the
// comparison is dominated by HTTP and the router.
const proxyTimeScale = 1e-6

// measureProxy times 4 KiB non-streaming requests, one at a time, sent in
// turn straight to a simulator and through each router binary in front of
// it (its own simulator each), on loopback: one overhead per binary. Taking
// the binaries in turn request by request, not one after the other, keeps
// a change in the shared machine's load out of their comparison.
func (c *Config) measureProxy(ctx context.Context, bins ...routerBinary) ([]ProxyOverhead, error) {
	bases := make([]string, 0, 2*len(bins))
	for _, bin := range bins {
		dir := filepath.Join(c.WorkDir, "proxy"+bin.suffix())
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		sims, err := c.startSims(1, proxyTimeScale)
		if err != nil {
			return nil, err
		}
		f := &fleet{sims: sims, bin: bin}
		defer f.stop()
		if err := f.startRouter(ctx, c, dir, policy.PrefixAware); err != nil {
			return nil, err
		}
		bases = append(bases, sims[0].URL(), f.routerURL)
	}
	bodies := c.proxyBodies()
	client := workload.NewClient()
	defer client.CloseIdleConnections() // before the routers stop
	lat, err := alternate(ctx, client, c.ProxySamples, bodies, bases...)
	if err != nil {
		return nil, err
	}
	out := make([]ProxyOverhead, len(bins))
	for i := range bins {
		out[i] = overhead(len(bodies[0]), lat[2*i], lat[2*i+1])
	}
	return out, nil
}

// overhead compares two paths' latencies: b's over a's.
func overhead(size int, a, b []time.Duration) ProxyOverhead {
	o := ProxyOverhead{BodyBytes: size, Samples: len(a),
		DirectP50: quantile(a, 0.5), DirectP99: quantile(a, 0.99),
		RoutedP50: quantile(b, 0.5), RoutedP99: quantile(b, 0.99)}
	o.AddedP50, o.AddedP99 = o.RoutedP50-o.DirectP50, o.RoutedP99-o.DirectP99
	return o
}

// proxyBodies are 64 distinct 4 KiB chat bodies asking for one token.
func (c *Config) proxyBodies() [][]byte {
	const size = 4 << 10
	rng := rand.New(rand.NewPCG(c.Seed, 4))
	bodies := make([][]byte, 64)
	for i := range bodies {
		bodies[i], _ = workload.Body(workload.Request{MaxTokens: 1, Messages: []workload.Message{
			{Role: "user", Content: randomText(rng, size-120)},
		}}, workload.Options{Model: c.Model})
	}
	return bodies
}

// alternate sends n bodies (after n/10 to warm up) one at a time, each
// to every base in turn, and returns each base's latencies.
func alternate(ctx context.Context, client *http.Client, n int, bodies [][]byte, bases ...string) ([][]time.Duration, error) {
	send := func(base string, body []byte) (time.Duration, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		d := time.Since(t0)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		return d, err
	}
	out := make([][]time.Duration, len(bases))
	for i := range n + n/10 {
		body := bodies[i%len(bodies)]
		for j, base := range bases {
			d, err := send(base, body)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", base, err)
			}
			if i >= n/10 {
				out[j] = append(out[j], d)
			}
		}
	}
	return out, nil
}

// UploadMemory is the router's memory under a burst of large uploads, with
// small requests sent meanwhile.
type UploadMemory struct {
	Uploads, UploadBytes int
	// Budget is the router's --max-buffered-bytes; PeakRSS its peak
	// resident set (VmHWM) over the burst.
	Budget, PeakRSS int64
	// Forwarded, Refused and Failed count the uploads forwarded, refused
	// (503) and cut by a connection error.
	Forwarded, Refused, Failed int
	// SmallOK and SmallFailed count the small requests sent during the
	// burst; SmallP99 is their latency.
	SmallOK, SmallFailed int
	SmallP99             time.Duration
}

// measureUploads sends 64 concurrent 16 MiB chat bodies through the router
// with a 256 MiB buffer budget, and small requests meanwhile; it reports
// the router's peak RSS (Linux /proc) against the budget.
func (c *Config) measureUploads(ctx context.Context) (UploadMemory, error) {
	const uploads, budget = 64, 256 << 20
	dir := filepath.Join(c.WorkDir, "uploads")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return UploadMemory{}, err
	}
	sims, err := c.startSims(1, proxyTimeScale)
	if err != nil {
		return UploadMemory{}, err
	}
	f := &fleet{sims: sims, bin: c.router}
	defer f.stop()
	if err := f.startRouter(ctx, c, dir, policy.PrefixAware, "--max-buffered-bytes", strconv.Itoa(budget)); err != nil {
		return UploadMemory{}, err
	}
	big, _ := workload.Body(workload.Request{MaxTokens: 1, Messages: []workload.Message{
		{Role: "user", Content: randomText(rand.New(rand.NewPCG(c.Seed, 5)), 16<<20-1024)},
	}}, workload.Options{Model: c.Model})
	small, _ := workload.Body(workload.Request{MaxTokens: 1, Messages: []workload.Message{{Role: "user", Content: "hi"}}}, workload.Options{Model: c.Model})
	client := workload.NewClient()
	defer client.CloseIdleConnections()
	post := func(body []byte) (int, time.Duration, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.routerURL+"/v1/chat/completions", bytes.NewReader(body))
		if err != nil {
			return 0, 0, err
		}
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode, time.Since(t0), nil
	}
	m := UploadMemory{Uploads: uploads, UploadBytes: len(big), Budget: budget}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range uploads {
		wg.Go(func() {
			code, _, err := post(big)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				// The router answers 503 without reading the body and
				// closes; a client still writing may see the reset first.
				m.Failed++
			case code == http.StatusServiceUnavailable:
				m.Refused++
			default:
				m.Forwarded++
			}
		})
	}
	done := make(chan struct{})
	var smallTimes []time.Duration
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			default:
			}
			code, d, err := post(small)
			mu.Lock()
			if err == nil && code == http.StatusOK {
				m.SmallOK++
				smallTimes = append(smallTimes, d)
			} else {
				m.SmallFailed++
			}
			finished := m.Forwarded+m.Refused+m.Failed == uploads
			mu.Unlock()
			if finished {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	wg.Wait()
	<-done
	if len(smallTimes) > 0 {
		m.SmallP99 = quantile(smallTimes, 0.99)
	}
	m.PeakRSS, err = peakRSS(f.router.Pid())
	return m, err
}

// peakRSS reads a process's peak resident set size (VmHWM) in bytes.
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read router memory: %w", err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// processCPU reads the CPU time (user + system) a process has used, from
// /proc/<pid>/stat in clock ticks of 1/100 s (Linux's USER_HZ).
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read router CPU time: %w", err)
	}
	// Fields after the command name, which is in parentheses and may
	// hold spaces: state is the first, utime the 12th, stime the 13th.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// routerCPU is the CPU time the processes used, summed.
func routerCPU(pids ...int) (time.Duration, error) {
	var sum time.Duration
	for _, pid := range pids {
		d, err := processCPU(pid)
		if err != nil {
			return 0, err
		}
		sum += d
	}
	return sum, nil
}

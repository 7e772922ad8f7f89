package picker

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/warmroute/warmroute/sidecar/router/policy"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

func testKeys(t testing.TB, secret []byte) Keys {
	t.Helper()
	k, err := DeriveKeys(secret)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func testConfig(keys Keys, n, threshold int) policy.Config {
	cfg := policy.Config{Strategy: policy.PrefixAware, Model: "m", HashSeed: keys.HashSeed, PrefixLength: 1024, ConcurrencyThreshold: threshold}
	for i := range n {
		cfg.Instances = append(cfg.Instances, policy.Instance{ID: fmt.Sprintf("vllm-%d", i), Address: fmt.Sprintf("10.0.0.%d:8000", i+1)})
	}
	return cfg
}

// testTries is Options.Tries in tests: the proxy's default --max-attempts.
const testTries = 3

// newReplica is one router replica's picker under cfg.
func newReplica(t testing.TB, name string, keys Keys, cfg policy.Config) *Picker {
	t.Helper()
	p := New(Options{Replica: name, Keys: keys, Own: policy.New(policy.Tuning{}), Tuning: policy.Tuning{}, Tries: testTries})
	if err := p.Update(cfg); err != nil {
		t.Fatal(err)
	}
	return p
}

// newLeader is "router-0" leading under cfg, its pick API on loopback.
func newLeader(t testing.TB, keys Keys, cfg policy.Config) (*Picker, *httptest.Server) {
	t.Helper()
	p := newReplica(t, "router-0", keys, cfg)
	if err := p.Lead(); err != nil {
		t.Fatal(err)
	}
	return p, serve(t, p)
}

// leaderAndFollower is a leader over n instances and "router-1" asking it.
func leaderAndFollower(t testing.TB, n int) (leader, follower *Picker) {
	t.Helper()
	keys := testKeys(t, testSecret)
	cfg := testConfig(keys, n, 10)
	leader, srv := newLeader(t, keys, cfg)
	follower = newReplica(t, "router-1", keys, cfg)
	follower.Follow(strings.TrimPrefix(srv.URL, "http://"))
	return leader, follower
}

// serve runs p's pick API on loopback, with the pick listener's server
// (limits and timeouts) as the router runs it.
func serve(t testing.TB, p *Picker) *httptest.Server {
	t.Helper()
	return serveWith(t, p.Server("", nil))
}

func serveWith(t testing.TB, srv *http.Server) *httptest.Server {
	t.Helper()
	s := httptest.NewUnstartedServer(nil)
	s.Config = srv
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func key(p *Picker, text string) policy.Key {
	return p.opts.Own.Key(policy.Request{Text: []byte(text), WindowBytes: len(text), PromptBytes: len(text)})
}

func picks(t testing.TB, m *Metrics, source string) float64 {
	t.Helper()
	return counter(m.Picks.WithLabelValues(source))
}

// callers runs n goroutines that share the calls numbered 0 to total-1,
// caller c making call i with do(c, i) until do returns false or the calls
// run out, and waits for them.
func callers(n int, total int64, do func(c int, i int64) bool) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for c := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= total || !do(c, i) {
					return
				}
			}
		}()
	}
	wg.Wait()
}

// open is how many requests the ledger counts in flight.
func (l *ledger) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.tickets)
}

package peers

import (
	"context"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// fakeState stands in for the policy: it reports its own loads and
// placements and records what the transport hands it.
type fakeState struct {
	mu         sync.Mutex
	loads      []policy.InstanceLoad
	placements []policy.Placement  // placement i has Seq i+1
	sinces     []uint64            // since of every LocalReport
	pulledBy   []string            // puller of every LocalReport
	acks       map[string][]uint64 // seq of every PeerApplied, by puller
	applied    map[string][]policy.Report
	forgotten  []string
	replicas   int
	snapshot   []byte
	restored   []byte
	long       chan struct{} // LongPrefills
}

func newFakeState(load int64) *fakeState {
	return &fakeState{loads: []policy.InstanceLoad{{ID: "i0", Requests: load}}, applied: map[string][]policy.Report{}, long: make(chan struct{}, 1)}
}

func (f *fakeState) LongPrefills() <-chan struct{} { return f.long }

// appliedFrom counts the reports applied from the peer named replica.
func (f *fakeState) appliedFrom(replica string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.applied[replica])
}

// pulls counts the reports pulled by the peer named puller.
func (f *fakeState) pulls(puller string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, p := range f.pulledBy {
		if p == puller {
			n++
		}
	}
	return n
}

func (f *fakeState) place(hashes ...uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, h := range hashes {
		f.placements = append(f.placements, policy.Placement{Hash: h, Instance: "i0"})
	}
}

func (f *fakeState) PeerApplied(puller string, seq uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.acks == nil {
		f.acks = map[string][]uint64{}
	}
	f.acks[puller] = append(f.acks[puller], seq)
}

func (f *fakeState) LocalReport(puller string, since uint64) policy.Report {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sinces = append(f.sinces, since)
	f.pulledBy = append(f.pulledBy, puller)
	r := policy.Report{Seq: uint64(len(f.placements)), Loads: slices.Clone(f.loads)}
	if since < uint64(len(f.placements)) {
		r.Placements = slices.Clone(f.placements[since:])
	}
	return r
}

func (f *fakeState) ApplyPeer(r policy.Report) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied[r.Replica] = append(f.applied[r.Replica], r)
}

func (f *fakeState) ForgetPeer(replica string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgotten = append(f.forgotten, replica)
}

func (f *fakeState) SetReplicas(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replicas = n
}

func (f *fakeState) Snapshot() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.snapshot)
}

func (f *fakeState) Restore(b []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.restored = slices.Clone(b)
	return nil
}

func (f *fakeState) Peek(policy.Request) (policy.Peeked, error) {
	return policy.Peeked{Instance: "i0", Placed: "i0"}, nil
}

// with runs fn under the fake's lock.
func (f *fakeState) with(fn func(f *fakeState)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// placedHashes is every placement applied from one replica, in order.
func (f *fakeState) placedHashes(replica string) []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []uint64
	for _, r := range f.applied[replica] {
		for _, p := range r.Placements {
			out = append(out, p.Hash)
		}
	}
	return out
}

var _ State = (*fakeState)(nil)

// testOptions pull fast so tests finish quickly; nothing asserts on time.
func testOptions(name string) Options {
	return Options{Replica: name, Interval: 5 * time.Millisecond, StaleAfter: 100 * time.Millisecond, BootstrapWait: 5 * time.Second}
}

// serve starts a replica's peer endpoint on addr ("" for any loopback
// port) and returns its address and a function that stops it.
func serve(t *testing.T, addr string, opts Options, st State) (string, func()) {
	t.Helper()
	return serveWaking(t, addr, opts, st, nil)
}

// serveWaking is serve with the Waker that pokes are handed to.
func serveWaking(t *testing.T, addr string, opts Options, st State, w Waker) (string, func()) {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: NewServer(opts, st, w).Handler()}
	go func() { _ = srv.Serve(ln) }()
	var once sync.Once
	stop := func() { once.Do(func() { _ = srv.Close() }) }
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// startPuller runs a puller over a static peer list until the test ends.
func startPuller(t *testing.T, opts Options, st State, peers ...string) (*Puller, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	p := NewPuller(opts, st, reg, logr.Discard())
	runPuller(t, p, peers...)
	return p, reg
}

// runPuller runs p over a static peer list until the test ends.
func runPuller(t *testing.T, p *Puller, peers ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx, Static(peers)) }()
	t.Cleanup(func() { cancel(); <-done })
}

// settle is gomega for t with a generous Eventually deadline: a bound on
// a loaded machine, not a performance assertion.
func settle(t *testing.T) *WithT {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(20 * time.Second)
	g.SetDefaultEventuallyPollingInterval(5 * time.Millisecond)
	return g
}

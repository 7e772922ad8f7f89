package peers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmroute/warmroute/sidecar/router/metrics"
	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// Puller pulls every peer's report each interval and hands it to the
// policy. A peer that cannot be reached for StaleAfter is forgotten: the
// router then decides on what it knows without that peer, and never fails
// a request because of it.
type Puller struct {
	opts    Options
	state   State
	client  *http.Client
	metrics *metrics.PeerMetrics
	log     logr.Logger
	now     func() time.Time

	mu         sync.Mutex
	ctx        context.Context // set by Run; ends with it
	peers      map[string]*peer
	discovered chan struct{} // closed on the first discovery update
	wg         sync.WaitGroup
}

// peer is one peer address; its fields are guarded by Puller.mu.
type peer struct {
	addr    string
	cancel  context.CancelFunc
	replica string // from its reports; "" until the first one
	epoch   uint64
	since   uint64 // highest Seq applied in this epoch
	added   time.Time
	lastOK  time.Time
	stale   bool // forgotten after failing for StaleAfter
	self    bool // the address turned out to be this replica
	// wake asks follow to pull at once (the peer poked this replica);
	// poke asks poker to poke the peer. Both hold one signal at most, so
	// a burst of them costs one pull or one poke.
	wake, poke chan struct{}
}

// NewPuller registers its metrics on reg.
func NewPuller(opts Options, state State, reg prometheus.Registerer, log logr.Logger) *Puller {
	opts = opts.withDefaults()
	p := &Puller{
		opts:  opts,
		state: state,
		// Go's transport asks for gzip and decompresses by itself.
		client:     &http.Client{Timeout: opts.pullTimeout()},
		log:        log,
		now:        time.Now,
		peers:      map[string]*peer{},
		discovered: make(chan struct{}),
	}
	p.metrics = metrics.NewPeers(reg, metrics.PeerGauges{Peers: p.counts, ReportAge: p.reportAge})
	return p
}

// Run follows the discovered peers until ctx ends.
func (p *Puller) Run(ctx context.Context, d Discovery) error {
	run, cancel := context.WithCancel(ctx)
	defer cancel()
	p.mu.Lock()
	p.ctx = run
	p.mu.Unlock()
	p.wg.Go(func() { p.pokeOnLongPrefills(run) })
	err := d.Run(run, p.SetPeers)
	cancel()
	p.SetPeers(nil)
	p.wg.Wait()
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("peer discovery: %w", err)
	}
	return nil
}

// SetPeers replaces the set of peer addresses (host:port).
func (p *Puller) SetPeers(addrs []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx == nil {
		return
	}
	want := map[string]bool{}
	for _, a := range addrs {
		want[a] = true
	}
	for addr, pr := range p.peers {
		if !want[addr] || p.ctx.Err() != nil {
			pr.cancel()
			delete(p.peers, addr)
			if pr.replica != "" && !pr.self && !pr.stale {
				p.state.ForgetPeer(pr.replica)
			}
		}
	}
	if p.ctx.Err() == nil {
		for addr := range want {
			if _, ok := p.peers[addr]; ok {
				continue
			}
			ctx, cancel := context.WithCancel(p.ctx)
			pr := &peer{addr: addr, cancel: cancel, added: p.now(), wake: make(chan struct{}, 1), poke: make(chan struct{}, 1)}
			p.peers[addr] = pr
			p.wg.Go(func() { p.follow(ctx, pr) })
			p.wg.Go(func() { p.poker(ctx, pr) })
		}
	}
	p.setReplicasLocked()
	select {
	case <-p.discovered:
	default:
		close(p.discovered)
	}
}

func (p *Puller) setReplicasLocked() {
	n := 1
	for _, pr := range p.peers {
		if !pr.self {
			n++
		}
	}
	p.state.SetReplicas(n)
}

// follow pulls one peer until ctx ends, at the ticks of alignedTick, and
// at once when the peer pokes (see Wake), though not more often than every
// wakeGap.
func (p *Puller) follow(ctx context.Context, pr *peer) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		began := time.Now()
		switch p.pull(ctx, pr) {
		case stop:
			return
		case again:
			continue
		}
		t.Reset(time.Until(alignedTick(time.Now(), p.opts.Interval)))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-pr.wake:
			if !sleep(ctx, time.Until(began.Add(p.opts.wakeGap()))) {
				return
			}
		}
	}
}

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Wake pulls the peer named replica at once: it has just sent an instance
// a long prefill (see policy.Policy.LongPrefills) that this replica would
// otherwise learn of only at the next tick. *Puller is the Server's Waker.
func (p *Puller) Wake(replica string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pr := range p.peers {
		if pr.replica == replica && !pr.self {
			signal(pr.wake)
		}
	}
}

// signal leaves one signal in c unless one is already pending.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// pokeOnLongPrefills pokes every peer whenever the policy sends a long
// prefill, until ctx ends.
func (p *Puller) pokeOnLongPrefills(ctx context.Context) {
	long := p.state.LongPrefills()
	for {
		select {
		case <-ctx.Done():
			return
		case <-long:
		}
		p.mu.Lock()
		for _, pr := range p.peers {
			if !pr.self && !pr.stale {
				signal(pr.poke)
			}
		}
		p.mu.Unlock()
	}
}

// poker asks one peer to pull this replica at once each time pr.poke is
// signalled, until ctx ends: best effort, as a lost poke only leaves the
// peer to pull at its next tick.
func (p *Puller) poker(ctx context.Context, pr *peer) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-pr.poke:
		}
		if err := p.post(ctx, pr.addr, PokePath+"?"+p.from()); err != nil {
			if ctx.Err() != nil {
				return
			}
			p.metrics.Pokes.WithLabelValues(metrics.PullError).Inc()
			p.log.V(1).Info("peer poke failed", "peer", pr.addr, "error", err.Error())
			continue
		}
		p.metrics.Pokes.WithLabelValues(metrics.PullOK).Inc()
	}
}

// alignedTick is the next multiple of interval of the wall clock after
// now. Every replica pulls every peer at the same ticks (pods' clocks agree
// to well under a millisecond or two), so the reports each replica holds
// of a peer were made at about the same moment: the part of its own
// requests that every peer is sure to know of (the oldest report a peer
// holds, see policy.pullers) is then about as recent as the report itself,
// and replicas compare the same picture. Pulling on each puller's own
// phase, a replica's three reports of the same instance could be up to an
// interval apart, so it counted its sends from the oldest and spilled more.
func alignedTick(now time.Time, interval time.Duration) time.Time {
	return now.Truncate(interval).Add(interval)
}

type next int

const (
	wait  next = iota // pull again at the next tick
	again             // pull again at once
	stop              // stop pulling this address
)

// pull fetches and applies one report.
func (p *Puller) pull(ctx context.Context, pr *peer) next {
	p.mu.Lock()
	since := pr.since
	p.mu.Unlock()
	r, err := p.fetchReport(ctx, pr.addr, since)
	if ctx.Err() != nil {
		return stop
	}
	n, applied := p.apply(pr, since, r, err)
	if applied {
		p.ack(ctx, pr.addr, r.Seq)
	}
	return n
}

// apply records the outcome of one pull and applies its report; applied
// says the report is now in the policy's picture.
func (p *Puller) apply(pr *peer, since uint64, r policy.Report, err error) (next, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if err != nil {
		result := metrics.PullError
		if errors.Is(err, errInvalid) {
			result = metrics.PullInvalid
		}
		p.metrics.Pulls.WithLabelValues(result).Inc()
		last := pr.lastOK
		if last.IsZero() {
			last = pr.added
		}
		if !pr.stale && now.Sub(last) > p.opts.StaleAfter {
			pr.stale = true
			if pr.replica != "" {
				p.state.ForgetPeer(pr.replica)
			}
			p.log.Info("peer stale; deciding without its load", "peer", pr.addr, "replica", pr.replica, "error", err.Error())
		}
		return wait, false
	}
	p.metrics.Pulls.WithLabelValues(metrics.PullOK).Inc()
	if r.Replica == p.opts.Replica {
		// A static peer list may name this replica too.
		pr.self = true
		p.setReplicasLocked()
		return stop, false
	}
	if pr.replica != "" && r.Replica != pr.replica && !pr.stale {
		// Another process took over the address (a new pod, same IP).
		p.state.ForgetPeer(pr.replica)
	}
	if r.Replica != pr.replica || r.Epoch != pr.epoch || pr.stale {
		// A new process, or one whose merged state was forgotten: its
		// placements must be asked for from the beginning, not from a
		// since that counted another process's Seq or what we dropped.
		pr.replica, pr.epoch, pr.since, pr.stale = r.Replica, r.Epoch, 0, false
		if since != 0 {
			return again, false
		}
	}
	p.state.ApplyPeer(r)
	pr.since = max(pr.since, r.Seq)
	pr.lastOK = now
	return wait, true
}

// ack tells the peer that its report numbered seq is applied, so that it
// may count its sends from that report rather than from the one before
// (see policy.Policy.PeerApplied). It is best effort: a lost ack only
// leaves the peer counting from the older report, which is safe.
func (p *Puller) ack(ctx context.Context, addr string, seq uint64) {
	if err := p.post(ctx, addr, AckPath+"?seq="+strconv.FormatUint(seq, 10)+"&"+p.from()); err != nil {
		p.metrics.Acks.WithLabelValues(metrics.PullError).Inc()
		p.log.V(1).Info("peer ack failed", "peer", addr, "error", err.Error())
		return
	}
	p.metrics.Acks.WithLabelValues(metrics.PullOK).Inc()
}

// post sends a body-less POST to a peer path, which answers 204.
func (p *Puller) post(ctx context.Context, addr, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// from is the query parameter that names this replica to the peer, so
// that it knows which of its reports this replica holds and who poked it
// (Server.puller).
func (p *Puller) from() string { return "from=" + url.QueryEscape(p.opts.Replica) }

// errInvalid marks an answer that arrived but is not a usable report.
var errInvalid = errors.New("invalid peer answer")

func (p *Puller) fetchReport(ctx context.Context, addr string, since uint64) (policy.Report, error) {
	var r policy.Report
	body, err := p.get(ctx, addr, ReportPath+"?since="+strconv.FormatUint(since, 10)+"&"+p.from(), p.opts.MaxReportBytes)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return r, fmt.Errorf("%w: decode report from %s: %w", errInvalid, addr, err)
	}
	if r.Replica == "" {
		return r, fmt.Errorf("%w: report from %s names no replica", errInvalid, addr)
	}
	return r, nil
}

// get reads a peer path, refusing answers over limit bytes.
func (p *Puller) get(ctx context.Context, addr, path string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return nil, fmt.Errorf("peer request %s: %w", addr, err)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("pull from peer %s: %w", addr, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return nil, fmt.Errorf("pull from peer %s: status %d", addr, resp.StatusCode)
	}
	// Limits apply to the decompressed bytes, so a small gzip stream
	// cannot inflate into unbounded memory.
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read from peer %s: %w", addr, err)
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("%w: answer from %s exceeds %d bytes", errInvalid, addr, limit)
	}
	return body, nil
}

// Bootstrap restores the first snapshot a peer serves, so that a replica
// that starts (or restarts) places prefixes as the others do from its first
// request. It waits for the first discovery result and gives up after
// BootstrapWait: a lone replica has nobody to learn from.
func (p *Puller) Bootstrap(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.opts.BootstrapWait)
	defer cancel()
	select {
	case <-p.discovered:
	case <-ctx.Done():
		return errors.New("no peers discovered in time for a snapshot")
	}
	var errs []error
	for ctx.Err() == nil {
		addrs := p.addrs()
		if len(addrs) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, addr := range addrs {
			b, err := p.get(ctx, addr, SnapshotPath, p.opts.MaxSnapshotBytes)
			if err == nil {
				if err = p.state.Restore(b); err == nil {
					p.log.Info("restored the shared placement state", "peer", addr, "bytes", len(b))
					return nil
				}
				err = fmt.Errorf("restore snapshot from %s: %w", addr, err)
			}
			errs = append(errs, err)
		}
		// Peers that are starting too may not listen yet: retry briefly.
		select {
		case <-ctx.Done():
		case <-time.After(p.opts.Interval):
		}
	}
	return fmt.Errorf("no peer snapshot within %s: %w", p.opts.BootstrapWait, errors.Join(errs...))
}

// addrs are the peers to try, in a stable order.
func (p *Puller) addrs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for addr, pr := range p.peers {
		if !pr.self {
			out = append(out, addr)
		}
	}
	slices.Sort(out)
	return out
}

// counts reports the peers whose report is in use and the others.
func (p *Puller) counts() (fresh, stale int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	for _, pr := range p.peers {
		switch {
		case pr.self:
		case !pr.stale && !pr.lastOK.IsZero() && now.Sub(pr.lastOK) <= p.opts.StaleAfter:
			fresh++
		default:
			stale++
		}
	}
	return fresh, stale
}

// reportAge is the age of the oldest report in use, in seconds.
func (p *Puller) reportAge() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	var age time.Duration
	for _, pr := range p.peers {
		if !pr.self && !pr.stale && !pr.lastOK.IsZero() {
			age = max(age, now.Sub(pr.lastOK))
		}
	}
	return age.Seconds()
}

package picker

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Election is where and how the replicas of an endpoint elect the picker.
type Election struct {
	Client    kubernetes.Interface
	Namespace string
	// Lease is the name of the endpoint's Lease; the operator grants its
	// router ServiceAccount get/update on it and nothing else.
	Lease string
	// Name is this replica's pod name; Address is its pick listener
	// (pod IP and port). Both go into the Lease's holder identity, which
	// is how the others find the leader.
	Name, Address string
	// Lease timings (see DefaultLeaseDuration).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Lease timings. A leader that dies is replaced within LeaseDuration +
// RetryPeriod (about 5 s), during which replicas route by the fallback; a
// leader that steps down releases the Lease (ReleaseOnCancel) and a
// candidate takes it at its next try, within RetryPeriod (with client-go's
// jitter, 1.2 s). The leader renews every RetryPeriod and gives up when it
// could not for RenewDeadline, a second before its Lease can be taken
// (client-go requires LeaseDuration > RenewDeadline > 1.2 × RetryPeriod),
// so two leaders never decide at once as long as clocks run at the same
// rate. Each replica reads or writes the Lease once per RetryPeriod: three
// replicas cost the API server three requests a second.
const (
	DefaultLeaseDuration = 4 * time.Second
	DefaultRenewDeadline = 3 * time.Second
	DefaultRetryPeriod   = time.Second
)

// handoffTimeout bounds the successor's fetch of the old leader's state;
// a dead leader refuses the connection at once, so it is reached only when
// the old leader hangs.
const handoffTimeout = 2 * time.Second

// identity is the Lease holder identity: "<pod name>@<pick address>".
func identity(name, addr string) string { return name + "@" + addr }

// addressOf is the pick address in a holder identity ("" if none).
func addressOf(id string) string {
	if i := strings.LastIndexByte(id, '@'); i >= 0 {
		return id[i+1:]
	}
	return ""
}

// Elect runs this replica as a candidate until ctx ends or StepDown is
// called: as the leader it decides in process and serves the pick API; as
// a follower it asks the leader the Lease names; while the Lease names
// nobody, it falls back. On StepDown the leader stops deciding, keeps its
// state for its successor and releases the Lease.
func (p *Picker) Elect(ctx context.Context, e Election) error {
	e.LeaseDuration = cmpOr(e.LeaseDuration, DefaultLeaseDuration)
	e.RenewDeadline = cmpOr(e.RenewDeadline, DefaultRenewDeadline)
	e.RetryPeriod = cmpOr(e.RetryPeriod, DefaultRetryPeriod)
	self := identity(e.Name, e.Address)
	ctx, stop := context.WithCancel(ctx)
	p.mu.Lock()
	p.stop = stop
	p.mu.Unlock()
	defer close(p.done)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Lease},
		Client:     e.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: self},
	}
	var last atomic.Value // string: the last leader seen that is not this replica
	last.Store("")
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   e.LeaseDuration,
		RenewDeadline:   e.RenewDeadline,
		RetryPeriod:     e.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            e.Lease,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				p.startTerm(ctx, addressOf(last.Load().(string)))
				go p.expireLoop(ctx)
			},
			OnStoppedLeading: p.stepDown,
			OnNewLeader:      func(string) {},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	// Followers track the Lease holder every RetryPeriod rather than in
	// OnNewLeader, whose calls run in goroutines of their own and may
	// arrive out of order.
	go func() {
		tick := time.NewTicker(e.RetryPeriod / 4)
		defer tick.Stop()
		following := "-"
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			id := le.GetLeader()
			if id != "" && id != self {
				last.Store(id)
			}
			if le.IsLeader() || id == following {
				continue
			}
			following = id
			if id == self {
				continue // this replica's term is starting
			}
			p.opts.Log.Info("following the elected picker", "leader", id)
			p.Follow(addressOf(id))
		}
	}()
	for ctx.Err() == nil {
		le.Run(ctx) // returns when the term ends; stand again
	}
	return nil
}

// startTerm begins this replica's term as the picker, warm with the state
// of the old leader at prev (its pick address) when it stepped down
// gracefully, cold otherwise.
func (p *Picker) startTerm(ctx context.Context, prev string) {
	l, err := newLedger(p.opts.Tuning, p.cfg.Load())
	if err != nil {
		p.opts.Log.Error(err, "cannot start the picker's term")
		return
	}
	start := "cold"
	if prev != "" {
		c := &remoteConn{addr: prev, replica: p.opts.Replica, keys: p.opts.Keys, client: &http.Client{Transport: p.opts.Transport}}
		hctx, cancel := context.WithTimeout(ctx, handoffTimeout)
		snap, err := c.handoff(hctx)
		cancel()
		switch {
		case err != nil:
			p.opts.Log.Info("starting cold: no state from the old leader", "old", prev, "reason", err.Error())
		case l.policy.Restore(snap) != nil:
			p.opts.Log.Info("starting cold: the old leader's state did not restore", "old", prev)
		default:
			start = "warm"
		}
	}
	p.opts.Metrics.Handoffs.WithLabelValues(start).Inc()
	p.opts.Log.Info("elected picker", "start", start, "indexEntries", l.policy.IndexEntries())
	p.becomeLeader(l)
}

// StepDown ends this replica's candidacy: while it leads it stops
// deciding, keeps its state for its successor and releases the Lease. It
// returns once the Lease is released. Without an election (a fixed picker)
// there is no successor to hand over to, and nothing changes: a router
// alone goes on deciding its last requests itself.
func (p *Picker) StepDown() {
	p.mu.Lock()
	stop := p.stop
	p.mu.Unlock()
	if stop == nil {
		return
	}
	p.stepDown()
	stop()
	<-p.done
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

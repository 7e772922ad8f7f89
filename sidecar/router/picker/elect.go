package picker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
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

// Lease timings. A leader that dies is replaced within LeaseDuration + two
// RetryPeriods with jitter (4–6.4 s), during which replicas route by the
// fallback; one that steps down releases the Lease and a candidate takes
// it within a RetryPeriod. The leader gives up when it could not renew for
// RenewDeadline, a second before its Lease can be taken, so two leaders
// never decide at once while clocks run at the same rate (client-go
// requires LeaseDuration > RenewDeadline > 1.2 × RetryPeriod). Each
// replica reads or writes the Lease once per RetryPeriod.
const (
	DefaultLeaseDuration = 4 * time.Second
	DefaultRenewDeadline = 3 * time.Second
	DefaultRetryPeriod   = time.Second
)

// handoffTimeout bounds how long a leader that stepped down waits for a
// successor to take the Lease and sends it its state: a candidate takes a
// released Lease within the retry period (1.2 s with jitter). A variable
// so that tests under the race detector, which slows sealing a snapshot
// many times over, can wait longer.
var handoffTimeout = 3 * time.Second

// addressOf is the pick address in a holder identity ("" if none).
func addressOf(id string) string {
	if i := strings.LastIndexByte(id, '@'); i >= 0 {
		return id[i+1:]
	}
	return ""
}

// Elect runs this replica as a candidate until ctx ends or StepDown is
// called: it leads, or asks the leader the Lease names, or while the Lease
// names nobody, falls back.
func (p *Picker) Elect(ctx context.Context, e Election) error {
	e.LeaseDuration = cmp.Or(max(e.LeaseDuration, 0), DefaultLeaseDuration)
	e.RenewDeadline = cmp.Or(max(e.RenewDeadline, 0), DefaultRenewDeadline)
	e.RetryPeriod = cmp.Or(max(e.RetryPeriod, 0), DefaultRetryPeriod)
	self := e.Name + "@" + e.Address // the Lease holder identity
	ctx, stop := context.WithCancel(ctx)
	defer close(p.done)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Lease},
		Client:     e.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: self},
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   e.LeaseDuration,
		RenewDeadline:   e.RenewDeadline,
		RetryPeriod:     e.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            e.Lease,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { p.startTerm() },
			OnStoppedLeading: func() { p.stepDown() },
		},
	})
	if err != nil {
		stop()
		return fmt.Errorf("leader election: %w", err)
	}
	p.mu.Lock()
	p.stop, p.self = stop, self
	p.holder = func(ctx context.Context) (string, error) {
		rec, _, err := lock.Get(ctx)
		if err != nil {
			return "", err
		}
		return rec.HolderIdentity, nil
	}
	p.mu.Unlock()
	// Followers track the Lease holder every RetryPeriod rather than in
	// OnNewLeader, whose calls run in goroutines of their own and may
	// arrive out of order.
	go func() {
		tick := time.NewTicker(e.RetryPeriod / 4)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if !le.IsLeader() {
				p.track(le.GetLeader(), self)
			}
		}
	}()
	for ctx.Err() == nil {
		le.Run(ctx) // returns when the term ends; stand again
	}
	return nil
}

// startTerm begins this replica's term as the picker, cold: a leader that
// stepped down gracefully sends its state within a moment (handOver).
func (p *Picker) startTerm() {
	if err := p.Lead(); err != nil {
		p.opts.Log.Error(err, "cannot start the picker's term")
		return
	}
	p.opts.Metrics.Terms.Inc()
	p.opts.Log.Info("elected picker")
}

// StepDown ends this replica's candidacy: while it leads it stops
// deciding, releases the Lease, and sends its state to the replica that
// takes the Lease next, so that one starts warm, within handoffTimeout.
// Without an election there is no successor, and a router alone goes on
// deciding its last requests itself.
func (p *Picker) StepDown() {
	p.mu.Lock()
	stop, holder, self := p.stop, p.holder, p.self
	p.mu.Unlock()
	if stop == nil {
		return
	}
	snap := p.stepDown()
	stop()
	<-p.done
	if snap != nil {
		p.handOver(holder, self, snap)
	}
}

// handOver waits for a successor to take the Lease and sends it snap.
func (p *Picker) handOver(holder func(context.Context) (string, error), self string, snap []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), handoffTimeout)
	defer cancel()
	for {
		id, err := holder(ctx)
		if err == nil && id != "" && id != self {
			// Sealed: a successor without the key, which any holder of
			// the Lease's update right can name, reads nothing of it.
			_, err := p.call(ctx, addressOf(id), PathHandoff, snap)
			if err == nil {
				p.opts.Metrics.Handoffs.WithLabelValues("sent", "ok").Inc()
				return
			}
			if !errors.Is(err, errNotLeader) || ctx.Err() != nil {
				// Not merely a successor still starting its term.
				p.opts.Metrics.Handoffs.WithLabelValues("sent", "failed").Inc()
				p.opts.Log.Info("could not hand the picker's state over", "successor", id, "error", err.Error())
				return
			}
		}
		select {
		case <-ctx.Done():
			p.opts.Metrics.Handoffs.WithLabelValues("sent", "no_successor").Inc()
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

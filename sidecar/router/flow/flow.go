// Package flow shares one endpoint between tenants when its fleet is full:
// per-tenant request and token rate limits (ratelimit.go), a queue served by
// priority, then weighted fair share in tokens, then earliest deadline
// (queue.go, order.go), and headroom kept for the tenants that come first
// (headroom.go). The elected picker runs one Controller per endpoint, so
// limits and shares hold whatever the number of router replicas.
//
// A request is Admitted (its rate limits), then placed at once if MayPlace
// and an instance has room (Start), or else it Waits, with the Epoch read
// before it looked for room. Its Ticket is Settled with the tokens it used,
// and Freed passes its slot to the queue. Admit takes no lock for a tenant
// without limits, and Freed none while nobody is queued.
package flow

import (
	"maps"
	"sync"
	"sync/atomic"
	"time"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

// DefaultName names the Default entry in metrics and outcomes. Tenant names
// never start with '.', so it cannot collide with a listed tenant.
const DefaultName = ".default"

// Limits are one tenant's share, priority, rates and queue bound, as the
// routing document gives them.
type Limits = routing.TenantLimits

// Config is an endpoint's flow control. The zero Config is disabled: no
// limits and no queue.
type Config struct {
	// Default applies to every tenant not in Tenants and to requests
	// without a tenant. They share it as one tenant (one bucket, one queue,
	// one share), so that minting new tenant names (a trusted header can)
	// neither escapes the limits nor grows the controller's state.
	Default Limits
	Tenants map[string]Limits
	// QueueTimeout is the longest a request waits in a queue.
	QueueTimeout time.Duration
	// MaxQueued bounds the requests queued over all tenants.
	MaxQueued int
}

// Enabled says whether flow control is configured; when it is not, the
// router places requests as it would without it.
func (c Config) Enabled() bool { return c.QueueTimeout > 0 }

// FromDocument converts the routing document's flow control, which the
// controller has defaulted; nil is the disabled Config.
func FromDocument(d *routing.FlowControl) Config {
	if d == nil {
		return Config{}
	}
	return Config{Default: d.Default, Tenants: maps.Clone(d.Tenants), MaxQueued: d.MaxQueued,
		QueueTimeout: time.Duration(d.QueueTimeoutMillis) * time.Millisecond}
}

// Controller runs an endpoint's flow control. Its methods are safe for
// concurrent use.
type Controller struct {
	clock func() time.Time
	snap  atomic.Pointer[snapshot]

	// waiting counts queued requests (and, for a moment, one arriving);
	// epoch moves whenever capacity freed that no queued request took.
	// Freed and Wait read them in opposite orders (see Freed), so a request
	// that arrives while capacity frees is either released or told to try
	// placing again, never left waiting for a free instance.
	waiting, epoch atomic.Int64

	mu      sync.Mutex // guards what follows and the flows' queue state
	cfg     Config
	flows   map[string]*flow // by tenant, kept across updates
	q       order
	vnow    float64 // virtual time: the start tag of the last request served
	seq     uint64
	drain   float64 // seconds between releases, moving average
	lastOut time.Time
	metrics *Metrics
	// capacity is the fleet's slots (SetCapacity), running the requests
	// Started and not settled, window when the demand window began, and
	// hold the seconds a request holds its slot, moving average
	// (headroom.go).
	capacity, running int
	window            time.Time
	hold              float64
}

// snapshot is what Admit and Clamp read without a lock; Update replaces it.
type snapshot struct {
	timeout time.Duration
	tenants map[string]*entry
	def     *entry
}

// entry is one tenant's (or Default's) limits with its persistent state.
type entry struct {
	lim Limits
	lm  *limiter // nil: no rate limit
	fl  *flow
	m   *tenantMetrics
}

func (s *snapshot) lookup(tenant string) *entry {
	if e, ok := s.tenants[tenant]; ok {
		return e
	}
	return s.def
}

// New returns a controller running cfg; clock is its time (time.Now in
// production, a simulated clock in tests).
func New(cfg Config, clock func() time.Time) *Controller {
	c := &Controller{clock: clock, flows: map[string]*flow{}, hold: defaultHold.Seconds(), metrics: NewMetrics(nil)}
	c.Update(cfg)
	return c
}

// Instrument makes the controller record into m (registered by the
// caller); nil keeps it recording into metrics nobody reads.
func (c *Controller) Instrument(m *Metrics) {
	if m == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.metrics = m
	c.applyLocked(c.cfg, c.clock())
}

// Update swaps in a new configuration. Queued requests stay queued and are
// re-evaluated: a removed tenant's fall under Default, priorities are
// clamped to the new ones, and requests over a lowered bound are shed. A
// disabled Config releases them all.
func (c *Controller) Update(cfg Config) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.applyLocked(cfg, c.clock())
}

func (c *Controller) applyLocked(cfg Config, now time.Time) {
	old := c.cfg
	c.cfg = cfg
	s := &snapshot{timeout: cfg.QueueTimeout, tenants: make(map[string]*entry, len(cfg.Tenants))}
	s.def = c.entryLocked(DefaultName, cfg.Default, now)
	for name, l := range cfg.Tenants {
		s.tenants[name] = c.entryLocked(name, l, now)
	}
	c.snap.Store(s)
	if !cfg.Enabled() {
		// Flow control turned off: the router places every request as it
		// comes, so the queued go now too.
		c.releaseLocked(c.q.n, now, nil)
	}
	c.requeueLocked(s, now)
	for name := range old.Tenants {
		if _, kept := cfg.Tenants[name]; !kept {
			delete(c.flows, name)
			c.metrics.forget(name)
		}
	}
}

// entryLocked builds name's entry, keeping its buckets and virtual time.
func (c *Controller) entryLocked(name string, l Limits, now time.Time) *entry {
	f := c.flows[name]
	if f == nil {
		f = &flow{name: name, d: demand{lastMean: -1}}
		c.flows[name] = f
	}
	e := &entry{lim: l, fl: f, m: c.metrics.tenant(name)}
	if l.RequestsPerMinute > 0 || l.TokensPerMinute > 0 {
		if f.lm == nil {
			f.lm = &limiter{}
		}
		f.lm.set(l.RequestsPerMinute, l.TokensPerMinute, now)
		e.lm = f.lm
	} else {
		f.lm = nil
	}
	// A weight below 1 would give the tenant unbounded service; the routing
	// document refuses it (routing.FlowControl.Validate), and the
	// controller never divides by it.
	f.weight = float64(max(l.Weight, 1))
	f.maxQueued, f.prio, f.m = l.MaxQueued, l.Priority, e.m
	return e
}

// Clamp is the priority a request of tenant gets when it asks for
// requested: its own, never above its tenant's.
func (c *Controller) Clamp(tenant string, requested int) int {
	return min(requested, c.snap.Load().lookup(tenant).lim.Priority)
}

// Enabled says whether flow control is configured (Config.Enabled).
func (c *Controller) Enabled() bool { return c.snap.Load().timeout > 0 }

// QueueTimeout is the longest a request waits in a queue.
func (c *Controller) QueueTimeout() time.Duration { return c.snap.Load().timeout }

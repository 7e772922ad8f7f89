package flow

import (
	"testing"
	"time"
)

// headroomFleet is a controller in front of a fleet of 16 slots, whose
// tenants' requests the test starts and ends by hand.
type headroomFleet struct {
	t       *testing.T
	clk     *simClock
	c       *Controller
	running map[string][]*Ticket
}

func newHeadroomFleet(t *testing.T, tenants map[string]Limits) *headroomFleet {
	clk := newSimClock()
	c := New(Config{QueueTimeout: time.Minute, MaxQueued: 100, Default: Limits{Weight: 1, MaxQueued: 10}, Tenants: tenants}, clk.time)
	c.SetCapacity(16)
	return &headroomFleet{t: t, clk: clk, c: c, running: map[string][]*Ticket{}}
}

// run starts n more requests of tenant, as the router places them.
func (f *headroomFleet) run(tenant string, n int) {
	for range n {
		tk, lim := f.c.Admit(tenant, 1000)
		if lim != nil {
			f.t.Fatalf("admit %s: %v", tenant, lim)
		}
		f.c.Start(tk)
		f.running[tenant] = append(f.running[tenant], tk)
	}
}

// end ends n of tenant's running requests.
func (f *headroomFleet) end(tenant string, n int) {
	for _, tk := range f.running[tenant][:n] {
		tk.Settle(Unknown)
	}
	f.running[tenant] = f.running[tenant][n:]
}

func (f *headroomFleet) may(tenant string, prio int, want bool, why string) {
	f.t.Helper()
	if got := f.c.MayPlace(tenant, prio); got != want {
		f.t.Errorf("%s: MayPlace(%s, %d) = %v, want %v", why, tenant, prio, got, want)
	}
}

func TestHeadroomForHigherPriority(t *testing.T) {
	f := newHeadroomFleet(t, map[string]Limits{"chat": {Weight: 1, Priority: 100, MaxQueued: 10}, "batch": {Weight: 1, Priority: -100, MaxQueued: 10}})
	f.run("chat", 9)
	f.clk.advance(time.Second)
	f.end("chat", 5) // chat's peak 9 and its margin 3, running 4
	f.run("batch", 3)
	// 9 free; chat may need 8 more at once.
	f.may("batch", -100, true, "one more batch request leaves chat's 8")
	f.run("batch", 1)
	f.may("batch", -100, false, "a second would leave chat 7 of its 8")
	f.may("chat", 100, true, "chat itself takes any free slot")
	f.may("batch", 100, false, "batch's priority is clamped to its tenant's")

	f.clk.advance(f.c.demandWindow())
	f.may("batch", -100, false, "chat's peak is remembered over the next window")
	f.end("chat", 4)
	f.clk.advance(f.c.demandWindow())
	f.may("batch", -100, true, "two windows on, chat's peak is the 4 it ran in the last")

	f.end("batch", 4)
	f.run("chat", 16)
	f.end("chat", 16)
	f.may("batch", -100, true, "an idle fleet serves whoever asks")
}

func TestHeadroomAtOnePriority(t *testing.T) {
	f := newHeadroomFleet(t, map[string]Limits{"a": {Weight: 1, MaxQueued: 10}, "b": {Weight: 1, MaxQueued: 10}})
	f.may("a", 0, true, "an empty fleet")
	f.run("b", 4)
	f.run("a", 9) // a asks for more than its half, b for less
	f.clk.advance(time.Second)
	f.end("b", 3) // b's peak 4 and its margin 2, running 1; 6 free
	f.may("a", 0, true, "a leaves b's 5 free")
	f.run("a", 1)
	f.may("a", 0, false, "one more would take from b's peak")
	f.may("b", 0, true, "b, within its share, takes any free slot")
	f.run("b", 4)
	f.clk.advance(time.Second)
	f.end("a", 10)
	f.clk.advance(time.Second)
	f.may("a", 0, true, "a tenant over its share with nothing running may take one slot")

	g := newHeadroomFleet(t, map[string]Limits{"a": {Weight: 1, MaxQueued: 10}, "b": {Weight: 1, MaxQueued: 10}})
	g.run("a", 7)
	g.run("b", 8)
	g.clk.advance(time.Second)
	g.end("b", 6)
	g.may("a", 0, true, "two tenants within their shares keep nothing from each other")
}

// TestHeadroomReleasesWhatTheStartedLeaveFree: queued requests held back
// by the headroom go as soon as it lets them, not one per slot that frees.
func TestHeadroomReleasesWhatTheStartedLeaveFree(t *testing.T) {
	f := newHeadroomFleet(t, map[string]Limits{"chat": {Weight: 1, Priority: 100, MaxQueued: 10}, "batch": {Weight: 1, Priority: -100, MaxQueued: 10}})
	f.run("chat", 16)
	var ws []*waiter
	for range 3 {
		tk, _ := f.c.Admit("batch", 1000)
		f.c.mu.Lock()
		w, _, err := f.c.arriveLocked(Queued{Tenant: "batch", Priority: -100, Tokens: 1000, Epoch: f.c.Epoch(), Ticket: tk})
		f.c.mu.Unlock()
		if w == nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	f.end("chat", 10)
	f.c.Freed(1)
	if released := countReleased(ws); released != 0 {
		t.Fatalf("%d batch requests released while chat's peak holds all 16 slots", released)
	}
	f.clk.advance(2 * f.c.demandWindow())
	f.c.Recheck() // no slot freed: time alone lifted the headroom
	if released := countReleased(ws); released != 3 {
		t.Fatalf("%d of 3 batch requests released once chat's peak passed with 10 free", released)
	}
	if f.c.running != 9 {
		t.Errorf("running %d, want chat's 6 and the 3 released", f.c.running)
	}
}

func countReleased(ws []*waiter) int {
	n := 0
	for _, w := range ws {
		if w.resolved && w.err == nil {
			n++
		}
	}
	return n
}

package custommetrics

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// StatusPublisher copies the Store into each LLMEndpoint's status.load,
// so that `kubectl get llme` shows load and hit rate. It writes at most
// once per endpoint per Period, and only when the rounded figures changed.
type StatusPublisher struct {
	// Client reads endpoints from the cache and patches their status.
	Client client.Client
	Store  *Store
	// Recorder, when set, gets an Event on the endpoint when flow control
	// starts shedding (Warning Shedding) and when it stops
	// (SheddingStopped): what status.load shows, kept in the endpoint's
	// history for `kubectl describe`.
	Recorder events.EventRecorder
	// Period between passes (default 30 s).
	Period time.Duration
}

// Start publishes until ctx ends; only the leader writes (a
// manager.Runnable, leader-elected by default).
func (p *StatusPublisher) Start(ctx context.Context) error {
	if p.Period <= 0 {
		p.Period = 30 * time.Second
	}
	t := time.NewTicker(p.Period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := p.PublishOnce(ctx); err != nil {
			log.FromContext(ctx).Error(err, "publish endpoint load to status")
		}
	}
}

// PublishOnce writes each endpoint's load where it changed; one pass
// writes each endpoint at most once.
func (p *StatusPublisher) PublishOnce(ctx context.Context) error {
	var eps v1alpha1.LLMEndpointList
	if err := p.Client.List(ctx, &eps); err != nil {
		return fmt.Errorf("list LLMEndpoints: %w", err)
	}
	var errs []error
	for i := range eps.Items {
		ep := &eps.Items[i]
		l, ok := p.Store.Get(types.NamespacedName{Namespace: ep.Namespace, Name: ep.Name})
		if !ok {
			continue
		}
		want := LoadStatus(l)
		if sameFigures(ep.Status.Load, want) {
			continue
		}
		body, err := loadPatch(want)
		if err != nil {
			return err
		}
		before := ep.Status.Load
		if err := p.Client.Status().Patch(ctx, ep, client.RawPatch(types.MergePatchType, body)); err != nil {
			if !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("patch status.load of %s/%s: %w", ep.Namespace, ep.Name, err))
			}
			continue
		}
		p.recordShedding(ep, before, want)
	}
	return errors.Join(errs...)
}

// loadFields are the json names of status.load's members.
var loadFields = func() []string {
	var names []string
	t := reflect.TypeFor[v1alpha1.LoadStatus]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		names = append(names, name)
	}
	return names
}()

// loadPatch is a merge patch that makes status.load want: of status.load
// alone, so that it cannot undo what the reconciler writes in the same
// status. A merge patch keeps the members it does not name, so each
// figure want lacks (gone unknown, or flow control's once it stops
// shedding or is turned off) is named with null.
func loadPatch(want *v1alpha1.LoadStatus) ([]byte, error) {
	b, err := json.Marshal(want)
	if err != nil {
		return nil, fmt.Errorf("encode status.load: %w", err)
	}
	load := map[string]any{}
	if err := json.Unmarshal(b, &load); err != nil {
		return nil, fmt.Errorf("encode status.load: %w", err)
	}
	for _, name := range loadFields {
		if _, ok := load[name]; !ok {
			load[name] = nil
		}
	}
	return json.Marshal(map[string]any{"status": map[string]any{"load": load}})
}

// Reasons of the events on shedding.
const (
	ReasonShedding        = "Shedding"
	ReasonSheddingStopped = "SheddingStopped"
)

// recordShedding emits an Event when the published figures start
// showing shedding, and when they show it stopped: a rate measured at 0,
// not one gone unknown (routers unreachable, flow control turned off).
func (p *StatusPublisher) recordShedding(ep *v1alpha1.LLMEndpoint, before, after *v1alpha1.LoadStatus) {
	was, is := shedding(before), shedding(after)
	switch {
	case p.Recorder == nil:
	case is && !was:
		tenants := make([]string, 0, len(after.ShedTenants))
		for _, t := range after.ShedTenants {
			tenants = append(tenants, t.Name+" "+t.PerMinute)
		}
		p.Recorder.Eventf(ep, nil, corev1.EventTypeWarning, ReasonShedding, "FlowControl",
			"Flow control sheds %s requests/min (%s): raise the tenant's maxQueued or weight, or add instances; or the tenant sends more than its share",
			after.ShedPerMinute, strings.Join(tenants, ", "))
	case was && after.ShedPerMinute == decimal(0):
		p.Recorder.Eventf(ep, nil, corev1.EventTypeNormal, ReasonSheddingStopped, "FlowControl",
			"Flow control shed no request in the last %g minutes", shedWindow.Minutes())
	}
}

// shedding says whether a status shows requests shed.
func shedding(st *v1alpha1.LoadStatus) bool {
	return st != nil && st.ShedPerMinute != "" && st.ShedPerMinute != decimal(0)
}

// LoadStatus renders a Load for the status, rounded for display.
func LoadStatus(l Load) *v1alpha1.LoadStatus {
	st := &v1alpha1.LoadStatus{ObservedTime: ptr.To(metav1.NewTime(l.Time))}
	if l.InFlightKnown {
		st.InFlightPerInstance = decimal(l.InFlightPerInstance())
	}
	if l.WaitingKnown {
		st.WaitingPerInstance = decimal(l.WaitingPerInstance())
	}
	if l.HitRatioKnown {
		st.PrefixCacheHitPercent = ptr.To(int32(math.Round(l.HitRatio * 100)))
	}
	if l.FlowControl && l.InFlightKnown {
		st.Queued = ptr.To(int32(math.Round(math.Max(l.Queued, 0))))
	}
	if l.FlowControl && l.ShedKnown {
		var total float64
		for _, v := range l.ShedPerMinute {
			total += v
		}
		st.ShedPerMinute = decimal(total)
		st.ShedTenants = mostShed(l.ShedPerMinute)
	}
	return st
}

// maxShedTenants bounds status.load.shedTenants (its CRD MaxItems): the
// few tenants to look at first, not an account of all.
const maxShedTenants = 3

// maxTenantName is the longest tenant name the CRD admits (that of
// spec.router.flowControl.tenants[].name).
const maxTenantName = 64

// mostShed lists the tenants with a shed rate that shows at the displayed
// precision, most shed first, at most maxShedTenants. The order is that of
// the displayed rates, ties by name: noise below the precision must not
// reorder the list, or it would be a write.
func mostShed(perMinute map[string]float64) []v1alpha1.TenantShed {
	type tenant struct {
		name string
		rate float64
	}
	var shed []tenant
	for name, rate := range perMinute {
		rate = math.Round(rate*10) / 10
		// The routers name only configured tenants and ".default"; a name
		// the CRD would refuse is left out rather than have the API
		// server refuse every figure of the patch.
		if name == "" || len(name) > maxTenantName || rate <= 0 {
			continue
		}
		shed = append(shed, tenant{name, rate})
	}
	slices.SortFunc(shed, func(a, b tenant) int {
		if c := cmp.Compare(b.rate, a.rate); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	var out []v1alpha1.TenantShed
	for _, t := range shed[:min(len(shed), maxShedTenants)] {
		out = append(out, v1alpha1.TenantShed{Name: t.name, PerMinute: decimal(t.rate)})
	}
	return out
}

// decimal has one decimal place, enough to read load by eye and coarse
// enough that noise does not cause a write every pass.
func decimal(v float64) string {
	return strconv.FormatFloat(math.Max(v, 0), 'f', 1, 64)
}

// sameFigures compares everything but the time of measurement.
func sameFigures(a, b *v1alpha1.LoadStatus) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.InFlightPerInstance == b.InFlightPerInstance && a.WaitingPerInstance == b.WaitingPerInstance &&
		ptr.Equal(a.PrefixCacheHitPercent, b.PrefixCacheHitPercent) && ptr.Equal(a.Queued, b.Queued) &&
		a.ShedPerMinute == b.ShedPerMinute && slices.Equal(a.ShedTenants, b.ShedTenants)
}

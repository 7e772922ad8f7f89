package v1alpha1

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Bounds and defaults of flow control, shared with the LLMEndpoint API
// (spec.router.flowControl), whose kubebuilder markers repeat them as
// literals; the CRD's tests check the API server against these.
const (
	MinFlowWeight     = 1
	MaxFlowWeight     = 1000
	DefaultFlowWeight = 1

	MinFlowPriority     = -1000
	MaxFlowPriority     = 1000
	DefaultFlowPriority = 0

	// A rate limit of 0 in the document is no limit.
	MaxRequestsPerMinute = 10_000_000
	MaxTokensPerMinute   = 10_000_000_000

	// MaxTenantQueued bounds one tenant's queue; 0 never queues it.
	MaxTenantQueued     = 10_000
	DefaultTenantQueued = 100

	// MinQueued..MaxQueued bound the requests queued over all tenants.
	MinQueued        = 1
	MaxQueued        = 100_000
	DefaultMaxQueued = 1000

	MinQueueTimeoutMillis     = 100
	MaxQueueTimeoutMillis     = 600_000
	DefaultQueueTimeoutMillis = 30_000

	MaxFlowTenants = 256
	// MaxFlowObjectives bounds the InferenceObjectives of one pool the
	// document carries; the Inference Extension expects a handful per
	// pool (one per workload class), so this is generous.
	MaxFlowObjectives = 1000
	// MaxTenantNameLength is the longest tenant id the router accepts
	// from any source (a header, an API key's Secret data key).
	MaxTenantNameLength = 64
)

// FlowControl shares a full fleet between tenants: rate limits first, then
// a queue per tenant served by priority and weighted fair share. Every
// field is filled in by the operator: the routers never default.
type FlowControl struct {
	// Default applies to every tenant not in Tenants, and to requests
	// without a tenant, as one tenant shared between them.
	Default TenantLimits `json:"default"`
	// Tenants are the tenants with limits of their own, by tenant id.
	Tenants map[string]TenantLimits `json:"tenants,omitempty"`
	// QueueTimeoutMillis is the longest a request waits in a queue.
	QueueTimeoutMillis int64 `json:"queueTimeoutMillis"`
	// MaxQueued is the most requests queued over all tenants.
	MaxQueued int `json:"maxQueued"`
	// Objectives are the priorities of the InferenceObjectives that name
	// the endpoint's InferencePool, by InferenceObjective name. A request
	// whose x-gateway-inference-objective header names one asks for that
	// priority, as X-Warmroute-Priority asks; neither raises a request
	// above its tenant's.
	Objectives map[string]int `json:"objectives,omitempty"`
}

// TenantLimits are one tenant's share, priority, rate limits and queue.
type TenantLimits struct {
	// Weight is the tenant's share of the fleet's tokens when it is full.
	Weight int `json:"weight"`
	// Priority: higher is served first.
	Priority int `json:"priority"`
	// RequestsPerMinute limits the tenant's requests; 0: unlimited.
	RequestsPerMinute int64 `json:"requestsPerMinute,omitempty"`
	// TokensPerMinute limits the tenant's tokens; 0: unlimited.
	TokensPerMinute int64 `json:"tokensPerMinute,omitempty"`
	// MaxQueued is the most of the tenant's requests queued; 0: never
	// queued.
	MaxQueued int `json:"maxQueued"`
}

// Validate checks every value against the API's bounds, naming the field
// (path is "flowControl" in a document).
func (f *FlowControl) Validate(path string) error {
	var errs []error
	if t := f.QueueTimeoutMillis; t < MinQueueTimeoutMillis || t > MaxQueueTimeoutMillis {
		errs = append(errs, fmt.Errorf("%s.queueTimeoutMillis: %d is outside %d..%d", path, t, MinQueueTimeoutMillis, MaxQueueTimeoutMillis))
	}
	if q := f.MaxQueued; q < MinQueued || q > MaxQueued {
		errs = append(errs, fmt.Errorf("%s.maxQueued: %d is outside %d..%d", path, q, MinQueued, MaxQueued))
	}
	errs = append(errs, f.Default.validate(path+".default")...)
	if len(f.Tenants) > MaxFlowTenants {
		errs = append(errs, fmt.Errorf("%s.tenants: %d tenants, at most %d", path, len(f.Tenants), MaxFlowTenants))
	}
	names := make([]string, 0, len(f.Tenants))
	for name := range f.Tenants {
		names = append(names, name)
	}
	slices.Sort(names) // errors in a stable order
	for _, name := range names {
		p := fmt.Sprintf("%s.tenants[%q]", path, name)
		if err := ValidTenantName(name); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
		}
		errs = append(errs, f.Tenants[name].validate(p)...)
	}
	errs = append(errs, validateObjectives(path+".objectives", f.Objectives)...)
	return errors.Join(errs...)
}

func (l TenantLimits) validate(path string) []error {
	var errs []error
	if w := l.Weight; w < MinFlowWeight || w > MaxFlowWeight {
		errs = append(errs, fmt.Errorf("%s.weight: %d is outside %d..%d", path, w, MinFlowWeight, MaxFlowWeight))
	}
	if p := l.Priority; p < MinFlowPriority || p > MaxFlowPriority {
		errs = append(errs, fmt.Errorf("%s.priority: %d is outside %d..%d", path, p, MinFlowPriority, MaxFlowPriority))
	}
	if r := l.RequestsPerMinute; r < 0 || r > MaxRequestsPerMinute {
		errs = append(errs, fmt.Errorf("%s.requestsPerMinute: %d is outside 0 (unlimited)..%d", path, r, MaxRequestsPerMinute))
	}
	if t := l.TokensPerMinute; t < 0 || t > MaxTokensPerMinute {
		errs = append(errs, fmt.Errorf("%s.tokensPerMinute: %d is outside 0 (unlimited)..%d", path, t, int64(MaxTokensPerMinute)))
	}
	if q := l.MaxQueued; q < 0 || q > MaxTenantQueued {
		errs = append(errs, fmt.Errorf("%s.maxQueued: %d is outside 0..%d", path, q, MaxTenantQueued))
	}
	return errs
}

func validateObjectives(path string, objectives map[string]int) []error {
	var errs []error
	if len(objectives) > MaxFlowObjectives {
		errs = append(errs, fmt.Errorf("%s: %d objectives, at most %d", path, len(objectives), MaxFlowObjectives))
	}
	names := make([]string, 0, len(objectives))
	for name := range objectives {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		p := fmt.Sprintf("%s[%q]", path, name)
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s: not an InferenceObjective name: %s", p, strings.Join(msgs, "; ")))
		}
		if prio := objectives[name]; prio < MinFlowPriority || prio > MaxFlowPriority {
			errs = append(errs, fmt.Errorf("%s: priority %d is outside %d..%d", p, prio, MinFlowPriority, MaxFlowPriority))
		}
	}
	return errs
}

// ValidTenantName checks a tenant id as flow control names it: 1 to
// MaxTenantNameLength printable ASCII characters, not starting with '.'
// (which no API key's Secret data key can be: the kubelet's own files
// there start with "..").
func ValidTenantName(name string) error {
	switch {
	case name == "" || len(name) > MaxTenantNameLength:
		return fmt.Errorf("a tenant id must be 1 to %d characters, not %d", MaxTenantNameLength, len(name))
	case strings.HasPrefix(name, "."):
		return fmt.Errorf("tenant id %q starts with '.'", name)
	}
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			return fmt.Errorf("tenant id %q is not printable ASCII", name)
		}
	}
	return nil
}

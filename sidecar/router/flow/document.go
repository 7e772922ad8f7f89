package flow

import (
	"time"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

// FromDocument converts the routing document's flow control, which the
// controller has defaulted; nil is the disabled Config.
func FromDocument(d *routing.FlowControl) Config {
	if d == nil {
		return Config{}
	}
	c := Config{
		Default:      limitsFromDocument(d.Default),
		QueueTimeout: time.Duration(d.QueueTimeoutMillis) * time.Millisecond,
		MaxQueued:    d.MaxQueued,
	}
	if len(d.Tenants) > 0 {
		c.Tenants = make(map[string]Limits, len(d.Tenants))
		for name, t := range d.Tenants {
			c.Tenants[name] = limitsFromDocument(t)
		}
	}
	return c
}

func limitsFromDocument(t routing.TenantLimits) Limits {
	return Limits{Weight: t.Weight, Priority: t.Priority, RequestsPerMinute: t.RequestsPerMinute,
		TokensPerMinute: t.TokensPerMinute, MaxQueued: t.MaxQueued}
}

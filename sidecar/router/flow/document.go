package flow

import "time"

// DocumentFlowControl and DocumentTenantLimits have the JSON shape of the
// routing document's flowControl (api/routing/v1alpha1, issue #53's
// contract); when that package defines them, FromDocument takes its type
// and these two go.
type DocumentFlowControl struct {
	Default            DocumentTenantLimits            `json:"default"`
	Tenants            map[string]DocumentTenantLimits `json:"tenants,omitempty"`
	QueueTimeoutMillis int64                           `json:"queueTimeoutMillis"`
	MaxQueued          int                             `json:"maxQueued"`
}

// DocumentTenantLimits is one tenant's entry in DocumentFlowControl.
type DocumentTenantLimits struct {
	Weight            int   `json:"weight"`
	Priority          int   `json:"priority"`
	RequestsPerMinute int64 `json:"requestsPerMinute,omitempty"`
	TokensPerMinute   int64 `json:"tokensPerMinute,omitempty"`
	MaxQueued         int   `json:"maxQueued"`
}

// FromDocument converts the routing document's flow control, which the
// controller has defaulted; nil is the disabled Config.
func FromDocument(d *DocumentFlowControl) Config {
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

func limitsFromDocument(t DocumentTenantLimits) Limits {
	return Limits{Weight: t.Weight, Priority: t.Priority, RequestsPerMinute: t.RequestsPerMinute,
		TokensPerMinute: t.TokensPerMinute, MaxQueued: t.MaxQueued}
}

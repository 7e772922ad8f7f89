package workload

import (
	"cmp"
	"time"
)

// TenantTrafficConfig is one tenant's steady traffic on a shared endpoint:
// single requests at a Poisson rate, each the tenant's own system prompt
// followed by a question of its own. Zero fields take the defaults in
// brackets.
type TenantTrafficConfig struct {
	Seed uint64
	// Tenant names the stream: two tenants of one seed draw different
	// prompts and arrivals. It is not sent (the client's API key says
	// who the tenant is).
	Tenant         string
	Rate           float64       // Poisson arrivals per simulated second; required
	Duration       time.Duration // simulated span of arrivals; required
	SystemTokens   int           // the tenant's shared system prompt [1000]
	QuestionTokens int           // median question [200]
	// MaxTokens is the mean completion length [64]: each request's is
	// uniform between half and one and a half times it. Equal lengths
	// would make the requests that fill a saturated fleet together finish
	// together, and free its slots in bursts a request length apart.
	MaxTokens int
}

// TenantTraffic generates one tenant's traffic: every arrival before
// Duration.
func TenantTraffic(cfg TenantTrafficConfig) Workload {
	cfg.SystemTokens = cmp.Or(cfg.SystemTokens, 1000)
	cfg.QuestionTokens = cmp.Or(cfg.QuestionTokens, 200)
	cfg.MaxTokens = cmp.Or(cfg.MaxTokens, 64)
	name := "tenant-" + cfg.Tenant
	system := Message{Role: "system", Content: tokensText(newRand(cfg.Seed, name+"/system"), cfg.SystemTokens)}
	rng := newRand(cfg.Seed, name)
	arrivals := poisson{rng: newRand(cfg.Seed, name+"/arrivals"), rate: cfg.Rate}
	var reqs []Request
	for at := arrivals.next(); cfg.Rate > 0 && at < cfg.Duration; at = arrivals.next() {
		q := lognormal(rng, float64(cfg.QuestionTokens), 0.5, 4, 8*cfg.QuestionTokens)
		reqs = append(reqs, Request{
			Arrival:   at,
			Messages:  []Message{system, {Role: "user", Content: tokensText(rng, q)}},
			MaxTokens: cfg.MaxTokens/2 + rng.IntN(cfg.MaxTokens+1),
		})
	}
	return Workload{Name: name, Requests: reqs}
}

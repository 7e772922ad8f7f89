package tenancy

import (
	"net/http"
	"strings"

	"github.com/warmroute/warmroute/sidecar/router/extract"
)

// Auth says where a request's tenant comes from. The zero value trusts
// the client's claim (the tenant headers, then prompt_cache_key, then
// cache_salt): tenants are then unauthenticated.
type Auth struct {
	// Keys, when set, makes the tenant that of the request's API key
	// (Authorization: Bearer <key>); a request without a known key is
	// refused. Whatever else the request claims is ignored.
	Keys *KeyStore
	// TrustedHeader, when set (and Keys is not), names the one header the
	// tenant is taken from, set by a gateway that authenticated the
	// client; the client's other claims are ignored. A request without it
	// did not come through the gateway and is refused (401), and so is one
	// with more than one value (400).
	TrustedHeader string
}

// Authenticated says the tenant does not come from the client's own claim.
func (a Auth) Authenticated() bool { return a.Keys != nil || a.TrustedHeader != "" }

// Outcome of resolving a request's identity.
type Outcome int

const (
	// Resolved: Tenant is the request's tenant ("" for none), and Claim
	// says whether the body's claims may still name one.
	Resolved Outcome = iota
	// MissingKey and WrongKey are refusals (401).
	MissingKey
	WrongKey
	// MissingHeader is a request without the trusted header (401): it did
	// not come through the gateway, and without a tenant it would reach
	// vLLM with vLLM's own key, in the shared unsalted pool.
	MissingHeader
	// AmbiguousHeader is a trusted header given more than once or as a
	// comma list (400). A gateway that appends its value to the client's
	// instead of replacing it leaves the client's first: taking any one of
	// them would let a client choose its tenant.
	AmbiguousHeader
)

// Identity is who a request is.
type Identity struct {
	Tenant string
	// Param names where Tenant came from, for an error about it.
	Param string
	// Claim: no authentication, so the body may claim a tenant when the
	// headers did not.
	Claim bool
}

// Identify resolves the tenant of a request from its headers.
func (a Auth) Identify(h http.Header) (Identity, Outcome) {
	switch {
	case a.Keys != nil:
		key, ok := bearer(h.Get("Authorization"))
		if !ok {
			return Identity{}, MissingKey
		}
		tenant, ok := a.Keys.Tenant(key)
		if !ok {
			return Identity{}, WrongKey
		}
		return Identity{Tenant: tenant}, Resolved
	case a.TrustedHeader != "":
		id := Identity{Param: a.TrustedHeader}
		vs := h.Values(a.TrustedHeader)
		switch {
		case len(vs) > 1 || len(vs) == 1 && strings.Contains(vs[0], ","):
			return id, AmbiguousHeader
		case len(vs) == 0 || strings.TrimSpace(vs[0]) == "":
			return id, MissingHeader
		}
		id.Tenant = vs[0]
		return id, Resolved
	}
	t := h.Get(extract.TenantHeader)
	if t == "" {
		t = h.Get(extract.TenantHeaderAlias)
	}
	return Identity{Tenant: t, Param: extract.TenantHeader, Claim: true}, Resolved
}

// Strip removes from headers going to vLLM what names a tenant or
// authenticated the client to the router: vLLM must see neither.
func (a Auth) Strip(h http.Header) {
	h.Del(extract.TenantHeader)
	h.Del(extract.TenantHeaderAlias)
	if a.TrustedHeader != "" {
		h.Del(a.TrustedHeader)
	}
	if a.Keys != nil {
		h.Del("Authorization")
	}
}

// bearer takes the token of an "Authorization: Bearer <token>" header
// (the scheme is case-insensitive, RFC 9110 §11.1).
func bearer(v string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

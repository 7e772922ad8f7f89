package picker

import "github.com/warmroute/warmroute/sidecar/router/policy"

// The proxy's questions before a pick, answered from this replica's own
// policy (Options.Own), so that the picker stays the proxy's one door to
// the decision: the key a pick takes, how much text a key reads, and
// whether a picked instance is in rotation.

// Key makes a request's key under the configuration in force here; the
// picker is sent the key (block hashes), never the request's text.
func (p *Picker) Key(req policy.Request) policy.Key { return p.opts.Own.Key(req) }

// LookaheadBytes is how far past the routing window the caller extracts
// text for Key.
func (p *Picker) LookaheadBytes() int { return p.opts.Own.LookaheadBytes() }

// InRotation reports whether an instance is not ejected: with every
// candidate ejected a pick fails open and names an ejected one, which a
// caller that cannot try it and move on treats as no instance.
func (p *Picker) InRotation(id string) bool { return p.opts.Own.Healthy(id) }

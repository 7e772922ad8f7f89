// Package tenancy decides who a request's tenant is and what cache_salt
// vLLM gets for it: the salt is an HMAC of the tenant under a per-endpoint
// secret key, so vLLM never sees a tenant id and a client can neither
// choose nor compute another tenant's salt; with API keys, the tenant is
// the key's, not whatever the client claims.
package tenancy

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash"
	"os"
	"sync"
	"sync/atomic"
)

// MinKeyBytes is the shortest salt key accepted: HMAC-SHA-256's security
// rests on the key, and a short one could be searched for from salts seen
// on vLLM's side.
const MinKeyBytes = 32

// saltContext separates these HMACs from any other use of the same key.
const saltContext = "warmroute cache_salt v1\x00"

// Salter derives cache salts. The key can be replaced while it serves
// (rotation); each derivation uses one key whole. The zero Salter has no
// key: give it one (SetKey, LoadFile) before it salts.
type Salter struct {
	key atomic.Pointer[saltKey]
}

// saltKey is one key with a pool of HMACs keyed with it: setting up an
// HMAC hashes the key twice, most of a derivation's cost, so each request
// takes a ready one and resets it.
type saltKey struct {
	key  []byte
	macs sync.Pool // of hash.Hash
}

func newSaltKey(key []byte) *saltKey {
	k := bytes.Clone(key)
	return &saltKey{key: k, macs: sync.Pool{New: func() any { return hmac.New(sha256.New, k) }}}
}

// NewSalter returns a Salter with key.
func NewSalter(key []byte) (*Salter, error) {
	s := &Salter{}
	if err := s.SetKey(key); err != nil {
		return nil, err
	}
	return s, nil
}

// RandomSalter has a random key of its own: salts then differ between
// processes (router replicas and restarts), which splits each tenant's
// cache hits among them, but still never reveal or let a client pick a
// salt. For a router run without a mounted key (tests, benchmarks).
func RandomSalter() *Salter {
	key := make([]byte, MinKeyBytes)
	_, _ = rand.Read(key) // never fails (crypto/rand panics instead)
	s := &Salter{}
	s.key.Store(newSaltKey(key))
	return s
}

// SetKey replaces the key; a key shorter than MinKeyBytes is refused and
// the current one kept.
func (s *Salter) SetKey(key []byte) error {
	if len(key) < MinKeyBytes {
		return fmt.Errorf("cache salt key has %d bytes, want at least %d", len(key), MinKeyBytes)
	}
	s.key.Store(newSaltKey(key))
	return nil
}

// LoadFile replaces the key with the one in the key file at path; on an
// error the key in force is kept. It reports whether the key changed. The
// key is the file's bytes as they are (the operator writes 32 random
// bytes), less one trailing newline for keys written by hand, but only
// when a full key remains: the operator's key ends in a newline byte one
// time in 256.
func (s *Salter) LoadFile(path string) (bool, error) {
	key, err := os.ReadFile(path)
	if err != nil {
		return false, fmt.Errorf("read cache salt key: %w", err)
	}
	if trimmed := bytes.TrimSuffix(key, []byte("\n")); len(trimmed) >= MinKeyBytes {
		key = trimmed
	}
	if len(key) < MinKeyBytes {
		return false, fmt.Errorf("cache salt key %s: shorter than %d bytes", path, MinKeyBytes)
	}
	if old := s.key.Load(); old != nil && bytes.Equal(old.key, key) {
		return false, nil
	}
	s.key.Store(newSaltKey(key))
	return true, nil
}

// Salt is the cache_salt for tenant: "" (no salt) for no tenant.
// Unsalted requests share blocks only among themselves, since vLLM mixes a
// request's salt into its first block's hash: a salted tenant's blocks
// never match theirs, so a fixed salt for them would isolate nothing more.
func (s *Salter) Salt(tenant string) string {
	if tenant == "" {
		return ""
	}
	k := s.key.Load()
	mac := k.macs.Get().(hash.Hash)
	mac.Reset()
	mac.Write([]byte(saltContext))
	mac.Write([]byte(tenant))
	var sum [sha256.Size]byte
	mac.Sum(sum[:0])
	k.macs.Put(mac)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

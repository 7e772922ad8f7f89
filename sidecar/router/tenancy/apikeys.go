package tenancy

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/warmroute/warmroute/sidecar/router/extract"
)

// KeyStore maps API keys to tenants. It is read from a mounted Secret (a
// directory): each file is a tenant, named by its file (the Secret's data
// key), holding that tenant's keys, one per line, so that a key can be
// rotated with a time when both the old and the new one work. Keys are
// kept only as SHA-256 digests.
type KeyStore struct {
	keys atomic.Pointer[[]apiKey]
}

type apiKey struct {
	digest [sha256.Size]byte
	tenant string
}

// MinAPIKeyBytes is the shortest API key accepted: keys are compared
// by their digests, which is safe from timing only if the key itself
// cannot be guessed.
const MinAPIKeyBytes = 16

// Tenant returns the tenant of the presented key, comparing it with every
// key in constant time, all of them whatever matches, so that the time
// taken says nothing of which key (or how much of one) matched.
func (s *KeyStore) Tenant(presented string) (string, bool) {
	keys := s.keys.Load()
	if keys == nil || presented == "" {
		return "", false
	}
	d := sha256.Sum256([]byte(presented))
	found := -1
	for i := range *keys {
		if subtle.ConstantTimeCompare(d[:], (*keys)[i].digest[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", false
	}
	return (*keys)[found].tenant, true
}

// Len is how many keys are loaded.
func (s *KeyStore) Len() int {
	if k := s.keys.Load(); k != nil {
		return len(*k)
	}
	return 0
}

// LoadDir replaces the keys with those in dir; on an error the keys in
// force are kept. It reports whether anything changed.
func (s *KeyStore) LoadDir(dir string) (bool, error) {
	keys, err := readKeysDir(dir)
	if err != nil {
		return false, err
	}
	if old := s.keys.Load(); old != nil && slices.Equal(*old, keys) {
		return false, nil
	}
	s.keys.Store(&keys)
	return true, nil
}

// readKeysDir reads the API keys in a mounted Secret directory. File
// names starting with ".." are the kubelet's own (its timestamped
// directories and the ..data link) and are skipped, as are other hidden
// files. A key used for two tenants is refused: the key decides the
// tenant.
func readKeysDir(dir string) ([]apiKey, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read API keys: %w", err)
	}
	var keys []apiKey
	owner := map[[sha256.Size]byte]string{}
	for _, e := range entries {
		tenant := e.Name()
		if strings.HasPrefix(tenant, ".") {
			continue
		}
		path := filepath.Join(dir, tenant)
		if st, err := os.Stat(path); err != nil || st.IsDir() {
			continue // a dangling link mid-swap, or a directory
		}
		if err := extract.ValidTenant(tenant); err != nil {
			return nil, fmt.Errorf("API keys: tenant %q: %w", tenant, err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read API keys of tenant %s: %w", tenant, err)
		}
		for line := range bytes.SplitSeq(data, []byte("\n")) {
			key := bytes.TrimSpace(line)
			if len(key) == 0 {
				continue
			}
			if len(key) < MinAPIKeyBytes {
				return nil, fmt.Errorf("API keys of tenant %s: a key is shorter than %d bytes", tenant, MinAPIKeyBytes)
			}
			d := sha256.Sum256(key)
			if other, dup := owner[d]; dup && other != tenant {
				return nil, fmt.Errorf("API keys: one key is given to tenants %s and %s", other, tenant)
			}
			owner[d] = tenant
			keys = append(keys, apiKey{digest: d, tenant: tenant})
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("API keys: %s holds no key", dir)
	}
	slices.SortFunc(keys, func(a, b apiKey) int { return bytes.Compare(a.digest[:], b.digest[:]) })
	return keys, nil
}

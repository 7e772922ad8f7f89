package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/net/http/httpguts"

	"github.com/warmroute/warmroute/sidecar/router/config"
	"github.com/warmroute/warmroute/sidecar/router/tenancy"
)

// tenancyFlags say where the cache salt key and the tenants come from.
type tenancyFlags struct {
	saltKeyFile, apiKeysDir, tenantHeader string
}

func (t *tenancyFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.saltKeyFile, "cache-salt-key-file", "", "file holding the secret key each tenant's cache_salt is derived from (HMAC-SHA-256), in a mounted Secret directory (not a subPath mount), re-read when it changes; unset: a random key of this process's own, so replicas and restarts salt differently")
	fs.StringVar(&t.apiKeysDir, "api-keys-dir", "", "mounted Secret directory of API keys: each file is a tenant, holding its keys one per line; requests then need Authorization: Bearer <key> and are that key's tenant")
	fs.StringVar(&t.tenantHeader, "tenant-header", "", "take the tenant only from this header, set by an authenticating gateway (ignores prompt_cache_key, cache_salt and the Prefix-Aware-Id headers)")
}

func (t *tenancyFlags) validate() error {
	if t.apiKeysDir != "" && t.tenantHeader != "" {
		return errors.New("--api-keys-dir and --tenant-header are exclusive")
	}
	if t.tenantHeader != "" && !httpguts.ValidHeaderFieldName(t.tenantHeader) {
		return fmt.Errorf("--tenant-header %q is not a header name", t.tenantHeader)
	}
	return nil
}

// startTenancy loads the salt key and the API keys (both must load before
// the router serves: without them it would salt with a key no other
// replica has, or let everyone in) and keeps them current.
func startTenancy(ctx context.Context, wg *sync.WaitGroup, t tenancyFlags, poll time.Duration, log logr.Logger) (*tenancy.Salter, tenancy.Auth, error) {
	auth := tenancy.Auth{TrustedHeader: http.CanonicalHeaderKey(t.tenantHeader)}
	var salts *tenancy.Salter
	if t.saltKeyFile == "" {
		log.Info("warning: no --cache-salt-key-file; cache salts use a random key of this process, so router replicas and restarts split each tenant's cache hits")
		salts = tenancy.RandomSalter()
	} else {
		salts = &tenancy.Salter{}
		load := func() (bool, error) { return salts.LoadFile(t.saltKeyFile) }
		if _, err := load(); err != nil {
			return nil, auth, err
		}
		l := log.WithName("salt-key")
		keepLoaded(ctx, wg, filepath.Dir(t.saltKeyFile), poll, l, "cache salt key", load, func() { l.Info("cache salt key rotated") })
	}
	if t.apiKeysDir != "" {
		auth.Keys = &tenancy.KeyStore{}
		load := func() (bool, error) { return auth.Keys.LoadDir(t.apiKeysDir) }
		if _, err := load(); err != nil {
			return nil, auth, err
		}
		l := log.WithName("api-keys")
		l.Info("API keys loaded", "keys", auth.Keys.Len())
		keepLoaded(ctx, wg, t.apiKeysDir, poll, l, "API keys", load, func() { l.Info("API keys reloaded", "keys", auth.Keys.Len()) })
	}
	return salts, auth, nil
}

// keepLoaded calls load whenever the mounted directory dir changes (and
// every poll), until ctx ends: a load that fails keeps what is in force,
// one that changed something calls changed.
func keepLoaded(ctx context.Context, wg *sync.WaitGroup, dir string, poll time.Duration, l logr.Logger, what string, load func() (bool, error), changed func()) {
	wg.Go(func() {
		err := config.WatchDir(ctx, dir, poll, l, func() {
			switch ok, err := load(); {
			case err != nil:
				l.Error(err, "keeping the "+what+" in force")
			case ok:
				changed()
			}
		})
		if err != nil {
			l.Error(err, what+" watch stopped")
		}
	})
}

// upstreamAPIKeyEnv holds vLLM's API key for the router to send upstream.
// An environment variable rather than a flag, so that the Deployment can
// keep it a Secret reference and it never shows in the pod's command line.
const upstreamAPIKeyEnv = "WARMROUTE_UPSTREAM_API_KEY"

// upstreamAPIKey is vLLM's key from the environment, taken as is (vLLM
// compares its own copy byte for byte). It is used only with router auth
// (proxy.Options.UpstreamAPIKey); without, the router says it ignores it,
// never saying the key itself.
func upstreamAPIKey(auth tenancy.Auth, log logr.Logger) string {
	key := os.Getenv(upstreamAPIKeyEnv)
	switch {
	case key == "":
	case auth.Authenticated():
		log.Info("sending vLLM's API key upstream in place of the clients' Authorization", "env", upstreamAPIKeyEnv)
	default:
		log.Info("warning: vLLM's API key is set but router auth is off, so it is not used: clients' Authorization goes to vLLM unchanged", "env", upstreamAPIKeyEnv)
	}
	return key
}

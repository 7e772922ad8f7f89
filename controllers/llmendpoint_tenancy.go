/*
Copyright 2026 The warmroute Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package controllers

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// The router's tenancy interface (sidecar/cmd/router): the cache salt key
// and the API keys are Secrets mounted as directories (never subPath, which
// the kubelet does not update), re-read by the router when they change.
const (
	routerCacheSaltDir = "/etc/warmroute/cache-salt"
	routerAPIKeysDir   = "/etc/warmroute/api-keys"
	cacheSaltKey       = "key"
	cacheSaltKeyBytes  = 32
)

// cacheSaltSecretName is the per-endpoint Secret of the router's cache
// salt key.
func cacheSaltSecretName(ep *v1alpha1.LLMEndpoint) string { return ep.Name + "-cache-salt" }

// The operator only creates the salt Secret: it never reads a Secret
// (no get, list or watch), so it holds no read on any Secret's data.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create

// buildCacheSaltSecret is a new salt Secret with a random key. It is
// created once and never applied again: applying would replace the key,
// and with it every tenant's salt, on every reconcile.
func buildCacheSaltSecret(ep *v1alpha1.LLMEndpoint) (*corev1.Secret, error) {
	key := make([]byte, cacheSaltKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generate cache salt key: %w", err)
	}
	meta := objectMeta(ep, cacheSaltSecretName(ep), roleRouter, "warmroute-router")
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: meta,
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{cacheSaltKey: key},
	}, nil
}

// cacheSaltRecheck is how long a salt Secret known to exist is trusted to
// still exist before creating it is tried again (the operator does not
// watch Secrets; a deleted one comes back within this time).
const cacheSaltRecheck = 10 * time.Minute

// saltSeen is when the salt Secret of the endpoint of uid was last seen
// to exist. The reconciler keeps one per LLMEndpoint name (saltSecrets),
// so that a steady endpoint sends no create at all, and drops it with the
// endpoint.
type saltSeen struct {
	uid types.UID
	at  time.Time
}

// reconcileCreatedOnce creates the router's salt Secret, pick key Secret
// and Lease (routerCreatedOnce) where they do not exist. An existing one is
// kept as it is, whoever made it: a user may create a Secret first to
// choose its key, and rotating the salt is replacing its "key" (see
// sidecar/README.md).
func (r *LLMEndpointReconciler) reconcileCreatedOnce(ctx context.Context, ep *v1alpha1.LLMEndpoint) error {
	name := client.ObjectKeyFromObject(ep)
	if seen, ok := r.saltSecrets.Load(name); ok && seen.(saltSeen).uid == ep.UID && time.Since(seen.(saltSeen).at) < cacheSaltRecheck {
		return nil
	}
	objs, err := routerCreatedOnce(ep)
	if err != nil {
		return err
	}
	for _, o := range objs {
		switch err := r.Create(ctx, o, client.FieldOwner(FieldOwner)); {
		case err == nil, apierrors.IsAlreadyExists(err):
		default:
			return fmt.Errorf("create %s %s: %w", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err)
		}
	}
	r.saltSecrets.Store(name, saltSeen{uid: ep.UID, at: time.Now()})
	return nil
}

// routerTenancy is what the router Deployment needs for tenancy: the
// flags, the Secret volumes and their mounts, and the environment.
func routerTenancy(ep *v1alpha1.LLMEndpoint) ([]string, []corev1.Volume, []corev1.VolumeMount, []corev1.EnvVar) {
	args := []string{"--cache-salt-key-file=" + routerCacheSaltDir + "/" + cacheSaltKey}
	volumes := []corev1.Volume{secretVolume("cache-salt", cacheSaltSecretName(ep))}
	mounts := []corev1.VolumeMount{{Name: "cache-salt", MountPath: routerCacheSaltDir, ReadOnly: true}}
	auth := ep.Spec.Router.Auth
	authenticated := true
	switch {
	case auth == nil:
		authenticated = false
	case auth.Mode == v1alpha1.RouterAuthAPIKeys && auth.APIKeys != nil:
		args = append(args, "--api-keys-dir="+routerAPIKeysDir)
		volumes = append(volumes, secretVolume("api-keys", auth.APIKeys.SecretName))
		mounts = append(mounts, corev1.VolumeMount{Name: "api-keys", MountPath: routerAPIKeysDir, ReadOnly: true})
	case auth.Mode == v1alpha1.RouterAuthTrustedHeader && auth.TrustedHeader != nil:
		args = append(args, "--tenant-header="+auth.TrustedHeader.Name)
	default:
		authenticated = false
	}
	return args, volumes, mounts, routerUpstreamKeyEnv(ep, authenticated)
}

// routerUpstreamAPIKeyEnv is where the router reads vLLM's API key
// (sidecar/cmd/router).
const routerUpstreamAPIKeyEnv = "WARMROUTE_UPSTREAM_API_KEY"

// routerUpstreamKeyEnv hands the router vLLM's API key, if vLLM has one,
// when the router authenticates clients: it then strips their
// Authorization and must send vLLM's instead. Without router auth the
// router would not use the key (clients' own Authorization goes to vLLM),
// so its pods do not get it. A Secret reference stays a reference.
func routerUpstreamKeyEnv(ep *v1alpha1.LLMEndpoint, authenticated bool) []corev1.EnvVar {
	key := vllmAPIKeyEnv(ep)
	if !authenticated || key == nil {
		return nil
	}
	key.Name = routerUpstreamAPIKeyEnv
	return []corev1.EnvVar{*key}
}

// secretVolume mounts a Secret as a directory. The files keep the default
// mode (0644, owned by root): the router runs as a non-root user without
// an fsGroup, and it is the pod's only container.
func secretVolume(name, secret string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}}
}

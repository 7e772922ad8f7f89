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

package webhooks

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// singleNodeWarning is why a model cache claim that attaches to one node
// does not serve several instances.
const singleNodeWarning = "attaches to one node only, so instances scheduled on other nodes stay Pending: use ReadWriteMany to share the cache across nodes"

// cacheWarnings warns about a model cache claim that cannot serve every
// instance: one the operator provisions without ReadWriteMany, or the
// user's claim that is missing or lacks it. CEL cannot see the user's
// claim, and neither is wrong for one instance or one node.
func (v *LLMEndpointValidator) cacheWarnings(ctx context.Context, e *servingv1alpha1.LLMEndpoint) admission.Warnings {
	c := e.Spec.Model.Cache
	if c == nil {
		return nil
	}
	path, modes := "spec.model.cache.accessModes", servingv1alpha1.CacheAccessModes(c)
	if c.ClaimName != "" {
		if v.Reader == nil {
			return nil
		}
		claim := &corev1.PersistentVolumeClaim{}
		path = "spec.model.cache.claimName"
		if w := v.lookup(ctx, e.Namespace, c.ClaimName, claim, path, "PersistentVolumeClaim", "pods that mount it stay Pending until it exists"); w != nil {
			return w
		}
		modes = claim.Spec.AccessModes
	}
	if n := servingv1alpha1.Replicas(e); n > 1 && !slices.Contains(modes, corev1.ReadWriteMany) {
		return admission.Warnings{fmt.Sprintf("%s: a claim of %v with %d instances %s", path, modes, n, singleNodeWarning)}
	}
	return nil
}

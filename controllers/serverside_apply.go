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
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// appliedCache remembers, for each object, the last apply request and the
// resourceVersion it produced. The same request against an object still at
// that resourceVersion would change nothing, so it is not sent: a
// reconcile with nothing to do writes nothing. Any other change to the
// object (a user's edit, a controller's) moves its resourceVersion and the
// next reconcile applies again, which undoes drift. Cluster API's
// internal/util/ssa cache works the same way.
type appliedCache struct {
	mu      sync.Mutex
	byOwner map[types.NamespacedName]map[appliedKey]appliedEntry
}

type appliedKey struct {
	gvk  schema.GroupVersionKind
	name types.NamespacedName
}

type appliedEntry struct {
	requestHash     string
	resourceVersion string
}

func (c *appliedCache) get(owner types.NamespacedName, key appliedKey) (appliedEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byOwner[owner][key]
	return e, ok
}

func (c *appliedCache) put(owner types.NamespacedName, key appliedKey, e appliedEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byOwner == nil {
		c.byOwner = map[types.NamespacedName]map[appliedKey]appliedEntry{}
	}
	if c.byOwner[owner] == nil {
		c.byOwner[owner] = map[appliedKey]appliedEntry{}
	}
	c.byOwner[owner][key] = e
}

// drop forgets one object, deleted because it is no longer wanted.
func (c *appliedCache) drop(owner types.NamespacedName, key appliedKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byOwner[owner], key)
}

// forget drops what is remembered for a deleted LLMEndpoint.
func (c *appliedCache) forget(owner types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byOwner, owner)
}

// applyRequest turns a desired object from a builder into the body of a
// server-side apply: the fields the builder set, without the zero-valued
// creationTimestamp and status that typed objects always carry.
func applyRequest(desired client.Object) (*unstructured.Unstructured, string, error) {
	if desired.GetObjectKind().GroupVersionKind().Empty() {
		return nil, "", fmt.Errorf("%T %s has no apiVersion and kind", desired, desired.GetName())
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(desired)
	if err != nil {
		return nil, "", fmt.Errorf("convert %T: %w", desired, err)
	}
	delete(u, "status")
	unstructured.RemoveNestedField(u, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u, "spec", "template", "metadata", "creationTimestamp")
	body, err := json.Marshal(u) // maps marshal with sorted keys: same object, same bytes
	if err != nil {
		return nil, "", fmt.Errorf("encode %T: %w", desired, err)
	}
	sum := sha256.Sum256(body)
	return &unstructured.Unstructured{Object: u}, hex.EncodeToString(sum[:]), nil
}

// applyInOrder applies each object in turn, stopping at the first error:
// later objects may need the earlier ones (pods their ServiceAccount).
func (r *LLMEndpointReconciler) applyInOrder(ctx context.Context, ep *v1alpha1.LLMEndpoint, desired ...client.Object) error {
	for _, d := range desired {
		if _, _, err := r.apply(ctx, ep, d); err != nil {
			return err
		}
	}
	return nil
}

// apply server-side applies desired (built with a controller reference to
// ep) with the operator's field owner, forcing ownership of the fields it
// sets, unless the same request was already applied to the object as it is
// now. It refuses to take over an object of the same name that ep does not
// control. It returns the object as it was before (nil if it did not
// exist) and whether the apply changed anything.
func (r *LLMEndpointReconciler) apply(ctx context.Context, ep *v1alpha1.LLMEndpoint, desired client.Object) (previous client.Object, changed bool, err error) {
	req, hash, err := applyRequest(desired)
	if err != nil {
		return nil, false, err
	}
	gvk := desired.GetObjectKind().GroupVersionKind()
	name := client.ObjectKeyFromObject(desired)
	owner := client.ObjectKeyFromObject(ep)
	key := appliedKey{gvk: gvk, name: name}
	recordWanted(ctx, key)

	// A zero object of the same type: decoding into a filled one would
	// keep the desired fields the live object lacks.
	current, ok := reflect.New(reflect.TypeOf(desired).Elem()).Interface().(client.Object)
	if !ok {
		return nil, false, fmt.Errorf("new %T: not a client.Object", desired)
	}
	err = r.Get(ctx, name, current)
	switch {
	case apierrors.IsNotFound(err):
		// The cache holds only labelled objects; make sure an unlabelled
		// one of the same name is not silently adopted.
		err = r.APIReader.Get(ctx, name, current)
		switch {
		case apierrors.IsNotFound(err):
			current = nil
		case err != nil:
			return nil, false, fmt.Errorf("get %s %s: %w", gvk.Kind, name.Name, err)
		}
	case err != nil:
		return nil, false, fmt.Errorf("get %s %s: %w", gvk.Kind, name.Name, err)
	}
	if current != nil {
		if ref := metav1.GetControllerOf(current); ref == nil || ref.UID != ep.UID {
			return current, false, fmt.Errorf("%s %s exists and is not controlled by this LLMEndpoint; delete or rename it", gvk.Kind, name.Name)
		}
		if e, ok := r.applied.get(owner, key); ok && e.requestHash == hash && e.resourceVersion == current.GetResourceVersion() {
			return current, false, nil
		}
	}

	if err := r.Apply(ctx, client.ApplyConfigurationFromUnstructured(req), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return current, false, fmt.Errorf("apply %s %s: %w", gvk.Kind, name.Name, err)
	}
	r.applied.put(owner, key, appliedEntry{requestHash: hash, resourceVersion: req.GetResourceVersion()})
	changed = current == nil || current.GetResourceVersion() != req.GetResourceVersion()
	if changed {
		logf.FromContext(ctx).V(1).Info("applied", "kind", gvk.Kind, "name", name.Name, "created", current == nil)
	}
	return current, changed, nil
}

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
	"errors"
	"fmt"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// ownedKind is a kind of object the operator creates for an endpoint.
type ownedKind struct {
	gvk     schema.GroupVersionKind
	object  func() client.Object
	newList func() client.ObjectList
}

// ownedKinds are every kind the operator creates for an endpoint: the
// manager caches them (labelled ones only), watches them as owned, and
// prunes those it no longer wants.
var ownedKinds = []ownedKind{
	{appsv1.SchemeGroupVersion.WithKind("Deployment"), func() client.Object { return &appsv1.Deployment{} }, func() client.ObjectList { return &appsv1.DeploymentList{} }},
	{corev1.SchemeGroupVersion.WithKind("Service"), func() client.Object { return &corev1.Service{} }, func() client.ObjectList { return &corev1.ServiceList{} }},
	{corev1.SchemeGroupVersion.WithKind("ConfigMap"), func() client.Object { return &corev1.ConfigMap{} }, func() client.ObjectList { return &corev1.ConfigMapList{} }},
	{corev1.SchemeGroupVersion.WithKind("ServiceAccount"), func() client.Object { return &corev1.ServiceAccount{} }, func() client.ObjectList { return &corev1.ServiceAccountList{} }},
	{rbacv1.SchemeGroupVersion.WithKind("Role"), func() client.Object { return &rbacv1.Role{} }, func() client.ObjectList { return &rbacv1.RoleList{} }},
	{rbacv1.SchemeGroupVersion.WithKind("RoleBinding"), func() client.Object { return &rbacv1.RoleBinding{} }, func() client.ObjectList { return &rbacv1.RoleBindingList{} }},
	{policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"), func() client.Object { return &policyv1.PodDisruptionBudget{} }, func() client.ObjectList { return &policyv1.PodDisruptionBudgetList{} }},
	{networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"), func() client.Object { return &networkingv1.NetworkPolicy{} }, func() client.ObjectList { return &networkingv1.NetworkPolicyList{} }},
	{corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"), func() client.Object { return &corev1.PersistentVolumeClaim{} }, func() client.ObjectList { return &corev1.PersistentVolumeClaimList{} }},
}

// wantedObjects records every object one reconcile applies. Whatever the
// endpoint controls and the reconcile did not apply is no longer wanted
// (LoRA turned off, NetworkPolicies disabled, an object renamed by a newer
// operator) and is pruned. Recording what was applied, rather than keeping
// a second list of what the builders make, keeps the two from drifting.
type wantedObjects struct {
	mu   sync.Mutex
	keys map[appliedKey]bool
}

type wantedObjectsKey struct{}

// withWantedObjects returns a context in which apply records its objects.
func withWantedObjects(ctx context.Context) (context.Context, *wantedObjects) {
	w := &wantedObjects{keys: map[appliedKey]bool{}}
	return context.WithValue(ctx, wantedObjectsKey{}, w), w
}

// recordWanted notes an object the reconcile in ctx wants, if any records.
func recordWanted(ctx context.Context, key appliedKey) {
	if w, ok := ctx.Value(wantedObjectsKey{}).(*wantedObjects); ok {
		w.mu.Lock()
		w.keys[key] = true
		w.mu.Unlock()
	}
}

func (w *wantedObjects) has(key appliedKey) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.keys[key]
}

// prune deletes the objects the endpoint controls that this reconcile did
// not apply. It must run only after every phase succeeded: a phase that
// stopped at an error did not record the objects after it.
func (r *LLMEndpointReconciler) prune(ctx context.Context, ep *v1alpha1.LLMEndpoint, wanted *wantedObjects, kinds []ownedKind) error {
	var errs []error
	for _, k := range kinds {
		list := k.newList()
		if err := r.List(ctx, list, client.InNamespace(ep.Namespace), client.MatchingLabels{LabelEndpoint: ep.Name}); err != nil {
			errs = append(errs, fmt.Errorf("list %s: %w", k.gvk.Kind, err))
			continue
		}
		items, err := apimeta.ExtractList(list)
		if err != nil {
			errs = append(errs, fmt.Errorf("list %s: %w", k.gvk.Kind, err))
			continue
		}
		for _, item := range items {
			obj, ok := item.(client.Object)
			if !ok {
				continue
			}
			key := appliedKey{gvk: k.gvk, name: client.ObjectKeyFromObject(obj)}
			ref := metav1.GetControllerOf(obj)
			if ref == nil || ref.UID != ep.UID || wanted.has(key) || obj.GetDeletionTimestamp() != nil {
				continue
			}
			// The UID precondition deletes this object only, never one
			// re-created under the same name since the list.
			uid := obj.GetUID()
			if err := r.Delete(ctx, obj, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
				errs = append(errs, fmt.Errorf("delete %s %s: %w", k.gvk.Kind, obj.GetName(), err))
				continue
			}
			r.applied.drop(client.ObjectKeyFromObject(ep), key)
			logf.FromContext(ctx).V(1).Info("pruned", "kind", k.gvk.Kind, "name", obj.GetName())
		}
	}
	return errors.Join(errs...)
}

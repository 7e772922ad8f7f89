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
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/test/localcluster"
)

// An operator upgrade that brings a new default vLLM image restarts no
// instance: the operator is stopped and started again, on its own API
// server, with a different default, and the instances keep the image
// they run while the new operator demonstrably reconciles the endpoint.
// Only removing the record moves them to the new default.
func TestOperatorUpgradeKeepsTheRunningVLLMImage(t *testing.T) {
	cfg := localcluster.APIServer(t, filepath.Join("..", "config", "crd", "bases"))
	c, err := client.New(cfg, client.Options{Scheme: testScheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "upgrade"}}); err != nil {
		t.Fatal(err)
	}

	const old, current = "vllm/vllm-openai:v0.25.0", "vllm/vllm-openai:v0.26.0"
	stop := runOperator(t, cfg, Options{VLLMImage: old, RouterImage: "router:v1"})
	ep := minimalEndpoint("upgrade", "chat")
	ep.Spec.Model.MaxLoras = ptr.To[int32](2) // the LoRA agent runs in the vLLM pods too
	if err := c.Create(ctx, ep); err != nil {
		t.Fatal(err)
	}
	d := &appsv1.Deployment{}
	waitFor(t, "the first operator's Deployment", func() bool {
		return c.Get(ctx, client.ObjectKey{Namespace: "upgrade", Name: vllmName(ep)}, d) == nil
	})
	before := d.Spec.Template.DeepCopy()
	if got := before.Spec.Containers[0].Image; got != old {
		t.Fatalf("first operator runs %s, want %s", got, old)
	}
	stop()

	stop = runOperator(t, cfg, Options{VLLMImage: current, RouterImage: "router:v2"})
	defer func() { stop() }()
	// A spec change the new operator must apply proves it reconciles.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(ep), ep); err != nil {
			return err
		}
		ep.Spec.Replicas = ptr.To[int32](3)
		return c.Update(ctx, ep)
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new operator to scale the instances", func() bool {
		return c.Get(ctx, client.ObjectKeyFromObject(d), d) == nil && ptr.Deref(d.Spec.Replicas, 0) == 3
	})
	router := &appsv1.Deployment{}
	waitFor(t, "the new operator's router image", func() bool {
		return c.Get(ctx, client.ObjectKey{Namespace: "upgrade", Name: routerName(ep)}, router) == nil &&
			router.Spec.Template.Spec.Containers[0].Image == "router:v2"
	})
	if err := c.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(before, &d.Spec.Template) {
		t.Fatalf("the upgrade changed the instances' pod template (a rollout): images %s, %s",
			d.Spec.Template.Spec.Containers[0].Image, d.Spec.Template.Spec.Containers[1].Image)
	}

	// The user opts in to the new default.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(ep), ep); err != nil {
			return err
		}
		delete(ep.Annotations, v1alpha1.AnnotationVLLMImage)
		return c.Update(ctx, ep)
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new default after opting in", func() bool {
		return c.Get(ctx, client.ObjectKeyFromObject(d), d) == nil && d.Spec.Template.Spec.Containers[0].Image == current
	})
}

// runOperator runs the reconciler with opts against cfg until the returned
// function is called.
func runOperator(t *testing.T, cfg *rest.Config, opts Options) func() {
	t.Helper()
	mgr, err := newTestManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := (&LLMEndpointReconciler{Client: mgr.GetClient(), Options: opts}).SetupWithManager(mgr, 2); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stopped := false
	return func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

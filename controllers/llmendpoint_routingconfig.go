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
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// isRoutable is whether a pod takes new traffic: Ready, with an IP, and
// not terminating. A terminating pod takes none; it stays in the routing
// document, draining, for most of its preStop sleep (isDraining).
func isRoutable(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.PodIP == "" {
		return false
	}
	_, ready := readySince(pod)
	return ready
}

// hashSeed seeds the routers' hashes. It comes from the endpoint's UID, so
// every router replica agrees and it survives operator restarts.
func hashSeed(ep *v1alpha1.LLMEndpoint) uint64 {
	h := fnv.New64a()
	h.Write([]byte(ep.UID))
	return h.Sum64()
}

// buildRoutingDocument is the routers' whole configuration for the
// endpoint, its current pods at now and the adapters' placements on them.
func buildRoutingDocument(ep *v1alpha1.LLMEndpoint, pods []corev1.Pod, placements []adapterPlacement, now time.Time) routing.Document {
	instances := []routing.Instance{}
	for i := range pods {
		pod := &pods[i]
		draining := isDraining(pod, now)
		if isRoutable(pod) || draining {
			instances = append(instances, routing.Instance{
				ID:       pod.Name,
				Address:  net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(vllmPort)),
				Draining: draining,
			})
		}
	}
	slices.SortFunc(instances, func(a, b routing.Instance) int { return cmp.Compare(a.ID, b.ID) })

	ids := make([]string, len(instances))
	for i, in := range instances {
		ids[i] = in.ID
	}
	var adapters []routing.Adapter
	for _, p := range placements {
		adapters = append(adapters, routing.Adapter{Name: p.name, URI: p.uri, S3: p.s3, Desired: p.desired, Ready: p.ready})
	}

	routingSpec := ep.Spec.Routing
	strategy := routing.Strategy(routingSpec.Strategy)
	if strategy == "" {
		strategy = routing.StrategyPrefixAware
	}
	return routing.Document{
		APIVersion: routing.APIVersion,
		Kind:       routing.Kind,
		Endpoint:   ep.Namespace + "/" + ep.Name,
		Generation: ep.Generation,
		Model:      ep.Spec.Model.Name,
		Strategy:   strategy,
		PrefixAware: routing.PrefixAware{
			PrefixLength:         int(ptr.Deref(routingSpec.PrefixAware.PrefixLength, routing.DefaultPrefixLength)),
			ConcurrencyThreshold: int(v1alpha1.ConcurrencyThreshold(ep)),
		},
		HashSeed:    hashSeed(ep),
		Instances:   instances,
		Adapters:    adapters,
		FlowControl: buildFlowControl(ep.Spec.Router.FlowControl),
	}
}

// routingConfigMapVolume is the routing ConfigMap as the volume "routing",
// for the router and the LoRA agent to mount as a directory (never a
// subPath: the kubelet updates only directory mounts).
func routingConfigMapVolume(ep *v1alpha1.LLMEndpoint) corev1.Volume {
	return corev1.Volume{
		Name: "routing",
		VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: routingConfigMapName(ep)},
		}},
	}
}

// buildRoutingConfigMap holds the encoded routing document.
func buildRoutingConfigMap(ep *v1alpha1.LLMEndpoint, document []byte) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: objectMeta(ep, routingConfigMapName(ep), roleRouting, "warmroute-router"),
		Data:       map[string]string{routing.ConfigMapKey: string(document)},
	}
}

// documentHash identifies a routing document in status.routingConfigHash.
func documentHash(document []byte) string {
	sum := sha256.Sum256(document)
	return hex.EncodeToString(sum[:8])
}

// reconcileRoutingConfig writes the routing document for the current pods
// at now, if it differs from the stored one, and returns its hash and when
// it must be written again for a draining instance to leave (0: never). A
// document the routers would refuse is not written.
func (r *LLMEndpointReconciler) reconcileRoutingConfig(ctx context.Context, ep *v1alpha1.LLMEndpoint, pods []corev1.Pod, placements []adapterPlacement, now time.Time) (string, time.Duration, error) {
	doc := buildRoutingDocument(ep, pods, placements, now)
	objectives, err := r.objectivePriorities(ctx, ep)
	if err != nil {
		return "", 0, err
	}
	if doc.FlowControl != nil {
		doc.FlowControl.Objectives = objectives
	}
	if err := doc.Validate(); err != nil {
		return "", 0, err
	}
	data, err := doc.Encode()
	if err != nil {
		return "", 0, err
	}
	prev, changed, err := r.apply(ctx, ep, buildRoutingConfigMap(ep, data))
	if err != nil {
		return "", 0, err
	}
	if changed {
		serving := slices.DeleteFunc(slices.Clone(doc.Instances), func(in routing.Instance) bool { return in.Draining })
		added, removed := instanceChanges(prev, serving)
		draining := len(doc.Instances) - len(serving)
		logf.FromContext(ctx).V(1).Info("routing configuration updated", "instances", len(serving), "draining", draining, "added", added, "removed", removed)
		if len(added)+len(removed) > 0 {
			r.Recorder.Eventf(ep, nil, corev1.EventTypeNormal, "RoutingUpdated", "UpdateRouting",
				"%d instances routable%s%s%s", len(serving), drainingNote(draining), listChange(" +", added), listChange(" -", removed))
		}
	}
	return documentHash(data), nextDrainEnd(pods, now), nil
}

// drainingNote says how many instances drain, if any.
func drainingNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d draining", n)
}

// instanceChanges compares the serving (not draining) instances of the
// previously stored document (if it can be read) with the new ones: an
// instance that starts draining is removed from routing there, not when
// it leaves the document.
func instanceChanges(prev client.Object, now []routing.Instance) (added, removed []string) {
	was := map[string]bool{}
	if cm, ok := prev.(*corev1.ConfigMap); ok {
		if old, err := routing.Decode([]byte(cm.Data[routing.ConfigMapKey])); err == nil {
			for _, in := range old.Instances {
				if !in.Draining {
					was[in.ID] = true
				}
			}
		}
	}
	for _, in := range now {
		if !was[in.ID] {
			added = append(added, in.ID)
		}
		delete(was, in.ID)
	}
	for id := range was {
		removed = append(removed, id)
	}
	slices.Sort(removed)
	return added, removed
}

func listChange(prefix string, ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	return fmt.Sprintf("%s%s", prefix, strings.Join(ids, prefix))
}

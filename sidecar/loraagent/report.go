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

package loraagent

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

// PodAnnotator reports the state in an annotation on the agent's own pod,
// which the operator already watches: no extra port or polling.
func PodAnnotator(client kubernetes.Interface, namespace, pod string) func(context.Context, routing.LoRAState) error {
	return func(ctx context.Context, st routing.LoRAState) error {
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"annotations": map[string]string{routing.AnnotationLoRAState: st.Encode()},
		}})
		if err != nil {
			return err
		}
		if _, err := client.CoreV1().Pods(namespace).Patch(ctx, pod, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "warmroute-lora-agent"}); err != nil {
			return fmt.Errorf("annotate pod %s/%s: %w", namespace, pod, err)
		}
		return nil
	}
}

// SecretReader reads the credentials Secrets adapters name, from the pod's
// namespace, through the API (the agent's Role grants exactly those).
func SecretReader(client kubernetes.Interface, namespace string) func(context.Context, string) (map[string][]byte, error) {
	return func(ctx context.Context, name string) (map[string][]byte, error) {
		s, err := client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return s.Data, nil
	}
}

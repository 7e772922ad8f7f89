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

package v1alpha1

// RouterMode is how clients reach the endpoint.
// +kubebuilder:validation:Enum=Standalone;InferencePool
type RouterMode string

const (
	// RouterModeStandalone: the routers are the front door. Clients call
	// the endpoint's Service (status.endpoint); each router places the
	// request and proxies it to the chosen instance.
	RouterModeStandalone RouterMode = "Standalone"
	// RouterModeInferencePool: a Gateway (Gateway API Inference Extension)
	// is the front door. The operator creates an InferencePool
	// (inference.networking.k8s.io/v1) named after the endpoint, selecting
	// its vLLM pods, whose endpoint picker is the routers' Service
	// <name>-epp; the routers serve only the Endpoint Picker Protocol
	// (ext_proc) and the Gateway sends each request straight to the
	// instance they pick. The InferencePool CRD must be installed; the
	// InferencePoolReady condition says when it is not.
	RouterModeInferencePool RouterMode = "InferencePool"
)

// EndpointPickerFailureMode is what the Gateway does when the picker does
// not answer (the InferencePool's spec.endpointPickerRef.failureMode).
// +kubebuilder:validation:Enum=FailClose;FailOpen
type EndpointPickerFailureMode string

const (
	// EndpointPickerFailClose: the Gateway refuses the request.
	EndpointPickerFailClose EndpointPickerFailureMode = "FailClose"
	// EndpointPickerFailOpen: the Gateway sends the request to an instance
	// of its own choosing, past the picker: without prefix-aware placement,
	// tenant authentication or cache salt.
	EndpointPickerFailOpen EndpointPickerFailureMode = "FailOpen"
)

// InferencePoolOptions configure the InferencePool of mode InferencePool.
type InferencePoolOptions struct {
	// failureMode is what the Gateway does when the picker does not answer:
	// FailClose (refuse the request) or FailOpen (send it to an instance of
	// the Gateway's choosing, past the picker). Defaults to FailClose.
	// FailOpen is refused with spec.router.auth: a request past the picker
	// would reach vLLM unauthenticated.
	// +kubebuilder:default=FailClose
	// +optional
	FailureMode EndpointPickerFailureMode `json:"failureMode,omitempty"`

	// tlsSecretName names a Secret of the endpoint's namespace holding the
	// picker's serving certificate and key (tls.crt, tls.key) and the CA
	// that signs the Gateway's client certificates (ca.crt): a cert-manager
	// Certificate's Secret with its CA bundle. The routers then answer the
	// Endpoint Picker Protocol only to a caller with such a client
	// certificate, and read the files again when the Secret changes.
	// Without it they serve the protocol in plaintext to whatever the
	// router NetworkPolicy admits (spec.networkPolicy.routerFrom), and
	// every placement and tenant's salted body is answered to any caller
	// that reaches the port.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +optional
	TLSSecretName string `json:"tlsSecretName,omitempty"`
}

// RouterModeOf is spec.router.mode or its default, Standalone.
func RouterModeOf(e *LLMEndpoint) RouterMode {
	if m := e.Spec.Router.Mode; m != "" {
		return m
	}
	return RouterModeStandalone
}

// PickerFailureMode is spec.router.inferencePool.failureMode or its
// default, FailClose.
func PickerFailureMode(e *LLMEndpoint) EndpointPickerFailureMode {
	if p := e.Spec.Router.InferencePool; p != nil && p.FailureMode != "" {
		return p.FailureMode
	}
	return EndpointPickerFailClose
}

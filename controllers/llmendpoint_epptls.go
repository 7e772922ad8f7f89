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
	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// routerEPPTLSDir is where the picker's TLS Secret is mounted in the
// router pods: a directory mount, which the kubelet updates when the
// Secret changes (the router reads the files again).
const routerEPPTLSDir = "/etc/warmroute/epp-tls"

// eppClientCAKey is the Secret's key of the CA bundle, as cert-manager
// names it.
const eppClientCAKey = "ca.crt"

// routerEPPTLS is what the routers of mode InferencePool need to serve
// the Endpoint Picker Protocol: with spec.router.inferencePool.tlsSecretName
// the flags of mutual TLS and the Secret's volume and mount; without it
// --epp-insecure, which the router needs to serve plaintext at all. Nothing
// in mode Standalone.
func routerEPPTLS(ep *v1alpha1.LLMEndpoint) ([]string, []corev1.Volume, []corev1.VolumeMount) {
	if !inferencePoolMode(ep) {
		return nil, nil, nil
	}
	secret := ""
	if p := ep.Spec.Router.InferencePool; p != nil {
		secret = p.TLSSecretName
	}
	if secret == "" {
		return []string{"--epp-insecure"}, nil, nil
	}
	return []string{
			"--epp-tls-cert-file=" + routerEPPTLSDir + "/" + corev1.TLSCertKey,
			"--epp-tls-key-file=" + routerEPPTLSDir + "/" + corev1.TLSPrivateKeyKey,
			"--epp-client-ca-file=" + routerEPPTLSDir + "/" + eppClientCAKey,
		}, []corev1.Volume{secretVolume("epp-tls", secret)},
		[]corev1.VolumeMount{{Name: "epp-tls", MountPath: routerEPPTLSDir, ReadOnly: true}}
}

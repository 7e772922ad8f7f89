//go:build tools

// Package controlplane only pins the commands that hack/build-controlplane.sh
// builds (the control plane, kubectl, and the node's kubelet and kube-proxy), so that `go mod tidy` keeps their dependencies.
package controlplane

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)

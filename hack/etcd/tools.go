//go:build tools

// Package etcd only pins the etcd server command that
// hack/build-controlplane.sh builds.
package etcd

import _ "go.etcd.io/etcd/server/v3"

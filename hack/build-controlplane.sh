#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kwok) and kubectl of the same Kubernetes version from the Go
# module proxy into a cache directory outside the checkout, so that fresh
# clones (CI) reuse it. Prints the directory. A cache built before kubectl was
# added gains kubectl alone: every binary is built only when it is missing.
#
# Cold: ~20 minutes on 2 cores (kube-apiserver dominates). Warm: instant.
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-v1.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}

here=$(cd "$(dirname "$0")" && pwd)
cache_root=${WARMROUTE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/warmroute}
dest="$cache_root/controlplane/kube-${KUBE_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}"
bins=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok kwok-stages.yaml kubectl)

complete() {
  for b in "${bins[@]}"; do [ -s "$dest/$b" ] || return 1; done
}

if complete; then echo "$dest"; exit 0; fi

mkdir -p "$cache_root"
exec 9>"$cache_root/controlplane.lock"
log() { echo "build-controlplane: $*" >&2; }
log "waiting for the build lock"; flock 9
if complete; then echo "$dest"; exit 0; fi

mkdir -p "$dest"
tmp=$(mktemp -d "$dest/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${KUBE_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor} -X k8s.io/component-base/version.gitTreeState=clean"

build_k8s() {
  local cmd=$1
  [ -s "$dest/$cmd" ] && return 0
  log "building $cmd $KUBE_VERSION (kube-apiserver takes ~17 min cold on 2 cores)"
  local start=$SECONDS
  (cd "$here/controlplane" && go build -ldflags "$ldflags" -o "$tmp/$cmd" "k8s.io/kubernetes/cmd/$cmd")
  mv "$tmp/$cmd" "$dest/$cmd"
  log "built $cmd in $((SECONDS - start)) s"
}

if [ ! -s "$dest/etcd" ]; then
  log "building etcd $ETCD_VERSION"
  (cd "$here/etcd" && go build -o "$tmp/etcd" go.etcd.io/etcd/server/v3)
  mv "$tmp/etcd" "$dest/etcd"
fi

if [ ! -s "$dest/kwok" ] || [ ! -s "$dest/kwok-stages.yaml" ]; then
  log "building kwok $KWOK_VERSION"
  GOBIN="$tmp" go install "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
  kwokdir=$(go mod download -json "sigs.k8s.io/kwok@${KWOK_VERSION}" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
  # KWOK ships its pod and node lifecycles as stage files; it refuses to run without them.
  # Pods become Running at once (fast stages) but are deleted only when their
  # grace period ends (general pod-delete), so terminating pods look real.
  : >"$tmp/kwok-stages.yaml"
  for f in node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml \
           pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/general/pod-delete.yaml; do
    { echo "---"; cat "$kwokdir/kustomize/stage/$f"; } >>"$tmp/kwok-stages.yaml"
  done
  mv "$tmp/kwok" "$dest/kwok"
  mv "$tmp/kwok-stages.yaml" "$dest/kwok-stages.yaml"
fi

build_k8s kube-scheduler
build_k8s kube-controller-manager
build_k8s kube-apiserver
# The demo prints kubectl commands; with this one they work where only Go is
# installed, against a server of the same version.
build_k8s kubectl

complete
echo "$dest"

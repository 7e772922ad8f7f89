#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kwok), kubectl, and the node's kubelet and kube-proxy of the
# same Kubernetes version from the Go module proxy into a cache directory
# outside the checkout, so that fresh clones (CI) reuse it. Prints the
# directory. A cache built before kubectl or the kubelet was added gains those
# alone: every binary is built only when it is missing.
#
# Cold: ~25 minutes on 2 cores (kube-apiserver dominates), 26 for a first
# `make demo` on a fresh machine. Warm: instant.
# A cold build prints its phases on stderr with the elapsed time and a rough
# share done (weighted by each phase's cold time on 2 cores), and sends the
# go tool's own output (the `go: downloading` lines) to a log it names.
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-v1.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}

here=$(cd "$(dirname "$0")" && pwd)
name=build-controlplane
# shellcheck source=lib/phases.sh
. "$here/lib/phases.sh"
cache_root=${WARMROUTE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/warmroute}
dest="$cache_root/controlplane/kube-${KUBE_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}"
# kubectl: the demo prints kubectl commands; with this one they work where
# only Go is installed, against a server of the same version. kubelet and
# kube-proxy: the real node of test/localcluster (Options.RealNode).
k8s_bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)
bins=(etcd kwok kwok-stages.yaml "${k8s_bins[@]}")

complete() {
  for b in "${bins[@]}"; do [ -s "$dest/$b" ] || return 1; done
}

if complete; then echo "$dest"; exit 0; fi

mkdir -p "$cache_root"
exec 9>"$cache_root/controlplane.lock"
log "waiting for the build lock"; flock 9
if complete; then echo "$dest"; exit 0; fi

mkdir -p "$dest"
tmp=$(mktemp -d "$dest/.build.XXXXXX")
buildlog="$cache_root/controlplane-build.log"
: >"$buildlog"
phases_begin
trap '[ -z "$heartbeat" ] || kill "$heartbeat" 2>/dev/null; rm -rf "$tmp"' EXIT

# Cold minutes of each phase on 2 cores. The first Kubernetes binary
# compiles the packages the others share, so kube-apiserver is built first
# and carries that cost.
declare -A cold=([download]=4 [etcd]=1 [kwok]=3 [kube-apiserver]=13 [kube-controller-manager]=2 [kube-scheduler]=1 [kubectl]=2 [kubelet]=2 [kube-proxy]=1)
declare -A todo=()
[ -s "$dest/etcd" ] || todo[etcd]=1
{ [ -s "$dest/kwok" ] && [ -s "$dest/kwok-stages.yaml" ]; } || todo[kwok]=1
for b in "${k8s_bins[@]}"; do [ -s "$dest/$b" ] || todo[$b]=1; done
todo[download]=1
# With kube-apiserver built the modules are mostly in the module cache.
[ -n "${todo[kube-apiserver]:-}" ] || cold[download]=1
total=0; for p in "${!todo[@]}"; do total=$((total + cold[$p])); done

log "building the control plane into $dest (~$total min on 2 cores; go's output goes to $buildlog)"

minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${KUBE_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor} -X k8s.io/component-base/version.gitTreeState=clean"

download() {
  (cd "$here/controlplane" && go mod download -x) # -x: one line per module in the log
  (cd "$here/etcd" && go mod download -x)
}

build_etcd() {
  (cd "$here/etcd" && go build -o "$tmp/etcd" go.etcd.io/etcd/server/v3)
  mv "$tmp/etcd" "$dest/etcd"
}

build_kwok() {
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
}

build_k8s() {
  local cmd=$1
  (cd "$here/controlplane" && go build -ldflags "$ldflags" -o "$tmp/$cmd" "k8s.io/kubernetes/cmd/$cmd")
  mv "$tmp/$cmd" "$dest/$cmd"
}

phase download "downloading Go modules (about 2 GB when none are cached)" download
[ -z "${todo[etcd]:-}" ] || phase etcd "building etcd $ETCD_VERSION" build_etcd
[ -z "${todo[kwok]:-}" ] || phase kwok "building kwok $KWOK_VERSION" build_kwok
for b in "${k8s_bins[@]}"; do
  [ -z "${todo[$b]:-}" ] || phase "$b" "building $b $KUBE_VERSION" build_k8s "$b"
done

complete
log "control plane ready in $(clock $((SECONDS - started)))"
echo "$dest"

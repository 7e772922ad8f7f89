#!/usr/bin/env bash
# Builds what a real kubelet node needs beside the Kubernetes binaries of
# hack/build-controlplane.sh: containerd (with ctr and the runc shim),
# kube-router (NetworkPolicy only) and CoreDNS, from the Go module proxy into
# a cache directory outside the checkout, and installs the Debian packages the
# node runs (runc, CNI plugins, iptables, ipset, conntrack, socat) when they
# are missing. Prints the directory. Every binary is built only when missing.
#
# None of the three modules has replace lines, so a pinned `go install` builds
# each; containerd without cgo and without the btrfs, devmapper and zfs
# snapshotters (overlayfs is what the node uses; those need C headers).
# Cold: ~5 minutes on 2 cores. Warm: instant. Phases go to stderr with the
# elapsed time; the go tool's own output goes to a log it names.
set -euo pipefail

CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
KUBE_ROUTER_VERSION=${KUBE_ROUTER_VERSION:-v2.1.0}
COREDNS_VERSION=${COREDNS_VERSION:-v1.15.0}

here=$(cd "$(dirname "$0")" && pwd)
name=build-node
# shellcheck source=lib/phases.sh
. "$here/lib/phases.sh"
cache_root=${WARMROUTE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/warmroute}
dest="$cache_root/node/containerd-${CONTAINERD_VERSION}_kube-router-${KUBE_ROUTER_VERSION}_coredns-${COREDNS_VERSION}"
bins=(containerd ctr containerd-shim-runc-v2 kube-router coredns)

# Debian packages by a command (or file) each provides.
declare -A debs=([runc]=runc [/usr/lib/cni/bridge]=containernetworking-plugins [iptables]=iptables
  [ipset]=ipset [conntrack]=conntrack [socat]=socat [ip]=iproute2 [nsenter]=util-linux)

missing_debs() {
  local have p
  for have in "${!debs[@]}"; do
    if [[ $have == /* ]]; then [ -e "$have" ] && continue; else command -v "$have" >/dev/null && continue; fi
    p=${debs[$have]}; echo "$p"
  done | sort -u
}

install_debs() {
  local want
  mapfile -t want < <(missing_debs)
  [ ${#want[@]} -gt 0 ] || return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    log "missing Debian packages: ${want[*]} (not root or no apt-get: install them yourself)"
    return 0
  fi
  log "installing Debian packages: ${want[*]}"
  apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${want[@]}" >&2
}

complete() {
  for b in "${bins[@]}"; do [ -s "$dest/$b" ] || return 1; done
}

install_debs
if complete; then echo "$dest"; exit 0; fi

mkdir -p "$cache_root"
exec 9>"$cache_root/node.lock"
log "waiting for the build lock"; flock 9
if complete; then echo "$dest"; exit 0; fi

mkdir -p "$dest"
tmp=$(mktemp -d "$dest/.build.XXXXXX")
buildlog="$cache_root/node-build.log"
: >"$buildlog"
phases_begin
trap '[ -z "$heartbeat" ] || kill "$heartbeat" 2>/dev/null; rm -rf "$tmp"' EXIT

# Cold minutes of each phase on 2 cores.
declare -A cold=([containerd]=2 [kube-router]=2 [coredns]=2)
declare -A todo=()
for b in containerd ctr containerd-shim-runc-v2; do [ -s "$dest/$b" ] || todo[containerd]=1; done
[ -s "$dest/kube-router" ] || todo[kube-router]=1
[ -s "$dest/coredns" ] || todo[coredns]=1
total=0; for p in "${!todo[@]}"; do total=$((total + cold[$p])); done

log "building the node's binaries into $dest (~$total min on 2 cores; go's output goes to $buildlog)"

build_containerd() {
  local m=github.com/containerd/containerd/v2
  CGO_ENABLED=0 GOBIN="$tmp" go install -tags "no_btrfs no_devmapper no_zfs" \
    -ldflags "-s -w -X $m/version.Version=$CONTAINERD_VERSION" \
    "$m/cmd/containerd@$CONTAINERD_VERSION" "$m/cmd/ctr@$CONTAINERD_VERSION" "$m/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION"
  mv "$tmp/containerd" "$tmp/ctr" "$tmp/containerd-shim-runc-v2" "$dest/"
}

build_kube_router() {
  CGO_ENABLED=0 GOBIN="$tmp" go install -ldflags "-s -w" \
    "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER_VERSION"
  mv "$tmp/kube-router" "$dest/"
}

build_coredns() {
  CGO_ENABLED=0 GOBIN="$tmp" go install -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION"
  mv "$tmp/coredns" "$dest/"
}

[ -z "${todo[containerd]:-}" ] || phase containerd "building containerd $CONTAINERD_VERSION (containerd, ctr, containerd-shim-runc-v2)" build_containerd
[ -z "${todo[kube-router]:-}" ] || phase kube-router "building kube-router $KUBE_ROUTER_VERSION" build_kube_router
[ -z "${todo[coredns]:-}" ] || phase coredns "building CoreDNS $COREDNS_VERSION" build_coredns

complete
log "node binaries ready in $(clock $((SECONDS - started)))"
echo "$dest"

#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kwok) and kubectl of the same Kubernetes version from the Go
# module proxy into a cache directory outside the checkout, so that fresh
# clones (CI) reuse it. Prints the directory. A cache built before kubectl was
# added gains kubectl alone: every binary is built only when it is missing.
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
buildlog="$cache_root/controlplane-build.log"
: >"$buildlog"
heartbeat=
trap '[ -z "$heartbeat" ] || kill "$heartbeat" 2>/dev/null; rm -rf "$tmp"' EXIT

# Cold minutes of each phase on 2 cores. The first Kubernetes binary
# compiles the packages the others share, so kube-apiserver is built first
# and carries that cost.
declare -A cold=([download]=4 [etcd]=1 [kwok]=3 [kube-apiserver]=13 [kube-controller-manager]=2 [kube-scheduler]=1 [kubectl]=2)
declare -A todo=()
[ -s "$dest/etcd" ] || todo[etcd]=1
{ [ -s "$dest/kwok" ] && [ -s "$dest/kwok-stages.yaml" ]; } || todo[kwok]=1
for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do [ -s "$dest/$b" ] || todo[$b]=1; done
todo[download]=1
# With kube-apiserver built the modules are mostly in the module cache.
[ -n "${todo[kube-apiserver]:-}" ] || cold[download]=1
total=0; for p in "${!todo[@]}"; do total=$((total + cold[$p])); done
done_min=0 # cold minutes of the phases finished
started=$SECONDS

every=${PROGRESS_EVERY:-60} # seconds between "still building" lines
clock() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
# share prints the rough share done when a phase of cold minutes $1 has run
# for $2 seconds: its part counts in proportion, at most 95% of it.
share() {
  local part=$(($2 * 100 / ($1 * 60)))
  ((part > 95)) && part=95
  echo $(((done_min * 100 + $1 * part) / total))
}
phase() { # phase NAME DESCRIPTION COMMAND...: runs COMMAND with its output in the log
  local name=$1 what=$2; shift 2
  local start=$SECONDS
  log "[$(printf '%3d' "$(share 1 0)")% $(clock $((SECONDS - started)))] $what (~${cold[$name]} min cold)"
  ( trap 'kill "$nap" 2>/dev/null; exit 0' TERM
    while sleep "$every" & nap=$!; wait "$nap"; do
      log "[$(printf '%3d' "$(share "${cold[$name]}" $((SECONDS - start)))")% $(clock $((SECONDS - started)))] still $what"
    done ) &
  heartbeat=$!
  if ! "$@" >>"$buildlog" 2>&1; then
    kill "$heartbeat"; heartbeat=
    log "failed: $what; the last lines of $buildlog:"
    tail -n 20 "$buildlog" >&2
    exit 1
  fi
  kill "$heartbeat"; heartbeat=
  done_min=$((done_min + cold[$name]))
  log "[$(printf '%3d' $((done_min * 100 / total)))% $(clock $((SECONDS - started)))] done: $what in $(clock $((SECONDS - start)))"
}

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
# kubectl: the demo prints kubectl commands; with this one they work where
# only Go is installed, against a server of the same version.
for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  [ -z "${todo[$b]:-}" ] || phase "$b" "building $b $KUBE_VERSION" build_k8s "$b"
done

complete
log "control plane ready in $(clock $((SECONDS - started)))"
echo "$dest"

# Sourced by hack/build-controlplane.sh and hack/build-node.sh: runs a build
# as named phases, printing each on stderr with the elapsed time and a rough
# share done (weighted by each phase's cold minutes on 2 cores), and sends
# the commands' own output to a log.
#
# The caller sets: name (the log prefix), buildlog (the log file), cold (an
# associative array: phase -> cold minutes) and total (the sum over the
# phases it will run); then calls phases_begin.

log() { echo "$name: $*" >&2; }
clock() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

phases_begin() {
  done_min=0 # cold minutes of the phases finished
  started=$SECONDS
  every=${PROGRESS_EVERY:-60} # seconds between "still building" lines
  heartbeat=
}

# share prints the rough share done when a phase of cold minutes $1 has run
# for $2 seconds: its part counts in proportion, at most 95% of it.
share() {
  local part=$(($2 * 100 / ($1 * 60)))
  ((part > 95)) && part=95
  echo $(((done_min * 100 + $1 * part) / total))
}

phase() { # phase NAME DESCRIPTION COMMAND...: runs COMMAND with its output in the log
  local phase_name=$1 what=$2; shift 2
  local start=$SECONDS
  log "[$(printf '%3d' "$(share 1 0)")% $(clock $((SECONDS - started)))] $what (~${cold[$phase_name]} min cold)"
  ( trap 'kill "$nap" 2>/dev/null; exit 0' TERM
    while sleep "$every" & nap=$!; wait "$nap"; do
      log "[$(printf '%3d' "$(share "${cold[$phase_name]}" $((SECONDS - start)))")% $(clock $((SECONDS - started)))] still $what"
    done ) &
  heartbeat=$!
  if ! "$@" >>"$buildlog" 2>&1; then
    kill "$heartbeat"; heartbeat=
    log "failed: $what; the last lines of $buildlog:"
    tail -n 20 "$buildlog" >&2
    exit 1
  fi
  kill "$heartbeat"; heartbeat=
  done_min=$((done_min + cold[$phase_name]))
  log "[$(printf '%3d' $((done_min * 100 / total)))% $(clock $((SECONDS - started)))] done: $what in $(clock $((SECONDS - start)))"
}

#!/usr/bin/env bash
# Runs every Go fuzz target in the module for a short while ($1, a -fuzztime
# value; default 10000x, a count: see FUZZTIME in the Makefile for why not
# a duration), so that the fuzzers and their seed corpora cannot rot.
set -euo pipefail
fuzztime=${1:-10000x}
cd "$(dirname "$0")/.."
found=0
while IFS= read -r file; do
  pkg="./$(dirname "$file")"
  for fn in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)\(' "$file" | sed -E 's/^func (Fuzz[A-Za-z0-9_]+)\(/\1/'); do
    found=$((found + 1))
    echo "fuzz: $pkg $fn for $fuzztime"
    go test -run='^$' -fuzz="^${fn}\$" -fuzztime="$fuzztime" "$pkg"
  done
done < <(git ls-files --cached --others --exclude-standard -- '*_test.go' | xargs -r grep -l '^func Fuzz' || true)
echo "fuzz: $found targets ran"

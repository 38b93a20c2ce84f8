#!/usr/bin/env bash
# bench/callgrind_per_op.sh - instructions per op of ordo, counted by callgrind.
#
# For each workload, runs ordo_workloads in-process (--no-fork, --runs 1) under
# `valgrind --tool=callgrind` twice on the same trace:
#   1. --engines serial   : trace generation + the serial loop
#   2. --engines <engine> : the same, (the serial loop still runs, as the
#                           reference) + one replay on the engine
# so (Ir of 2 - Ir of 1) / ops is what the engine costs per op: creating the
# engine and the variables, push, dependency tracking, dispatch, the op body,
# completion and the final wait (worker threads included; under valgrind the
# threads are serialised, so workers' idle spinning is counted too).
#
# usage: bench/callgrind_per_op.sh [path/to/ordo_workloads]
# env:   OPS (default 100000), WORKLOADS (default "W4 W2"),
#        ENGINES (default "ordo ordo-naive"; naive = bookkeeping without threads),
#        KEEP=1 to keep the callgrind.out files (printed path) for callgrind_annotate.
set -euo pipefail

bin=${1:-build-bench/bench/ordo_workloads}
ops=${OPS:-100000}
workloads=${WORKLOADS:-W4 W2}
engines=${ENGINES:-ordo ordo-naive}

if [[ ! -x $bin ]]; then
  echo "callgrind_per_op.sh: $bin not found; build the ordo_workloads target first" >&2
  exit 2
fi
command -v valgrind >/dev/null || { echo "callgrind_per_op.sh: valgrind not installed" >&2; exit 2; }

out=$(mktemp -d "${TMPDIR:-/tmp}/ordo-callgrind.XXXXXX")
[[ ${KEEP:-0} == 1 ]] || trap 'rm -rf "$out"' EXIT

# Runs one profile; prints its total Ir. $1 workload, $2 engine.
profile() {
  local file="$out/callgrind.$1.$2"
  valgrind --tool=callgrind --callgrind-out-file="$file" \
    "$bin" --no-fork --runs 1 --ops "$ops" --workload "$1" --engines "$2" >"$file.result" 2>"$file.log" || {
    echo "callgrind_per_op.sh: $2 on $1 failed; see $file.log" >&2
    cat "$file.log" >&2
    exit 1
  }
  if ! grep -q ' ok=1' "$file.result"; then
    echo "callgrind_per_op.sh: $2 on $1 did not verify:" >&2
    cat "$file.result" >&2
    exit 1
  fi
  awk '/^(summary|totals):/ { print $2; exit }' "$file"
}

# The op count actually replayed (W3 and W5 round it), from a RESULT line.
ops_of() { sed -n 's/.* ops=\([0-9]*\).*/\1/p' "$out/callgrind.$1.$2.result" | head -n 1; }

printf '%-5s %-12s %8s %16s %16s %12s\n' workload engine ops Ir_total Ir_serial Ir_per_op
for w in $workloads; do
  base=$(profile "$w" serial)
  for e in $engines; do
    total=$(profile "$w" "$e")
    n=$(ops_of "$w" "$e")
    printf '%-5s %-12s %8d %16d %16d %12.1f\n' "$w" "$e" "$n" "$total" "$base" "$(awk -v t="$total" -v b="$base" -v n="$n" 'BEGIN { print (t - b) / n }')"
  done
done
[[ ${KEEP:-0} == 1 ]] && echo "callgrind files kept in $out" >&2
exit 0

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
# --pusher: the same two runs with one profile per thread
# (--separate-threads=yes); the pushing (main) thread's count minus the
# serial-only run's main thread, over ops, is what pushing costs the
# application's thread (engine and variable creation included); the other
# threads' counts (the workers') are shown beside it. One line per workload:
#   PUSHER workload=W2 engine=ordo instr_per_op=N workers_instr_per_op=M ops=K
#
# usage: bench/callgrind_per_op.sh [--pusher] [path/to/ordo_workloads]
# env:   OPS (default 100000), WORKLOADS (default "W4 W2"; --pusher: "W1 W2 W4 W5"),
#        ENGINES (default "ordo ordo-naive"; naive = bookkeeping without threads;
#        --pusher: "ordo"),
#        KEEP=1 to keep the callgrind.out files (printed path) for callgrind_annotate.
set -euo pipefail

pusher=0
if [[ ${1:-} == --pusher ]]; then
  pusher=1
  shift
fi
bin=${1:-build-bench/bench/ordo_workloads}
ops=${OPS:-100000}
if [[ $pusher == 1 ]]; then
  workloads=${WORKLOADS:-W1 W2 W4 W5}
  engines=${ENGINES:-ordo}
else
  workloads=${WORKLOADS:-W4 W2}
  engines=${ENGINES:-ordo ordo-naive}
fi

if [[ ! -x $bin ]]; then
  echo "callgrind_per_op.sh: $bin not found; build the ordo_workloads target first" >&2
  exit 2
fi
command -v valgrind >/dev/null || { echo "callgrind_per_op.sh: valgrind not installed" >&2; exit 2; }

out=$(mktemp -d "${TMPDIR:-/tmp}/ordo-callgrind.XXXXXX")
[[ ${KEEP:-0} == 1 ]] || trap 'rm -rf "$out"' EXIT

# Runs one profile; prints its total Ir. $1 workload, $2 engine; with
# --pusher prints "main_thread_Ir other_threads_Ir" instead.
profile() {
  local file="$out/callgrind.$1.$2"
  local per_thread=()
  [[ $pusher == 1 ]] && per_thread=(--separate-threads=yes)
  valgrind --tool=callgrind "${per_thread[@]}" --callgrind-out-file="$file" \
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
  if [[ $pusher == 1 ]]; then
    # One file per thread, "$file-01" the main thread; each names its thread.
    local main=0 others=0 f n t
    for f in "$file"-[0-9]*; do
      t=$(awk '/^thread:/ { print $2; exit }' "$f")
      n=$(awk '/^(summary|totals):/ { print $2; exit }' "$f")
      if [[ $t == 1 ]]; then main=$((main + n)); else others=$((others + n)); fi
    done
    echo "$main $others"
  else
    awk '/^(summary|totals):/ { print $2; exit }' "$file"
  fi
}

# The op count actually replayed (W3 and W5 round it), from a RESULT line.
ops_of() { sed -n 's/.* ops=\([0-9]*\).*/\1/p' "$out/callgrind.$1.$2.result" | head -n 1; }

if [[ $pusher == 1 ]]; then
  for w in $workloads; do
    base=$(profile "$w" serial)  # not read < <(...): a failed profile must stop the script
    read -r base_main base_others <<<"$base"
    for e in $engines; do
      total=$(profile "$w" "$e")
      read -r main others <<<"$total"
      n=$(ops_of "$w" "$e")
      awk -v w="$w" -v e="$e" -v m="$main" -v b="$base_main" -v o="$others" -v bo="$base_others" -v n="$n" \
        'BEGIN { printf "PUSHER workload=%s engine=%s instr_per_op=%.0f workers_instr_per_op=%.0f ops=%d\n", w, e, (m - b) / n, (o - bo) / n, n }'
    done
  done
  [[ ${KEEP:-0} == 1 ]] && echo "callgrind files kept in $out" >&2
  exit 0
fi

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

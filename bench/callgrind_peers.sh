#!/usr/bin/env bash
# bench/callgrind_peers.sh - instructions per op of the peers (bench/peers/),
# counted by callgrind, in the format of callgrind_per_op.sh's table so that
# ordo_workloads --callgrind-file can read both.
#
# Each peer executable replays the trace once and twice under
# `valgrind --tool=callgrind`; (Ir of 2 runs - Ir of 1 run) / ops is one
# replay: task creation, dependency tracking, scheduling, the op body,
# completion and the final wait, without process start-up, runtime
# initialisation or trace generation. Valgrind serialises threads, so idle
# threads' spinning would be counted too: the OpenMP runtimes run with
# OMP_WAIT_POLICY=passive here (their timed figures use the default policy).
#
# usage: bench/callgrind_peers.sh [dir with the peer executables]
# env:   OPS (default 100000), WORKLOADS (default "W2 W4"),
#        PEERS (default "omp-gomp omp-llvm tbb-flow+build starpu"; a tbb-flow replay
#        includes building its graph)
set -euo pipefail

dir=${1:-build-release/bench}
ops=${OPS:-100000}
workloads=${WORKLOADS:-W2 W4}
peers=${PEERS:-omp-gomp omp-llvm tbb-flow+build starpu}
command -v valgrind >/dev/null || { echo "callgrind_peers.sh: valgrind not installed" >&2; exit 2; }

out=$(mktemp -d "${TMPDIR:-/tmp}/ordo-callgrind-peers.XXXXXX")
trap 'rm -rf "$out"' EXIT

exe_of() {
  case "$1" in
    omp-gomp) echo ordo_peer_omp ;;
    omp-llvm) echo ordo_peer_omp_llvm ;;
    tbb-flow+build) echo ordo_peer_tbb ;;
    starpu) echo ordo_peer_starpu ;;
    *) return 1 ;;
  esac
}

# Total Ir of one profile; $1 peer executable, $2 workload, $3 runs.
profile() {
  local file="$out/cg.$(basename "$1").$2.$3"
  OMP_WAIT_POLICY=passive STARPU_SILENT=1 valgrind --tool=callgrind --callgrind-out-file="$file" \
    "$1" --workload "$2" --ops "$ops" --runs "$3" >"$file.result" 2>"$file.log" || {
    echo "callgrind_peers.sh: $1 on $2 failed; see $file.log" >&2
    cat "$file.log" >&2
    exit 1
  }
  grep -q ' ok=1' "$file.result" || { echo "callgrind_peers.sh: $1 on $2 did not verify" >&2; exit 1; }
  awk '/^(summary|totals):/ { print $2; exit }' "$file"
}

printf '%-5s %-12s %8s %16s %16s %12s\n' workload engine ops Ir_2runs Ir_1run Ir_per_op
for w in $workloads; do
  for p in $peers; do
    exe="$dir/$(exe_of "$p")"
    if [[ ! -x $exe ]]; then
      echo "callgrind_peers.sh: peer $p skipped: $exe not built" >&2
      continue
    fi
    one=$(profile "$exe" "$w" 1)
    two=$(profile "$exe" "$w" 2)
    n=$(sed -n 's/^ops=\([0-9]*\).*/\1/p' "$out/cg.$(basename "$exe").$w.1.result")
    printf '%-5s %-12s %8d %16d %16d %12.1f\n' "$w" "$p" "$n" "$two" "$one" \
      "$(awk -v t="$two" -v b="$one" -v n="$n" 'BEGIN { print (t - b) / n }')"
  done
done

#!/usr/bin/env bash
# scripts/manycore_check.sh [BUILD] [OUT] - the workloads at 2, 4, 8 and 16
# workers, ordo beside tbb-flow, and the distributed W5 beside StarPU-MPI:
# the checks that need a many-core machine (issue 41's "many cores" goals).
#
# BUILD holds a Release build of ordo_workloads, ordo_peer_tbb and (for the
# distributed part) ordo_dist_w5 / starpu_mpi_w5; built there when missing
# (`scripts/dev.sh bench` installs the peers). Each worker count runs the
# engines on that many CPUs (taskset), so ordo's default worker count and
# tbb's both follow it. Prints one table (M ops/s, medians; ratio ordo/tbb;
# W6 as the share of the split ceiling) and writes each run's RESULT lines
# to OUT. Env: RUNS (default 3), OPS (default 200000), COUNTS ("2 4 8 16").
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-release}
out=${2:-$build/manycore}
runs=${RUNS:-3}
ops=${OPS:-200000}
counts=${COUNTS:-2 4 8 16}
mkdir -p "$out"
bin=$build/bench/ordo_workloads
if [ ! -x "$bin" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DORDO_BUILD_TESTS=OFF \
    -DORDO_BUILD_EXAMPLES=OFF > "$out/configure.log" 2>&1 || { cat "$out/configure.log"; exit 1; }
  cmake --build "$build" -j "$(nproc)" --target ordo_workloads ordo_peer_tbb || exit 1
  cmake --build "$build" -j "$(nproc)" --target ordo_dist_w5 starpu_mpi_w5 > /dev/null 2>&1 || true
fi
cpus=$(nproc)
echo "# $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')); runs $runs, ops $ops"
status=0
for n in $counts; do
  if [ "$n" -gt "$cpus" ]; then echo "# $n workers: only $cpus CPUs here, skipped"; continue; fi
  t0=$SECONDS
  taskset -c "0-$((n - 1))" "$bin" --engines serial,ordo,tbb-flow --workload W1,W2,W3,W4,W5,W6 \
    --runs "$runs" --ops "$ops" > "$out/workloads-$n.txt" 2> "$out/workloads-$n.log"
  rc=$?
  echo "# $n workers: rc=$rc in $((SECONDS - t0)) s"
  [ "$rc" -eq 0 ] || { status=1; tail -n 5 "$out/workloads-$n.log"; }
done
# One table: a row per worker count, per workload "ordo / tbb (ratio)".
awk '
  FNR == 1 { split(FILENAME, p, "workloads-"); n = p[2]; sub(/\.txt$/, "", n); ns[++k] = n }
  /^RESULT/ {
    for (i = 2; i <= NF; ++i) { split($i, kv, "="); f[kv[1]] = kv[2] }
    key = n SUBSEP f["workload"] SUBSEP f["engine"]
    ops[key] = f["ops_per_s"] / 1e6; ok[key] = f["ok"]
    if (f["workload"] == "W6" && f["engine"] == "ordo") split6[n] = f["of_split"]
    delete f
  }
  END {
    print "| workers | W1 ordo/tbb | W2 | W3 | W4 | W5 | W6 | W6 ordo of split |"
    print "|---:|---|---|---|---|---|---|---:|"
    for (j = 1; j <= k; ++j) {
      n = ns[j]; line = "| " n
      for (w = 1; w <= 6; ++w) {
        o = ops[n, "W" w, "ordo"]; t = ops[n, "W" w, "tbb-flow"]
        bad = (ok[n, "W" w, "ordo"] == "0" || ok[n, "W" w, "tbb-flow"] == "0") ? " (UNVERIFIED)" : ""
        line = line sprintf(" | %.2f / %.2f (%.2fx)%s", o, t, t > 0 ? o / t : 0, bad)
      }
      print line " | " split6[n] " |"
    }
  }' $(for n in $counts; do [ -f "$out/workloads-$n.txt" ] && echo "$out/workloads-$n.txt"; done)
# The distributed W5 at 2 and 4 ranks: StarPU-MPI's polling threads get cores
# of their own here, unlike on a 2-CPU machine.
if command -v mpiexec > /dev/null && [ -x "$build/bench/ordo_dist_w5" ]; then
  t0=$SECONDS
  timeout -k 10 "${DIST_LIMIT:-240}" "$root/bench/dist/run.sh" "$build" --rounds "${DIST_ROUNDS:-3}" \
    > "$out/dist.txt" 2> "$out/dist.log"
  rc=$?
  echo "# distributed W5: rc=$rc in $((SECONDS - t0)) s"
  [ "$rc" -eq 0 ] || { status=1; tail -n 5 "$out/dist.log"; }
  sed -n '/^| engine/,$p' "$out/dist.txt"
else
  echo "# distributed W5: skipped (no mpiexec or no $build/bench/ordo_dist_w5)"
fi
exit $status

#!/usr/bin/env bash
# bench/dist/run.sh BUILD_DIR [--tiles N] [--cell B] [--work-us U] [--reps R] [--rounds K]
# The distributed W5 on ordo::dist and on StarPU-MPI at 2 and 4 ranks, and on
# one ordo::Engine in one process (2 workers: the same cores), in one run:
# the spin per tile is calibrated once and passed to every engine; the
# configurations are interleaved round by round so that a busy neighbour
# hurts them alike. Prints every RESULT line, then a Markdown table of each
# configuration's median over the rounds (docs/dist.md's figures).
# Not a test: scripts/dev.sh never runs it.
set -euo pipefail
build=${1:?usage: run.sh BUILD_DIR [--tiles N] [--cell B] [--work-us U] [--reps R] [--rounds K]}
shift
tiles=24 cell=64 work_us=100 reps=5 rounds=3
while (($#)); do
  case "$1" in
    --tiles) tiles=$2; shift 2 ;;
    --cell) cell=$2; shift 2 ;;
    --work-us) work_us=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
ordo=$build/bench/ordo_dist_w5
starpu=$build/bench/starpu_mpi_w5
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader \
       OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1 STARPU_SILENT=1 \
       STARPU_COMM_STATS=1 STARPU_WORKERS_NOBIND=1 STARPU_MPI_NOBIND=1
# StarPU binds its workers and its MPI thread to cores by default; with several
# ranks on 2 CPUs they would share one: unbound, as ordo's threads are.
spin=$("$ordo" --cell "$cell" --calibrate-us "$work_us")
common=(--tiles "$tiles" --cell "$cell" --spin "$spin" --reps "$reps")
echo "# tiles ${tiles}x${tiles} of ${cell}x${cell} doubles, ~${work_us} us per tile (spin $spin), $reps reps per run, $rounds rounds; $(nproc) CPUs" >&2
out=$(mktemp)
for ((r = 0; r < rounds; ++r)); do
  "$ordo" --local --workers 2 "${common[@]}" | tee -a "$out"
  for np in 2 4; do
    mpiexec --oversubscribe -np "$np" "$ordo" --workers 1 "${common[@]}" | tee -a "$out"
    if [ -x "$starpu" ]; then
      # StarPU-MPI's bytes: its own counters (STARPU_COMM_STATS, on stderr at shutdown).
      STARPU_NCPU=1 mpiexec --oversubscribe -np "$np" "$starpu" --workers 1 "${common[@]}" 2> "$out.err" | tee -a "$out"
      awk -v ops=$((tiles * tiles * reps)) -v np="$np" \
        '/starpu_comm_stats\]\[[0-9]+\] TOTAL:/ { b += $3 } END { printf "STARPU_BYTES ranks=%s bytes_per_op=%.0f\n", np, b / ops }' \
        "$out.err" | tee -a "$out"
    fi
  done
done
echo
echo "| engine | ranks | workers per rank | median ms (runs' medians: min..max) | us per tile | bytes sent per op | progress thread CPU (% of wall, per rank) |"
echo "|---|---|---|---|---|---|---|"
awk '
  /^STARPU_BYTES/ { split($2, rr, "="); split($3, bb, "="); sbytes[rr[2]] = bb[2]; next }
  !/^RESULT/ { next }
  { for (i = 2; i <= NF; ++i) { split($i, kv, "="); f[kv[1]] = kv[2] }
    key = f["engine"] " " f["ranks"] " " f["workers"]
    if (!(key in n)) order[++k] = key
    v[key, ++n[key]] = f["median_ms"]; tile[key, n[key]] = f["us_per_tile"]
    bytes[key] = f["bytes_per_op"]; cpu[key] = cpu[key] " " f["progress_cpu_pct"]; check[key] = check[key] f["check"] }
  END {
    for (j = 1; j <= k; ++j) {
      key = order[j]; m = n[key]
      # sort the medians (insertion sort: a handful)
      for (a = 1; a <= m; ++a) { s[a] = v[key, a] + 0; t[a] = tile[key, a] + 0 }
      for (a = 2; a <= m; ++a) for (b = a; b > 1 && s[b] < s[b-1]; --b) { x = s[b]; s[b] = s[b-1]; s[b-1] = x; y = t[b]; t[b] = t[b-1]; t[b-1] = y }
      split(key, p, " ")
      med = s[int((m + 1) / 2)]
      by = bytes[key]; if (p[1] == "starpu-mpi" && (p[2] in sbytes)) by = sbytes[p[2]] " (STARPU_COMM_STATS)"
      printf "| %s | %s | %s | %.1f (%.1f..%.1f) | %.0f | %s | %s |%s\n", p[1], p[2], p[3], med, s[1], s[m], t[int((m + 1) / 2)], by, cpu[key], (check[key] ~ /WRONG/ ? " WRONG" : "")
    }
  }' "$out"
echo
if [ -x "$ordo" ]; then
  for np in 2 4; do mpiexec --oversubscribe -np "$np" "$ordo" --books 200000 | tee -a "$out"; done
fi
echo "Submission on rank 0 (its push loop: the books of every push, the ops and transfers of its own), us per push:"
awk '/^SUBMIT/ { for (i = 2; i <= NF; ++i) { split($i, kv, "="); f[kv[1]] = kv[2] }
                 key = f["engine"] " at " f["ranks"] " ranks"; s[key] = s[key] " " f["us_per_push"] }
     END { for (k in s) print "  " k ":" s[k] }' "$out" | sort
grep '^BOOKS' "$out" | sed 's/^/  /' 
rm -f "$out" "$out.err"

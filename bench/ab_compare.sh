#!/usr/bin/env bash
# bench/ab_compare.sh - two builds of ordo_workloads on one workload, in paired rounds.
#
# Each round runs both binaries back to back (ordo only, --runs 3 each, the
# median kept) and the pair's order alternates from round to round: A B, B A,
# A B... On this shared host the first of two back-to-back runs came out ~1%
# faster than the second with identical binaries (W6, 14 rounds: median 1.872
# vs 1.850x), so a fixed order charges the second build with ~1%; alternating
# cancels it over an even number of rounds.
#
# usage: bench/ab_compare.sh A_BIN B_BIN [ROUNDS] [WORKLOAD]
#   A_BIN, B_BIN  two ordo_workloads binaries (copy them out of the build
#                 folder first: a rebuild overwrites them)
#   ROUNDS        paired rounds (default 12; rounded up to an even number)
#   WORKLOAD      W1..W6, W2op, W2co, W4co (default W6; W6 compares vs_serial,
#                 the others ops_per_s)
#   ENGINE=name   (environment) the ordo engine compared (default ordo; e.g.
#                 ordo-graph)
# Prints each round's pair, then per build the median and mean, and in how many
# rounds B beat A.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  sed -n '2,/^set /p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
a=$1
b=$2
rounds=${3:-12}
workload=${4:-W6}
(( rounds % 2 == 0 )) || rounds=$((rounds + 1))
for bin in "$a" "$b"; do
  [[ -x $bin ]] || { echo "ab_compare.sh: $bin is not an executable" >&2; exit 2; }
done
field=ops_per_s
[[ $workload == W6 ]] && field=vs_serial
engine=${ENGINE:-ordo}

measure() {
  local out
  out=$("$1" --workload "$workload" --engines "$engine" --runs 3 2>/dev/null | grep "engine=$engine " | head -1)
  [[ $out == *" ok=1 "* ]] || { echo "ab_compare.sh: $1 gave no verified result: $out" >&2; exit 1; }
  grep -oE "${field}=[0-9.]+" <<<"$out" | head -1 | cut -d= -f2
}

as=()
bs=()
for ((r = 1; r <= rounds; ++r)); do
  if (( r % 2 == 1 )); then
    x=$(measure "$a"); y=$(measure "$b")
  else
    y=$(measure "$b"); x=$(measure "$a")
  fi
  as+=("$x")
  bs+=("$y")
  printf 'round %2d (%s first): A %s  B %s\n' "$r" "$( (( r % 2 == 1 )) && echo A || echo B)" "$x" "$y"
done

python3 - "$workload" "$field" "${as[*]}" "${bs[*]}" <<'PY'
import statistics as st, sys
workload, field = sys.argv[1], sys.argv[2]
a = [float(x) for x in sys.argv[3].split()]
b = [float(x) for x in sys.argv[4].split()]
for name, xs in (("A", a), ("B", b)):
    print(f"{name}: {workload} {field} median {st.median(xs):.4g} mean {st.mean(xs):.4g} "
          f"(min {min(xs):.4g}, max {max(xs):.4g})")
wins = sum(1 for x, y in zip(a, b) if y > x)
print(f"B/A medians {st.median(b) / st.median(a):.4f}; B better in {wins} of {len(a)} rounds")
PY

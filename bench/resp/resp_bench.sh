#!/usr/bin/env bash
# bench/resp/resp_bench.sh - kv_server --resp beside redis-server, both driven
# by redis-benchmark on loopback: the same commands, connections and
# pipelining for each, runs alternating server by server (the order rotating
# each round) so that the shared machine's drift hits all alike.
#
#   resp_bench.sh KV_SERVER [--rounds R] [--conns 1,50,200] [--pipeline 1,16]
#                 [--tests set,get] [--work-us 20] [--keyspace 100000]
#                 [--servers redis,ordo] [--threads T] [--quick]
#
# Servers: "redis" (redis-server, started here on a free loopback port, no
# persistence: --save '' --appendonly no), "ordo" (kv_server --resp, a
# variable per key) and "ordo-shardsN" (kv_server --resp --shards N).
# Cells: every test of --tests, and "work": a SET that first spends
# --work-us microseconds of CPU on the server (kv_server's SPINSET; for
# redis-server an EVAL of a Lua script spinning on TIME for as long, then
# SET), at every connection count and pipeline depth. Keys are random over
# --keyspace (redis-benchmark -r). Each figure: the median over rounds of
# redis-benchmark's own requests/s, p50 and p99 (--csv); ratios are the
# median of each round's ordo/redis ratio (the two measured back to back).
# Prints a Markdown table on stdout; progress on stderr.
set -euo pipefail
kv_server=${1:?usage: resp_bench.sh KV_SERVER [options]}
shift
rounds=3 conns=1,50,200 pipeline=1,16 tests=set,get work_us=20 keyspace=100000 servers=redis,ordo threads=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --conns) conns=$2; shift 2 ;;
    --pipeline) pipeline=$2; shift 2 ;;
    --tests) tests=$2; shift 2 ;;
    --work-us) work_us=$2; shift 2 ;;
    --keyspace) keyspace=$2; shift 2 ;;
    --servers) servers=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --quick) rounds=1 conns=50 pipeline=16; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
for tool in redis-benchmark redis-cli; do
  command -v $tool >/dev/null || { echo "$tool not found (Debian redis-tools; scripts/dev.sh bench-resp installs it)" >&2; exit 1; }
done
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

declare -A port
start_ordo() {  # name, extra args
  local name=$1
  shift
  "$kv_server" --resp --port 0 --threads "$threads" "$@" > "$tmp/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do
    port[$name]=$(sed -n 's/^listening on \([0-9]*\)$/\1/p' "$tmp/$name.log")
    [ -n "${port[$name]}" ] && return 0
    sleep 0.1
  done
  echo "kv_server did not start" >&2; cat "$tmp/$name.log" >&2; exit 1
}
start_redis() {
  command -v redis-server >/dev/null || { echo "redis-server not found (Debian redis-server; scripts/dev.sh bench-resp installs it)" >&2; exit 1; }
  for _ in $(seq 1 20); do
    local p=$((20000 + RANDOM % 40000))
    redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no --protected-mode no \
      --daemonize no --loglevel warning > "$tmp/redis.log" 2>&1 &
    local pid=$!
    for _ in $(seq 1 50); do
      if [ "$(redis-cli -p "$p" ping 2>/dev/null)" = PONG ]; then
        pids+=($pid)
        port[redis]=$p
        return 0
      fi
      kill -0 $pid 2>/dev/null || break  # the port was taken: try another
      sleep 0.1
    done
    kill $pid 2>/dev/null || true
  done
  echo "redis-server did not start" >&2; cat "$tmp/redis.log" >&2; exit 1
}
IFS=, read -r -a server_list <<< "$servers"
for s in "${server_list[@]}"; do
  case "$s" in
    redis) start_redis ;;
    ordo) start_ordo ordo ;;
    ordo-shards*) start_ordo "$s" --shards "${s#ordo-shards}" ;;
    *) echo "unknown server $s" >&2; exit 2 ;;
  esac
done
echo "servers: $(for s in "${server_list[@]}"; do printf '%s on %s  ' "$s" "${port[$s]}"; done)" >&2

# The work cell's command, per server.
lua="local t=redis.call('TIME') local s=t[1]*1000000+t[2] repeat t=redis.call('TIME') until t[1]*1000000+t[2]-s >= tonumber(ARGV[2]) redis.call('SET',KEYS[1],ARGV[1]) return redis.status_reply('OK')"
work_cmd() {  # server
  if [ "$1" = redis ]; then echo "EVAL|$lua|1|key:__rand_int__|xxx|$work_us"; else echo "SPINSET|key:__rand_int__|xxx|$work_us"; fi
}

# One redis-benchmark run: appends "server cell conns pipeline rps p50 p99" lines to $tmp/results.
run_one() {  # server, cell (a test name or "work"), conns, pipeline
  local s=$1 cell=$2 c=$3 P=$4 n
  if [ "$cell" = work ]; then n=$((c * P > 16 ? 20000 : 5000)); else n=$((P > 1 ? 300000 : 40000)); fi
  [ "$c" -eq 1 ] && [ "$P" -eq 1 ] && n=$((n / 4))
  local args=(-h 127.0.0.1 -p "${port[$s]}" -c "$c" -P "$P" -n "$n" -r "$keyspace" --csv)
  local out
  if [ "$cell" = work ]; then
    IFS='|' read -r -a cmd <<< "$(work_cmd "$s")"
    out=$(timeout 300 redis-benchmark "${args[@]}" "${cmd[@]}" 2>&1) || { echo "redis-benchmark failed: $out" >&2; exit 1; }
  else
    out=$(timeout 300 redis-benchmark "${args[@]}" -t "$cell" 2>&1) || { echo "redis-benchmark failed: $out" >&2; exit 1; }
  fi
  if echo "$out" | grep -qi 'error'; then echo "errors from $s: $out" >&2; exit 1; fi
  # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
  # (counted from the end: a custom command's name may hold commas)
  echo "$out" | tr -d '"' | awk -F, -v s="$s" -v cell="$cell" -v c="$c" -v P="$P" \
    'NR > 1 && NF >= 8 { printf "%s %s %s %s %s %s %s\n", s, cell, c, P, $(NF-6), $(NF-3) * 1000, $(NF-1) * 1000 }' >> "$tmp/results"
}

IFS=, read -r -a conn_list <<< "$conns"
IFS=, read -r -a pipe_list <<< "$pipeline"
IFS=, read -r -a cells <<< "$tests"
[ "$work_us" -gt 0 ] && cells+=(work)
: > "$tmp/results"
for ((r = 0; r < rounds; r++)); do
  for cell in "${cells[@]}"; do
    for c in "${conn_list[@]}"; do
      for P in "${pipe_list[@]}"; do
        # Rotate the servers' order each round.
        k=${#server_list[@]}
        for ((i = 0; i < k; i++)); do
          s=${server_list[$(((i + r) % k))]}
          echo "round $((r + 1))/$rounds: $s $cell c=$c P=$P" >&2
          run_one "$s" "$cell" "$c" "$P"
        done
      done
    done
  done
done

# Medians, and per-round ratios against redis (lines of one round pair up in order).
awk -v servers="$servers" '
function median(a, n,   i, j, t) {
  for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
  return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{
  key = $2 " " $3 " " $4
  if (!(key in seen)) { seen[key] = 1; order[++nkeys] = key }
  cnt[$1, key]++
  rps[$1, key, cnt[$1, key]] = $5; p50[$1, key, cnt[$1, key]] = $6; p99[$1, key, cnt[$1, key]] = $7
}
END {
  ns = split(servers, sv, ",")
  printf "| test | conns | pipeline |"
  for (i = 1; i <= ns; i++) printf " %s req/s | %s p50/p99 us |", sv[i], sv[i]
  for (i = 1; i <= ns; i++) if (sv[i] != "redis") printf " %s / redis |", sv[i]
  printf "\n|---|---:|---:|"
  for (i = 1; i <= ns; i++) printf "---:|---:|"
  for (i = 1; i <= ns; i++) if (sv[i] != "redis") printf "---:|"
  printf "\n"
  for (k = 1; k <= nkeys; k++) {
    key = order[k]; split(key, f, " ")
    printf "| %s | %s | %s |", f[1], f[2], f[3]
    for (i = 1; i <= ns; i++) {
      s = sv[i]; n = cnt[s, key]
      delete a; for (j = 1; j <= n; j++) a[j] = rps[s, key, j]; m = median(a, n)
      delete b; for (j = 1; j <= n; j++) b[j] = p50[s, key, j]; q50 = median(b, n)
      delete d; for (j = 1; j <= n; j++) d[j] = p99[s, key, j]; q99 = median(d, n)
      printf " %.0f | %.0f / %.0f |", m, q50, q99
    }
    for (i = 1; i <= ns; i++) {
      s = sv[i]; if (s == "redis") continue
      n = cnt[s, key]; if (cnt["redis", key] < n) n = cnt["redis", key]
      delete a; lo = 1e9; hi = 0
      for (j = 1; j <= n; j++) { a[j] = rps[s, key, j] / rps["redis", key, j]; if (a[j] < lo) lo = a[j]; if (a[j] > hi) hi = a[j] }
      printf " %.2f (%.2f-%.2f) |", median(a, n), lo, hi
    }
    printf "\n"
  }
}' "$tmp/results"
cp "$tmp/results" "${RESP_BENCH_RAW:-/dev/null}" 2>/dev/null || true

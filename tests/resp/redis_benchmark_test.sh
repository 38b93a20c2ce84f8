#!/usr/bin/env bash
# redis-benchmark (Debian redis-tools) against kv_server --resp: SET, GET,
# INCR and MSET, 50 connections, 16 requests pipelined, bounded counts,
# loopback; every request must be answered without an error, and INCR's
# 20,000 increments of one key must all be there.
#   redis_benchmark_test.sh SERVER REQUESTS [server args...]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
need redis-benchmark
need redis-cli
server=$1 requests=$2
shift 2
start_server "$server" "$@"
out=$(timeout 240 redis-benchmark -h 127.0.0.1 -p "$port" -t set,get,incr,mset -n "$requests" -c 50 -P 16 -q 2>&1 |
      tr '\r' '\n')
echo "$out" | grep 'requests per second' | grep -v 'rps=' || true
fail() { echo "FAIL: $*"; echo "$out"; exit 1; }
for t in SET GET INCR 'MSET (10 keys)'; do
  echo "$out" | grep -q "^ *$t: [0-9.]* requests per second" || fail "no result for $t"
done
echo "$out" | grep -qiE 'error|ERR ' && fail "redis-benchmark reported an error"
# redis-benchmark without -r uses the literal key "counter:__rand_int__".
got=$(timeout 30 redis-cli -p "$port" get 'counter:__rand_int__')
[ "$got" = "$requests" ] || fail "INCR counter is '$got', want $requests"
stop_server
echo "redis-benchmark: $requests requests per test, no errors"

#!/usr/bin/env bash
# redis-cli (Debian redis-tools) round-trips every command of kv_server
# --resp and its error cases, binary-safe values, --pipe; then SIGTERM
# stops the server after it answered.
#   redis_cli_test.sh SERVER [server args...]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"
need redis-cli
start_server "$@"
failures=0
# check EXPECTED ARGS...: redis-cli --no-raw output (human form: (nil), (integer) 1, "v", (error) ...)
check() {
  local want=$1
  shift
  local got
  got=$(timeout 30 redis-cli -p "$port" --no-raw "$@" 2>&1) || true
  if [ "$got" != "$want" ]; then
    echo "FAIL: redis-cli $*"
    echo "  want: $want"
    echo "  got:  $got"
    failures=$((failures + 1))
  fi
}
check 'PONG' ping
check '"hello"' ping hello
check '"x y"' echo "x y"
check '(nil)' get a
check 'OK' set a 1
check '"1"' get a
check '(integer) 2' incr a
check '(integer) 12' incrby a 10
check '(integer) 11' decr a
check '(integer) 1' decrby a 10
check '(integer) 3' append a xy
check '"1xy"' get a
check '(integer) 3' strlen a
check '(integer) 0' strlen missing
check 'OK' mset k1 v1 k2 "v 2"
check $'1) "v1"\n2) (nil)\n3) "v 2"' mget k1 missing k2
check '(integer) 3' exists k1 k2 k1 missing
check '(integer) 3' dbsize
check '(integer) 2' del k1 k2 missing
check '(integer) 1' dbsize
check '(nil)' set a v nx
check '(nil)' set b v xx
check 'OK' set e v ex 100
check '(integer) 100' ttl e
check 'OK' set p v px 50
sleep 0.2  # a clock-driven expiry is what is checked here
check '(nil)' get p
check '(integer) -2' pttl p
check '(integer) -1' ttl a
check '(empty array)' command docs
check 'OK' flushall
check '(integer) 0' dbsize
check 'OK' quit
# Errors: -ERR replies, and the key is not poisoned for later requests.
check 'OK' set s abc
check '(error) ERR value is not an integer or out of range' incr s
check '(error) ERR value is not an integer or out of range' incrby s notanumber
check '"abc"' get s
check 'OK' set s 41
check '(integer) 42' incr s
check 'OK' set m 9223372036854775807
check '(error) ERR increment or decrement would overflow' incr m
check "(error) ERR wrong number of arguments for 'get' command" get
check "(error) ERR wrong number of arguments for 'mset' command" mset a 1 b
check "(error) ERR invalid expire time in 'set' command" set a 1 ex -5
check '(error) ERR syntax error' set a 1 bogus
check "(error) ERR unknown command 'frobnicate', with args beginning with: 'x' " frobnicate x
# Binary-safe: a value with NUL, CR and LF bytes, given on stdin (-x).
printf 'a\0b\r\nc' | timeout 30 redis-cli -p "$port" -x set bin > /dev/null
check '"a\x00b\r\nc"' get bin
check '(integer) 6' strlen bin
# Pipelining: 2,000 requests streamed by redis-cli --pipe, no error.
piped=$(for i in $(seq 1 1000); do printf 'INCR piped\r\nSET key:%d %d\r\n' "$i" "$i"; done |
        timeout 60 redis-cli -p "$port" --pipe 2>&1)
echo "$piped" | grep -q 'errors: 0, replies: 2000' || { echo "FAIL: --pipe: $piped"; failures=$((failures + 1)); }
check '"1000"' get piped
check '"777"' get key:777
# INFO as redis-cli shows it (Redis's CRLF lines): each section alone, and all of them.
check 'OK' set withttl v ex 1000
check $'# Clients\r\nconnected_clients:1\r\nblocked_clients:0\r' info clients
keys=$(timeout 30 redis-cli -p "$port" dbsize)
check "$(printf '# Keyspace\r\ndb0:keys=%s,expires=1,avg_ttl=0\r' "$keys")" info keyspace
info=$(timeout 30 redis-cli -p "$port" info 2>&1 | tr -d '\r')
for want in '# Server' 'redis_version:' '# Clients' '# Stats' 'total_commands_processed:' '# Ordo' \
            'ordo_ops_completed:' 'ordo_pool_cpu:workers=' '# Keyspace' "db0:keys=$keys,"; do
  grep -qF -- "$want" <<<"$info" || { echo "FAIL: redis-cli info lacks '$want'"; failures=$((failures + 1)); }
done
# SIGTERM with a connection open and idle: the server still stops (and closes it).
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'PING\r\n' >&3
read -r -t 30 pong <&3
[ "$pong" = $'+PONG\r' ] || { echo "FAIL: PING on a raw connection: '$pong'"; failures=$((failures + 1)); }
stop_server
exec 3<&-
[ "$failures" -eq 0 ] || { echo "$failures failures"; exit 1; }
echo "redis-cli: every check passed"

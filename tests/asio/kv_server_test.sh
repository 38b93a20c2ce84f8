#!/usr/bin/env bash
# Differential test of examples/kv_server over loopback: starts the server
# (ephemeral port), runs kv_client (a separate process using plain sockets)
# with the given connections and requests, which checks every reply and the
# final state against a serial replay in the server's acceptance order and
# then shuts the server down.
#   kv_server_test.sh SERVER CLIENT CONNS REQUESTS [SEED]
set -euo pipefail
server=$1 client=$2 conns=$3 requests=$4
seed=${5:-$(( (RANDOM << 15) | RANDOM ))}
out=$(mktemp)
trap 'kill "$pid" 2>/dev/null || true; rm -f "$out"' EXIT
"$server" --serve --keys 32 --workers 2 > "$out" &
pid=$!
for _ in $(seq 1 300); do
  port=$(sed -n 's/^listening on \([0-9]*\)$/\1/p' "$out")
  [ -n "$port" ] && break
  kill -0 "$pid" || { echo "server exited early"; exit 1; }
  sleep 0.1   # waiting for a child process to print its port, not ordering work
done
[ -n "$port" ] || { echo "server did not report its port"; exit 1; }
"$client" --port "$port" --conns "$conns" --requests "$requests" --keys 32 --seed "$seed"
wait "$pid"   # SHUTDOWN makes it exit 0

# tests/resp/lib.sh - shared by the redis-cli / redis-benchmark tests:
# skips (exit 77, shown as skipped by ctest) where a tool is missing, starts
# kv_server --resp on a free loopback port, stops it with SIGTERM.
#   . lib.sh; need redis-cli; start_server SERVER [args...]; ...; stop_server
need() {
  command -v "$1" >/dev/null || {
    echo "$1 not found (Debian package redis-tools; scripts/dev.sh test installs it): skipped"
    exit 77
  }
}

start_server() {  # binary, extra args: sets $port and $pid
  local server=$1
  shift
  srv_out=$(mktemp)
  # Port 0: the kernel picks a free port; the server prints it.
  "$server" --resp --port 0 --threads 2 "$@" > "$srv_out" 2>&1 &
  pid=$!
  trap 'kill "$pid" 2>/dev/null || true; rm -f "$srv_out"' EXIT
  port=
  for _ in $(seq 1 300); do
    port=$(sed -n 's/^listening on \([0-9]*\)$/\1/p' "$srv_out")
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || { echo "server exited early:"; cat "$srv_out"; exit 1; }
    sleep 0.1  # waiting for a child process to print its port, not ordering work
  done
  [ -n "$port" ] || { echo "server did not report its port"; exit 1; }
  echo "kv_server --resp listening on 127.0.0.1:$port"
}

stop_server() {  # SIGTERM: the server drains and exits 0 within 30 s
  kill -TERM "$pid"
  local rc=0
  timeout 30 tail --pid="$pid" -f /dev/null || { echo "server did not stop on SIGTERM"; exit 1; }
  wait "$pid" || rc=$?
  [ "$rc" -eq 0 ] || { echo "server exited with $rc after SIGTERM:"; cat "$srv_out"; exit 1; }
  echo "server stopped on SIGTERM"
}

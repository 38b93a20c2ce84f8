#!/usr/bin/env bash
# ordo's one entry point for set-up, demo and tests on a Debian 12 machine.
#
#   scripts/dev.sh demo                      install what is missing, build, run the demo
#   scripts/dev.sh test                      install what is missing, build, run every test
#   scripts/dev.sh test --sanitize thread    the same tests under ThreadSanitizer (build-tsan/)
#   scripts/dev.sh test --sanitize address   the same tests under ASan+UBSan (build-asan/)
#   scripts/dev.sh bench [args]              install the peers too, build in Release, run bench/ordo_workloads
#                                            (with --write-docs: instructions per op under callgrind first)
#   scripts/dev.sh bench-io [args]           the same set-up, then bench/ordo_io_bench (ordo::io beside fio
#                                            and Asio; --write-docs writes docs/io-bench.md)
#   scripts/dev.sh bench-resp [args]         the same set-up, then bench/resp/resp_bench.sh: kv_server --resp
#                                            beside redis-server under redis-benchmark (figures in docs/asio.md)
#   scripts/dev.sh bench-pipeline [args]     build in Release, run bench/ordo_pipeline_bench (issue 32's file
#                                            pipeline beside a serial loop and a thread pool; Markdown on stdout)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

# clang: the consumer test (tests/consumer) also builds against the install with clang++.
# Open MPI: ordo::dist and its tests (run under mpirun, 2 and 4 ranks).
# redis-tools: redis-cli and redis-benchmark drive kv_server --resp in the tests (label resp);
# redis-server: the differential test sends the same commands to it and to kv_server.
# python3: scripts/merge_traces.py (ordo::dist's per-rank traces joined; DistTrace runs it).
packages=(g++ clang cmake ninja-build pkg-config libgtest-dev libgmock-dev liburing-dev libasio-dev nlohmann-json3-dev
          libopenmpi-dev openmpi-bin redis-tools redis-server python3)
# Only `bench` and `bench-io` install these: the peers they compare ordo with
# (bench/peers/: OpenMP with clang (above) + LLVM's libomp, oneTBB, StarPU;
# fio for bench/io/) and valgrind for the instruction counts. Builds and
# tests never need them.
bench_packages=(libomp-dev libtbb-dev libstarpu-dev valgrind fio)

install_missing() {  # [extra packages...]
  local missing=()
  for p in "${packages[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "== installing: ${missing[*]}"
  local sudo=()
  [ "$(id -u)" -ne 0 ] && sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
  # redis-server's package enables a system daemon on port 6379 where systemd
  # runs; the bench starts its own on a free port: keep the daemon off.
  if printf '%s\n' "${missing[@]}" | grep -qx redis-server && command -v systemctl >/dev/null &&
     systemctl is-active --quiet redis-server 2>/dev/null; then
    "${sudo[@]}" systemctl disable --now redis-server || true
  fi
}

jobs=$(nproc 2>/dev/null || echo 2)

configure_build() {  # dir, extra cmake args...
  local dir=$1
  shift
  mkdir -p "$dir"
  cmake -S . -B "$dir" -G Ninja "$@" > "$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; exit 1; }
  cmake --build "$dir" -j "$jobs"
}

cmd=${1:-}
shift || true
case "$cmd" in
  demo)
    install_missing
    configure_build build -DCMAKE_BUILD_TYPE=RelWithDebInfo
    ./build/examples/demo
    ;;
  test)
    sanitize=""
    if [ "${1:-}" = "--sanitize" ]; then sanitize=${2:?--sanitize needs thread or address}; fi
    install_missing
    case "$sanitize" in
      "") dir=build; args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
      thread) dir=build-tsan; args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DORDO_SANITIZE=thread -DORDO_BUILD_BENCH=OFF) ;;
      address) dir=build-asan; args=(-DCMAKE_BUILD_TYPE=Debug -DORDO_SANITIZE=address -DORDO_BUILD_BENCH=OFF) ;;
      *) echo "unknown sanitizer '$sanitize' (thread or address)" >&2; exit 2 ;;
    esac
    configure_build "$dir" "${args[@]}"
    run=()
    if [ "$sanitize" = thread ]; then
      # gcc 12's TSan cannot map its shadow under high-entropy ASLR
      # (vm.mmap_rnd_bits > 28 on newer kernels): run with ASLR off.
      run=(setarch "$(uname -m)" -R)
      export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
    fi
    if [ "$sanitize" = address ]; then
      export ASAN_OPTIONS="detect_leaks=1 abort_on_error=1 ${ASAN_OPTIONS:-}"
      export UBSAN_OPTIONS="print_stacktrace=1 halt_on_error=1 ${UBSAN_OPTIONS:-}"
    fi
    "${run[@]}" ctest --test-dir "$dir" --output-on-failure -j "$jobs" --timeout 900
    ;;
  bench)
    install_missing "${bench_packages[@]}"
    configure_build build-release -DCMAKE_BUILD_TYPE=Release -DORDO_BUILD_TESTS=OFF -DORDO_BUILD_EXAMPLES=OFF
    grep 'ordo bench: peer' build-release/configure.log >&2 || true
    bin=./build-release/bench/ordo_workloads
    extra=()
    # Instructions per op (timing-noise-free): when the report is written, or
    # ORDO_BENCH_CALLGRIND=1; ORDO_BENCH_CALLGRIND=0 never.
    callgrind=${ORDO_BENCH_CALLGRIND:-}
    if [ -z "$callgrind" ]; then
      callgrind=0
      for a in "$@"; do case "$a" in --write-docs*) callgrind=1 ;; esac; done
    fi
    if [ "$callgrind" = 1 ] && command -v valgrind >/dev/null; then
      echo "== instructions per op under callgrind (bench/callgrind_per_op.sh, callgrind_peers.sh; minutes)" >&2
      WORKLOADS="W1 W2 W2op W2co W3 W4 W4co W5" ENGINES="ordo ordo-naive" bench/callgrind_per_op.sh "$bin" \
        > build-release/callgrind_per_op.txt
      # The peers, smaller (StarPU is slow under valgrind): a tbb-flow replay includes building its graph.
      OPS=20000 WORKLOADS="W2 W4" bench/callgrind_peers.sh build-release/bench | tail -n +2 \
        >> build-release/callgrind_per_op.txt
      cat build-release/callgrind_per_op.txt >&2
      extra=(--callgrind-file build-release/callgrind_per_op.txt)
    fi
    "$bin" "${extra[@]}" "$@"
    ;;
  bench-io)
    install_missing "${bench_packages[@]}"
    configure_build build-release -DCMAKE_BUILD_TYPE=Release -DORDO_BUILD_TESTS=OFF -DORDO_BUILD_EXAMPLES=OFF
    ./build-release/bench/ordo_io_bench "$@"
    ;;
  bench-resp)
    install_missing "${bench_packages[@]}"
    # kv_server is an example: a Release build of it alone.
    configure_build build-release-resp -DCMAKE_BUILD_TYPE=Release -DORDO_BUILD_TESTS=OFF -DORDO_BUILD_BENCH=OFF
    bench/resp/resp_bench.sh ./build-release-resp/examples/kv_server "$@"
    ;;
  bench-pipeline)
    install_missing
    configure_build build-release -DCMAKE_BUILD_TYPE=Release -DORDO_BUILD_TESTS=OFF -DORDO_BUILD_EXAMPLES=OFF
    ./build-release/bench/ordo_pipeline_bench "$@"
    ;;
  *)
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac

#!/usr/bin/env bash
# scripts/gpu_check.sh BUILD OUT - the checks that need an NVIDIA GPU, run on
# a GPU machine over binaries built elsewhere (`scripts/dev.sh test` with the
# CUDA toolkit present builds them: BUILD/tests/gpu_test,
# BUILD/examples/gpu_train, BUILD/bench/ordo_gpu_bench, BUILD/bench/ordo_gpu_graph_bench). Writes one log per
# step to OUT and prints each step's status and the tail of its log:
#   gpu_test       every gpu test, the CUDA ones included (none may skip)
#   gpu_trace      a loader's profile on CUDA, written to OUT/gpu_trace.json and
#                  read back by the checks the simulated backend's trace passes
#                  (GpuCudaTrace, tests/gpu/gpu_trace_check.hpp)
#   gpu_train      the two-device training step on CUDA (--cuda: CUDA or fail)
#   memcheck       compute-sanitizer memcheck over the CUDA tests and gpu_train
#   synccheck      compute-sanitizer synccheck over the same
#   gpu_bench      bench/gpu: G1 chain and G2 pipeline beside hand-written CUDA
#   graph_bench    bench/gpu/graph_bench.cpp: a 100-kernel step replayed as a captured
#                  CUDA graph against pushed op by op, both and the ratio (target >= 1.5x)
#   memcheck_graph compute-sanitizer memcheck over that bench (captured graphs' launches)
#   core, coro     the core and coroutine tests on this machine's many cores
set -uo pipefail
build=${1:?usage: gpu_check.sh BUILD OUT}
out=${2:?usage: gpu_check.sh BUILD OUT}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
nproc
status=0
step() {  # name timeout_s command...
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout -k 10 "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc in $((SECONDS - t0)) s: $*"
  tail -n "${TAIL:-12}" "$out/$name.log"
  [ "$rc" -eq 0 ] || status=1
}
# Under the sanitizers: the CUDA tests but those that fail CUDA calls on purpose,
# and the trace's, whose time checks assume the device runs at its own pace.
cuda_tests='GpuCuda*:*/GpuCudaKernels.*:GpuDifferentialCuda*:-*DeviceFault*:*LaunchError*:GpuCudaTrace.*'
TAIL=25 step gpu_test 240 "$build/tests/gpu_test"
if grep -E "^\[  SKIPPED \] .*(GpuCuda|GpuDifferentialCuda)" "$out/gpu_test.log" | grep -v WithoutADevice; then
  echo "== gpu_test: CUDA tests skipped on a GPU machine"
  status=1
fi
step gpu_trace 120 env ORDO_GPU_TRACE="$out/gpu_trace.json" "$build/tests/gpu_test" --gtest_filter='GpuCudaTrace.*'
if ! grep -q '^\[  PASSED  \] 1 test\.' "$out/gpu_trace.log" || grep -q '^\[  SKIPPED \]' "$out/gpu_trace.log" ||
  [ ! -s "$out/gpu_trace.json" ]; then
  echo "== gpu_trace: GpuCudaTrace did not pass, or wrote no $out/gpu_trace.json"
  status=1
fi
TAIL=30 step gpu_train 120 "$build/examples/gpu_train" --cuda
TAIL=20 step gpu_bench 300 "$build/bench/ordo_gpu_bench" --runs "${RUNS:-5}"
TAIL=5 step graph_bench 120 "$build/bench/ordo_gpu_graph_bench" --cuda --runs "${RUNS:-5}"
if grep -q "^no GPU\|^built without nvcc" "$out/graph_bench.log"; then
  echo "== graph_bench: no CUDA measurement on a GPU machine"
  status=1
fi
command -v compute-sanitizer > /dev/null || PATH=$PATH:/usr/local/cuda/bin
step memcheck 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$build/tests/gpu_test" --gtest_filter="$cuda_tests"
step memcheck_train 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$build/examples/gpu_train" --cuda
step memcheck_graph 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$build/bench/ordo_gpu_graph_bench" --cuda --quick
step synccheck 200 compute-sanitizer --tool synccheck --error-exitcode 9 "$build/tests/gpu_test" --gtest_filter="$cuda_tests"
step core "${CORE_LIMIT:-300}" "$build/tests/core_test" --gtest_brief=1
step coro "${CORE_LIMIT:-200}" "$build/tests/coro_test" --gtest_brief=1
exit $status

// tests/gpu/cuda_trace_test.cpp - the loader of gpu_trace_check.hpp on the
// CUDA backend: its trace, timed by CUDA events, read back by the same
// checks as on the simulated backend. Skipped without a device;
// scripts/gpu_check.sh runs it with ORDO_GPU_TRACE set to keep the trace.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "gpu/gpu_trace_check.hpp"

namespace ordo::test {
namespace {

TEST(GpuCudaTrace, LoaderTraceReadsBack) {
  const gpu::Probe p = gpu::probe_cuda();
  if (!p.available()) GTEST_SKIP() << "no CUDA device: " << p.reason;
  Options o = engine_options(EngineKind::per_device);
  o.profile.enabled = true;
  Engine engine(o);
  constexpr int kRounds = 4;
  constexpr std::size_t kFloats = 1 << 16;
  {
    gpu::Runtime rt(engine, gpu::make_cuda_backend(), {.devices = 1});
    EXPECT_EQ(run_gpu_loader(engine, rt, 1, kRounds, kFloats), kRounds);
  }
  std::ostringstream out;
  engine.profiler().write_chrome_trace(out);
  if (const char* path = std::getenv("ORDO_GPU_TRACE")) {
    std::ofstream(path) << out.str();
    std::printf("GpuCudaTrace: trace written to %s\n", path);
  }
  // CUDA event times reach the host clock through one reference event per
  // device, placed within a few microseconds.
  check_gpu_trace(out.str(), {.devices = 1,
                              .rounds = kRounds,
                              .bytes = kFloats * sizeof(float),
                              .exclusive_streams = true,
                              .tolerance_us = 50});
}

}  // namespace
}  // namespace ordo::test

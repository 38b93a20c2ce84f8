// tests/gpu/cuda_captured_test.cpp - captured graphs on the CUDA backend:
// a step of an upload, kernels on two devices and a download, captured and
// replayed as CUDA graphs (cudaStreamBeginCapture / cudaGraphLaunch), against
// the host reference; with host tasks captured as host nodes. Skipped (shown
// as skipped) without a device; the kernels need nvcc at build time, copies
// and host tasks do not.
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.hpp"
#include "ordo/graph.hpp"
#if ORDO_TEST_CUDA_KERNELS
#include "gpu/cuda_kernels.hpp"
#endif

namespace ordo::test {
namespace {

using gpu::Stream;

TEST(GpuCudaCaptured, StepReplaysAsCudaGraphsMatchTheHostReference) {
  const gpu::Probe p = gpu::probe_cuda();
  if (!p.available()) GTEST_SKIP() << "no CUDA device: " << p.reason;
  Engine engine(engine_options(EngineKind::per_device));
  gpu::Runtime rt(engine, gpu::make_cuda_backend(), {.devices = 2});
  constexpr int n = 1 << 16;
  constexpr std::size_t bytes = n * sizeof(std::uint32_t);
  gpu::Buffer host = rt.alloc_host(bytes), back = rt.alloc_host(bytes);
  gpu::Buffer d0 = rt.alloc_device(0, bytes), d1 = rt.alloc_device(1, bytes);
  std::iota(host.as<std::uint32_t>(), host.as<std::uint32_t>() + n, 0U);
  Var vh = engine.new_variable(), v0 = engine.new_variable(), v1 = engine.new_variable(), vb = engine.new_variable();
  Var vlog = engine.new_variable();
  std::vector<std::uint32_t> ref(host.as<std::uint32_t>(), host.as<std::uint32_t>() + n);
  std::vector<bool> same;
  int host_nodes = 0;
  Graph g = engine.capture([&] {
    rt.push([&](const Stream& s) { s.copy(d0.data(), host.data(), bytes); }, Context::gpu(0), {vh}, {v0},
            {.prop = FnProperty::copy_to_device});
#if ORDO_TEST_CUDA_KERNELS
    for (std::uint32_t k = 1; k <= 4; ++k) {
      rt.push([&, k](const Stream& s) { kernels::affine(s.handle(), d0.as<std::uint32_t>(), nullptr, n, 3, k, 0); },
              Context::gpu(0), {}, {v0});
    }
#endif
    rt.push([&](const Stream& s) { s.host_task([&] { ++host_nodes; }); }, Context::gpu(0), {}, {v0});
    rt.push([&](const Stream& s) { s.copy(d1.data(), d0.data(), bytes); }, Context::gpu(1), {v0}, {v1});
#if ORDO_TEST_CUDA_KERNELS
    rt.push([&](const Stream& s) { kernels::affine(s.handle(), d1.as<std::uint32_t>(), nullptr, n, 5, 7, 0); },
            Context::gpu(1), {}, {v1});
#endif
    rt.push([&](const Stream& s) { s.copy(back.data(), d1.data(), bytes); }, Context::gpu(1), {v1}, {vb},
            {.prop = FnProperty::copy_from_device});
    engine.push_sync([&] { same.push_back(std::memcmp(back.data(), ref.data(), bytes) == 0); }, Context::cpu(), {vb},
                     {vlog});
  });
  for (auto& x : ref) {
#if ORDO_TEST_CUDA_KERNELS
    for (std::uint32_t k = 1; k <= 4; ++k) x = x * 3 + k;
    x = x * 5 + 7;
#else
    (void)x;
#endif
  }
  constexpr int kReplays = 5;
  for (int r = 0; r < kReplays; ++r) {
    // The input is set again before each replay (a kernel's output the step
    // does not touch would otherwise hide a replay that did nothing).
    engine.push_sync([&] {
      std::iota(host.as<std::uint32_t>(), host.as<std::uint32_t>() + n, static_cast<std::uint32_t>(0));
      std::memset(back.data(), 0, bytes);
    }, Context::cpu(), {}, {vh, vb});
    engine.replay(g);
  }
  engine.wait_for_all();
  EXPECT_EQ(same, std::vector<bool>(kReplays, true));
  EXPECT_EQ(host_nodes, kReplays) << "a captured host task runs at every launch";
  for (gpu::Buffer b : {host, back, d0, d1}) rt.free(b);
}

}  // namespace
}  // namespace ordo::test

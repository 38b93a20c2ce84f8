// tests/gpu/cuda_test.cpp - the CUDA backend: without a driver or device,
// GPU contexts fail with a clear, named error (this runs on CI machines);
// with one, copies and cross-stream ordering on real streams (skipped, and
// shown as skipped, elsewhere).
#include <numeric>
#include <vector>

#include "gpu/gpu_test_util.hpp"

namespace ordo::test {
namespace {

TEST(GpuCuda, WithoutADeviceGpuContextsGiveAClearError) {
  const gpu::Probe p = gpu::probe_cuda();
  if (p.available()) GTEST_SKIP() << "a CUDA device is present: nothing to check here";
  EXPECT_FALSE(p.reason.empty());
  Engine engine(engine_options(EngineKind::per_device));
  gpu::Runtime rt(engine, gpu::make_cuda_backend());
  EXPECT_EQ(rt.device_count(), 0);
  EXPECT_FALSE(rt.unavailable_reason().empty());
  Var x = engine.new_variable();
  try {
    rt.push([](const gpu::Stream&) {}, Context::gpu(0), {}, {x});
    FAIL() << "a GPU push without a device must throw";
  } catch (const gpu::GpuError& e) {
    EXPECT_EQ(e.name(), "cudaErrorNoDevice");
    EXPECT_NE(std::string(e.what()).find(p.reason), std::string::npos) << e.what();
  }
  // The rest of the engine is unaffected.
  int ran = 0;
  engine.push_sync([&] { ++ran; }, Context::cpu(), {}, {x});
  engine.wait_for_all();
  EXPECT_EQ(ran, 1);
}

TEST(GpuCuda, CopiesRoundTripThroughTwoDevicesStreams) {
  const gpu::Probe p = gpu::probe_cuda();
  if (!p.available()) GTEST_SKIP() << "no CUDA device: " << p.reason;
  Engine engine(engine_options(EngineKind::per_device));
  gpu::Runtime rt(engine, gpu::make_cuda_backend(), {.devices = 2});
  constexpr std::size_t n = 1 << 20;
  gpu::Buffer host = rt.alloc_host(n * sizeof(float));
  gpu::Buffer back = rt.alloc_host(n * sizeof(float));
  gpu::Buffer d0 = rt.alloc_device(0, n * sizeof(float));
  gpu::Buffer d1 = rt.alloc_device(1, n * sizeof(float));
  std::iota(host.as<float>(), host.as<float>() + n, 0.0F);
  Var vh = engine.new_variable(), v0 = engine.new_variable(), v1 = engine.new_variable(), vb = engine.new_variable();
  rt.push([&](const gpu::Stream& s) { s.copy(d0.data(), host.data(), n * sizeof(float)); }, Context::gpu(0), {vh},
          {v0}, {.prop = FnProperty::copy_to_device});
  rt.push([&](const gpu::Stream& s) { s.copy(d1.data(), d0.data(), n * sizeof(float)); }, Context::gpu(1), {v0},
          {v1});
  rt.push([&](const gpu::Stream& s) { s.copy(back.data(), d1.data(), n * sizeof(float)); }, Context::gpu(1), {v1},
          {vb}, {.prop = FnProperty::copy_from_device});
  bool same = false;
  engine.push_sync([&] { same = std::equal(host.as<float>(), host.as<float>() + n, back.as<float>()); },
                   Context::cpu(), {vb}, {});
  engine.wait_for_all();
  EXPECT_TRUE(same);
  EXPECT_GE(rt.stats().stream_waits, 2U);
  for (gpu::Buffer b : {host, back, d0, d1}) rt.free(b);
}

}  // namespace
}  // namespace ordo::test

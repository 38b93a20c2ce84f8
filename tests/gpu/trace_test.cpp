// tests/gpu/trace_test.cpp - GPU ops' work in the engine's trace, on the
// simulated backend (timed by its streams): a slice per kernel and copy on a
// track per device and stream, arrows from the ops that launched them, between
// streams that waited for each other and to the ops their fences held, the
// summary's gpu rows, and the critical path through a kernel.
#include <cstdio>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/gpu_trace_check.hpp"

namespace ordo::test {
namespace {

Options profiled(EngineKind kind) {
  Options o = engine_options(kind);
  o.profile.enabled = true;
  return o;
}

gpu::SimOptions sim(int devices) {
  // Random delays per stream item vary the schedule; the gate orders what the checks need.
  const std::uint64_t seed = seed_from_env(7);
  std::printf("GpuTrace: seed %llu (ORDO_TEST_SEED)\n", static_cast<unsigned long long>(seed));
  return {.devices = devices, .max_delay = std::chrono::microseconds(20), .seed = seed};
}

class GpuTrace : public ::testing::TestWithParam<EngineKind> {};

TEST_P(GpuTrace, KernelsAndCopiesAreSlicesPerStreamWithArrows) {
  constexpr int kDevices = 2, kRounds = 3;
  constexpr std::size_t kFloats = 256;
  Engine engine(profiled(GetParam()));
  {
    gpu::Runtime rt(engine, gpu::make_sim_backend(sim(kDevices)));
    EXPECT_EQ(run_gpu_loader(engine, rt, kDevices, kRounds, kFloats), kDevices * kRounds);
  }
  std::ostringstream out;
  engine.profiler().write_chrome_trace(out);
  check_gpu_trace(out.str(), {.devices = kDevices,
                              .rounds = kRounds,
                              .bytes = kFloats * sizeof(float),
                              .exclusive_streams = GetParam() == EngineKind::per_device});

  // The summary's gpu rows: one per op name, copies with their bytes.
  const ProfileSummary s = engine.profiler().summary();
  std::map<std::string, SliceStats> rows;
  for (const SliceStats& r : s.slices) {
    EXPECT_EQ(r.category, "gpu") << r.name;
    rows[r.name] = r;
  }
  ASSERT_EQ(rows.size(), 3U) << s;
  for (const char* name : {"upload", "scale", "download"}) {
    EXPECT_EQ(rows[name].count, static_cast<std::uint64_t>(kDevices * kRounds)) << name;
    EXPECT_EQ(rows[name].failed, 0U) << name;
    EXPECT_LE(rows[name].p50_ns, rows[name].max_ns) << name;
  }
  EXPECT_EQ(rows["upload"].bytes, kDevices * kRounds * kFloats * sizeof(float));
  EXPECT_EQ(rows["scale"].bytes, 0U);
}

INSTANTIATE_TEST_SUITE_P(Engines, GpuTrace,
                         ::testing::Values(EngineKind::per_device, EngineKind::pooled, EngineKind::naive),
                         [](const auto& p) { return std::string(kind_name(p.param)); });

// One upload -> scale -> download -> consume chain: the path runs from the
// upload's op through the three slices (each waited for the one before it
// on the device) to the consume their fence held, and the DOT graph draws it.
TEST(GpuTraceCriticalPath, RunsThroughTheKernel) {
  Engine engine(profiled(EngineKind::per_device));
  {
    gpu::Runtime rt(engine, gpu::make_sim_backend(sim(1)));
    EXPECT_EQ(run_gpu_loader(engine, rt, 1, 1, 64), 1);
  }
  const CriticalPath cp = engine.profiler().summary().critical_path;
  std::vector<std::string> steps;
  for (const CriticalStep& st : cp.steps) steps.push_back(st.kind + " " + st.name);
  EXPECT_EQ(steps, (std::vector<std::string>{"op upload", "gpu upload", "gpu scale", "gpu download", "op consume"}))
      << engine.profiler().summary();
  EXPECT_GT(cp.length_ns, 0);
  EXPECT_LE(cp.length_ns, cp.wall_ns);
  for (std::size_t i = 1; i < cp.steps.size(); ++i) {
    EXPECT_LE(cp.steps[i - 1].end_ns, cp.steps[i].end_ns) << "step " << i << " ended before the one it waited for";
  }
  std::ostringstream dot;
  engine.profiler().write_dot(dot);
  EXPECT_NE(dot.str().find("gpu scale #"), std::string::npos) << dot.str();
}

// Work that fails on the device: its slice carries the failure, and the
// summary counts it.
TEST(GpuTraceFailure, AFailedKernelsSliceSaysSo) {
  Engine engine(profiled(EngineKind::per_device));
  {
    gpu::Runtime rt(engine, gpu::make_sim_backend({.devices = 1}));
    const Var x = engine.new_variable();
    rt.push([](const gpu::Stream& s) { s.host_task([] { throw std::runtime_error("device fault"); }); },
            Context::gpu(0), {}, {x}, {.name = "faulty"});
    EXPECT_THROW(engine.wait_for_var(x), std::runtime_error);
    engine.wait_for_all();
  }
  const ProfileData d = engine.profiler().data();
  ASSERT_EQ(d.slices.size(), 1U);
  EXPECT_EQ(d.slices[0].category, "gpu");
  EXPECT_EQ(d.slices[0].name, "faulty");
  EXPECT_LT(d.slices[0].result, 0);
  EXPECT_LE(d.slices[0].begin_ns, d.slices[0].end_ns);
  const ProfileSummary s = engine.profiler().summary();
  ASSERT_EQ(s.slices.size(), 1U);
  EXPECT_EQ(s.slices[0].failed, 1U);
}

}  // namespace
}  // namespace ordo::test

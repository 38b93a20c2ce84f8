// tests/gpu/profile_test.cpp - GPU ops (pushed by the runtime as stream-ordered
// ops) show in the engine's profile like any other op, by name.
#include <cstdint>
#include <string>

#include "gpu/gpu_test_util.hpp"
#include "ordo/profiler.hpp"

namespace ordo::test {
namespace {

const OpStats* row(const ProfileSummary& s, const std::string& name) {
  for (const auto& r : s.ops) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

TEST(GpuProfile, GpuOpsAndTheirCpuConsumerAppearOnceEach) {
  Options o = engine_options(EngineKind::per_device);
  o.profile.enabled = true;
  Engine engine(o);
  {
    gpu::Runtime rt(engine, gpu::make_sim_backend({.devices = 1, .seed = 3}));
    Var x = engine.new_variable();
    gpu::Buffer buf = rt.alloc_host(sizeof(std::uint64_t));
    auto* v = buf.as<std::uint64_t>();
    *v = 0;
    for (int i = 0; i < 10; ++i) {
      rt.push([v](const gpu::Stream& s) { s.host_task([v] { *v += 1; }); }, Context::gpu(0), {}, {x},
              {.name = "gpu.add"});
    }
    std::uint64_t seen = 0;
    engine.push_sync([&] { seen = *v; }, Context::cpu(), {x}, {}, {.name = "cpu.read"});
    engine.wait_for_all();
    EXPECT_EQ(seen, 10U);
    rt.free(buf);
  }
  const ProfileSummary s = engine.profiler().summary();
  const OpStats* gpu_row = row(s, "gpu.add");
  const OpStats* cpu_row = row(s, "cpu.read");
  ASSERT_NE(gpu_row, nullptr) << s;
  ASSERT_NE(cpu_row, nullptr) << s;
  EXPECT_EQ(gpu_row->count, 10U);
  EXPECT_EQ(cpu_row->count, 1U);
  EXPECT_EQ(s.unfinished, 0U);
}

}  // namespace
}  // namespace ordo::test

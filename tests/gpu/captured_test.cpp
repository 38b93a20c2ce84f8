// tests/gpu/captured_test.cpp - GPU ops inside Engine::capture (docs/gpu.md,
// "Captured"): consecutive ops of one device and stream become one node that
// launches one backend graph; replays match the same ops pushed, bit for bit,
// on the simulated backend with random delays (a missing wait or an early
// completion shows as a wrong value); a failing kernel fails the group's
// writes and the replay's awaiter; graphs die safely with replays in flight.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.hpp"
#include "ordo/graph.hpp"
#include "ordo/task.hpp"

namespace ordo::test {
namespace {

using gpu::Stream;

std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a ^ (b * 0x9E3779B97F4A7C15ULL) ^ 0xD1B54A32D192ED03ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

constexpr int kN = 64;
constexpr std::size_t kBytes = kN * sizeof(std::uint64_t);

/// One rig's step: an upload, kernels on two streams of two devices, a CPU
/// op between two kernels of one stream that depends on the first and that
/// the second depends on (it splits their group), a download and a CPU
/// consumer; and the dynamic pushes made between steps.
struct Step {
  explicit Step(SimRig& r) : rig(r), e(r.engine), rt(r.rt) {
    in = rt.alloc_host(kBytes);
    out = rt.alloc_host(kBytes);
    d0a = rt.alloc_device(0, kBytes);
    d0b = rt.alloc_device(0, kBytes);
    d1a = rt.alloc_device(1, kBytes);
    for (gpu::Buffer b : {in, out, d0a, d0b, d1a}) std::memset(b.data(), 0, kBytes);
    mid.assign(kN, 0);
  }
  ~Step() {
    try {
      e.wait_for_all();
    } catch (...) {
    }
    for (gpu::Buffer b : {in, out, d0a, d0b, d1a}) rt.free(b);
  }
  Step(const Step&) = delete;
  Step& operator=(const Step&) = delete;

  static std::uint64_t* u(const gpu::Buffer& b) { return b.as<std::uint64_t>(); }

  /// The step's pushes (recorded when inside a capture). Nine nodes once
  /// captured: fill, upload, {k1, k2}, between, {k3}, peer, {k4, k5},
  /// download, consume.
  void push() {
    e.push_sync([this] {
      for (int i = 0; i < kN; ++i) u(in)[i] = mix(iter, static_cast<std::uint64_t>(i));
      ++iter;
    }, Context::cpu(), {}, {v_iter, v_in}, {.name = "fill"});
    rt.push([this](const Stream& s) { s.copy(d0a.data(), in.data(), kBytes); }, Context::gpu(0), {v_in}, {v_d0a},
            {.prop = FnProperty::copy_to_device, .name = "upload"});
    rt.push([this](const Stream& s) {
      s.host_task([this] {
        for (int i = 0; i < kN; ++i) u(d0a)[i] = mix(u(d0a)[i], scale);
      });
    }, Context::gpu(0), {v_scale}, {v_d0a}, {.name = "k1"});
    rt.push([this](const Stream& s) {
      s.host_task([this] {
        for (int i = 0; i < kN; ++i) u(d0b)[i] = mix(u(d0b)[i], u(d0a)[i]);
      });
    }, Context::gpu(0), {v_d0a}, {v_d0b}, {.name = "k2"});
    e.push_sync([this] {
      for (int i = 0; i < kN; ++i) mid[static_cast<std::size_t>(i)] = u(d0a)[i] ^ static_cast<std::uint64_t>(i * 7);
    }, Context::cpu(), {v_d0a}, {v_mid}, {.name = "between"});
    rt.push([this](const Stream& s) {
      s.host_task([this] {
        for (int i = 0; i < kN; ++i) u(d0b)[i] += mid[static_cast<std::size_t>(i)];
      });
    }, Context::gpu(0), {v_mid}, {v_d0b}, {.name = "k3"});
    rt.push([this](const Stream& s) { s.copy(d1a.data(), d0b.data(), kBytes); }, Context::gpu(1), {v_d0b}, {v_d1a},
            {.prop = FnProperty::copy_to_device, .name = "peer"});
    rt.push([this](const Stream& s) {
      s.host_task([this] {
        for (int i = 0; i < kN; ++i) u(d1a)[i] = mix(u(d1a)[i], static_cast<std::uint64_t>(i));
      });
    }, Context::gpu(1), {}, {v_d1a}, {.name = "k4"});
    rt.push([this](const Stream& s) {
      s.host_task([this] {
        for (int i = 0; i < kN; ++i) u(d1a)[i] *= 3;
      });
    }, Context::gpu(1), {}, {v_d1a}, {.name = "k5"});
    rt.push([this](const Stream& s) { s.copy(out.data(), d1a.data(), kBytes); }, Context::gpu(1), {v_d1a}, {v_out},
            {.prop = FnProperty::copy_from_device, .name = "download"});
    e.push_sync([this] {
      std::uint64_t h = 0;
      for (int i = 0; i < kN; ++i) h = mix(h, u(out)[i]);
      log.push_back(h);
    }, Context::cpu(), {v_out}, {v_log}, {.name = "consume"});
  }

  /// Between two steps, on variables the step shares: a CPU op on what k1
  /// reads, and a GPU op on another stream (a copy, in chunks: several
  /// delayed items) over what k2 updates: its fence is what the next step's
  /// group must make its stream wait for on the device.
  void dynamic(std::uint64_t r) {
    e.push_sync([this, r] {
      scale = mix(scale, r);
      for (int i = 0; i < kN; ++i) noise[static_cast<std::size_t>(i)] = mix(r, static_cast<std::uint64_t>(i));
    }, Context::cpu(), {}, {v_scale, v_noise}, {.name = "set scale"});
    rt.push([this](const Stream& s) {
      constexpr int kChunk = kN / 8;
      for (int c = 0; c < kN; c += kChunk) s.copy(u(d0b) + c, noise.data() + c, kChunk * sizeof(std::uint64_t));
    }, Context::gpu(0), {v_noise}, {v_d0b}, {.prop = FnProperty::copy_to_device, .name = "perturb"});
  }

  [[nodiscard]] std::vector<std::uint64_t> state() {
    e.wait_for_all();
    std::vector<std::uint64_t> s(log);
    for (gpu::Buffer b : {out, d0b, d1a}) s.insert(s.end(), u(b), u(b) + kN);
    s.push_back(scale);
    s.push_back(iter);
    return s;
  }

  SimRig& rig;
  Engine& e;
  gpu::Runtime& rt;
  gpu::Buffer in, out, d0a, d0b, d1a;
  std::vector<std::uint64_t> mid, log, noise = std::vector<std::uint64_t>(kN);
  std::uint64_t iter = 0, scale = 1;
  Var v_iter = e.new_variable(), v_in = e.new_variable(), v_d0a = e.new_variable(), v_d0b = e.new_variable();
  Var v_mid = e.new_variable(), v_d1a = e.new_variable(), v_out = e.new_variable(), v_log = e.new_variable();
  Var v_scale = e.new_variable(), v_noise = e.new_variable();
};

gpu::SimOptions delays(std::uint64_t seed) {
  return {.devices = 2, .max_delay = std::chrono::microseconds(40), .seed = seed};
}

class GpuCaptured : public ::testing::TestWithParam<EngineKind> {};

TEST_P(GpuCaptured, ReplaysMatchTheStepPushedBitForBit) {
  constexpr int kSteps = 12;
  for (std::uint64_t seed : {seed_from_env(11), seed_from_env(11) + 1}) {
    SCOPED_TRACE("engine " + std::string(kind_name(GetParam())) + ", seed " + std::to_string(seed) +
                 " (ORDO_TEST_SEED)");
    std::printf("GpuCaptured.ReplaysMatchTheStepPushedBitForBit: %s, seed %llu\n", kind_name(GetParam()),
                static_cast<unsigned long long>(seed));
    std::vector<std::uint64_t> pushed, replayed;
    {
      SimRig rig(GetParam(), delays(seed));
      Step st(rig);
      for (int k = 0; k < kSteps; ++k) {
        st.push();
        st.dynamic(mix(seed, static_cast<std::uint64_t>(k)));
      }
      pushed = st.state();
    }
    {
      SimRig rig(GetParam(), delays(seed));
      Step st(rig);
      Graph g = rig.engine.capture([&] { st.push(); });
      EXPECT_EQ(g.size(), 9U) << "fill, upload, {k1 k2}, between, {k3}, peer, {k4 k5}, download, consume";
      for (int k = 0; k < kSteps; ++k) {
        rig.engine.replay(g);
        st.dynamic(mix(seed, static_cast<std::uint64_t>(k)));
      }
      replayed = st.state();
      EXPECT_EQ(rig.rt.stats().gpu_ops, static_cast<std::uint64_t>(kSteps) * (8 + 1))
          << "8 recorded, 1 pushed per step";
    }
    ASSERT_EQ(pushed.size(), replayed.size());
    EXPECT_TRUE(pushed == replayed) << "a replayed step differs from the same step pushed";
  }
}

TEST_P(GpuCaptured, GroupsSplitOnlyWhereAnOpOutsideDependsOnThem) {
  SimRig rig(GetParam(), {.devices = 2});
  Engine& e = rig.engine;
  Var a = e.new_variable(), b = e.new_variable(), c = e.new_variable(), other = e.new_variable();
  auto kernel = [](const Stream&) {};
  // A CPU op between two kernels of one stream that touches nothing of the
  // first: one group. Another device's or stream's op between: one group.
  Graph one = e.capture([&] {
    rig.rt.push(kernel, Context::gpu(0), {}, {a});
    e.push_sync([] {}, Context::cpu(), {}, {other});
    rig.rt.push(kernel, Context::gpu(1), {}, {c});
    rig.rt.push(kernel, Context::gpu(0), {other}, {b});
  });
  EXPECT_EQ(one.size(), 3U);  // {k a, k b}, cpu, k c
  // A CPU op that reads what the group wrote splits it, whether or not the
  // next kernel depends on it (the rule is the simpler, safe one).
  Graph split = e.capture([&] {
    rig.rt.push(kernel, Context::gpu(0), {}, {a});
    e.push_sync([] {}, Context::cpu(), {a}, {other});
    rig.rt.push(kernel, Context::gpu(0), {}, {b});
  });
  EXPECT_EQ(split.size(), 3U);
  // Ops of another stream kind (a copy) that depend on the group split it too.
  Graph copies = e.capture([&] {
    rig.rt.push(kernel, Context::gpu(0), {}, {a});
    rig.rt.push(kernel, Context::gpu(0), {a}, {b}, {.prop = FnProperty::copy_from_device});
    rig.rt.push(kernel, Context::gpu(0), {}, {c});
  });
  EXPECT_EQ(copies.size(), 3U);
  for (Graph* g : {&one, &split, &copies}) e.replay(*g);
  e.wait_for_all();
}

TEST_P(GpuCaptured, BodiesRunOnceWhenCapturedTheirWorkAtEveryReplay) {
  SimRig rig(GetParam(), delays(seed_from_env(5)));
  Var x = rig.engine.new_variable();
  std::atomic<int> bodies{0};
  std::atomic<int> kernels{0};
  Graph g = rig.engine.capture([&] {
    for (int k = 0; k < 3; ++k) {
      rig.rt.push([&](const Stream& s) {
        ++bodies;
        s.host_task([&] { ++kernels; });
      }, Context::gpu(0), {}, {x});
    }
  });
  EXPECT_EQ(g.size(), 1U);
  EXPECT_EQ(bodies.load(), 0) << "a capture records; it runs nothing";
  for (int r = 0; r < 5; ++r) rig.engine.replay(g);
  rig.engine.wait_for_var(x);
  EXPECT_EQ(bodies.load(), 3) << "the bodies' host code runs once, when the group is captured (its first replay)";
  EXPECT_EQ(kernels.load(), 15) << "the captured work runs at every replay";
}

TEST_P(GpuCaptured, OperatorPushesAreRecordedAndKeptByTheGraph) {
  SimRig rig(GetParam(), delays(seed_from_env(6)));
  Var x = rig.engine.new_variable();
  std::vector<int> seen;
  int value = 0;
  gpu::Operator op = rig.rt.new_operator([&](const Stream& s) { s.host_task([&] { value = value * 2 + 1; }); }, {},
                                         {x}, {.name = "double"});
  Graph g = rig.engine.capture([&] {
    rig.rt.push(op, Context::gpu(0));
    rig.rt.push(op, Context::gpu(0));
    rig.engine.push_sync([&] { seen.push_back(value); }, Context::cpu(), {x}, {});
  });
  EXPECT_EQ(g.size(), 2U);
  rig.engine.replay(g);
  rig.engine.wait_for_all();
  rig.rt.delete_operator(op);  // the graph keeps the body it captured
  rig.engine.replay(g);
  rig.engine.wait_for_all();
  EXPECT_EQ(seen, (std::vector<int>{3, 15}));
  EXPECT_THROW(rig.rt.push(op, Context::gpu(0)), Error);
  EXPECT_THROW((void)rig.engine.capture([&] { rig.rt.push(op, Context::gpu(0)); }), Error);
}

/// A simulated kernel fault: work the backend itself fails, sticky on its stream.
void device_fault(const Stream& s) {
  s.runtime().backend().host_task(s.handle(), [] { throw gpu::GpuError(700, "simErrorTestFault", "test kernel"); });
}

TEST_P(GpuCaptured, AFailingKernelFailsTheGroupsWritesAndTheReplaysAwaiterOnce) {
  // Both ways a kernel fails: a host task that throws (the runtime fails
  // the stream) and a backend fault; the failing group followed by a CPU op
  // (it completes once its work finished) or by another stream's group (it
  // completes at enqueue and the failure travels along the device wait).
  for (const bool host_task : {true, false}) {
    for (const bool then_group : {false, true}) {
      SCOPED_TRACE(std::string(host_task ? "a host task throws" : "a device fault") +
                   (then_group ? ", then a copy group" : ", then a CPU op"));
      SimRig rig(GetParam(), delays(seed_from_env(7)));
      Engine& e = rig.engine;
      Var a = e.new_variable(), b = e.new_variable(), c = e.new_variable(), d = e.new_variable();
      bool consumed = false;
      Graph g = e.capture([&] {
        rig.rt.push([](const Stream&) {}, Context::gpu(0), {}, {a}, {.name = "fine"});
        rig.rt.push([&](const Stream& s) {
          if (host_task) {
            s.host_task([] { throw std::runtime_error("kernel failed"); });
          } else {
            device_fault(s);
          }
        }, Context::gpu(0), {a}, {b}, {.name = "bad"});
        if (then_group) {
          rig.rt.push([](const Stream&) {}, Context::gpu(0), {a, b}, {c},
                      {.prop = FnProperty::copy_from_device, .name = "download"});
        }
        e.push_sync([&] { consumed = true; }, Context::cpu(), {then_group ? c : b}, {d}, {.name = "consumer"});
      });
      ASSERT_EQ(g.size(), then_group ? 3U : 2U);
      auto run = [&]() -> Task<void> { co_await ordo::replay(e, g); };
      std::string awaited;
      try {
        sync_wait(run());
        ADD_FAILURE() << "the replay's awaiter must get the kernel's failure";
      } catch (const std::exception& ex) {
        awaited = ex.what();
      }
      EXPECT_NE(awaited.find(host_task ? "kernel failed" : "simErrorTestFault"), std::string::npos) << awaited;
      EXPECT_FALSE(consumed) << "a reader of the failed group's writes is skipped";
      for (Var v : {a, b, c, d}) {
        if (v == c && !then_group) continue;
        try {
          e.wait_for_var(v);
          ADD_FAILURE() << "the group's writes, and what was computed from them, carry its failure";
        } catch (const std::exception& ex) {
          EXPECT_EQ(ex.what(), awaited);
        }
      }
    }
  }
}

TEST_P(GpuCaptured, GraphDestroyedWithReplaysInFlight) {
  const std::uint64_t seed = seed_from_env(9);
  std::printf("GpuCaptured.GraphDestroyedWithReplaysInFlight: %s, seed %llu\n", kind_name(GetParam()),
              static_cast<unsigned long long>(seed));
  std::vector<std::uint64_t> pushed, replayed;
  {
    SimRig rig(GetParam(), delays(seed));
    Step st(rig);
    for (int k = 0; k < 6; ++k) st.push();
    pushed = st.state();
  }
  {
    SimRig rig(GetParam(), delays(seed));
    Step st(rig);
    {
      Graph g = rig.engine.capture([&] { st.push(); });
      for (int k = 0; k < 6; ++k) rig.engine.replay(g);
    }  // the last copy goes while the replays run: each keeps it alive
    replayed = st.state();
  }
  EXPECT_TRUE(pushed == replayed);
}

/// Replays of a graph whose CPU op reads a variable that a GPU op pushed
/// just before each replay wrote (in several delayed host tasks): how many
/// replays read it before that work had finished.
int early_reads(bool profile) {
  Options o = engine_options(EngineKind::per_device);
  o.profile.enabled = profile;  // the replay then pushes its ops one by one
  Engine e(o);
  gpu::Runtime rt(e, gpu::make_sim_backend(delays(seed_from_env(13))));
  Var x = e.new_variable();
  std::vector<int> data(8, 0);
  std::vector<int> seen;
  Graph g = e.capture([&] { e.push_sync([&] { seen.push_back(data.back()); }, Context::cpu(), {x}, {}); });
  int early = 0;
  for (int r = 1; r <= 20; ++r) {
    rt.push([&, r](const Stream& s) {
      for (std::size_t i = 0; i < data.size(); ++i) s.host_task([&, r, i] { data[i] = r; });
    }, Context::gpu(0), {}, {x});
    e.replay(g);
    e.wait_for_all();
    if (seen.back() != r) ++early;
  }
  return early;
}

TEST(GpuCapturedCpuOps, ARecordedCpuOpWaitsForTheGpuWorkPushedBeforeTheReplay) {
  EXPECT_EQ(early_reads(/*profile=*/true), 0) << "profiler on";
  EXPECT_EQ(early_reads(/*profile=*/false), 0) << "profiler off";
}

INSTANTIATE_TEST_SUITE_P(Kinds, GpuCaptured,
                         ::testing::Values(EngineKind::naive, EngineKind::pooled, EngineKind::per_device),
                         [](const auto& p) { return std::string(kind_name(p.param)); });

}  // namespace
}  // namespace ordo::test

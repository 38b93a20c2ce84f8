// Several threads push at once, ops sharing two or more variables; the result
// must equal a serial execution in *some* interleaving of the pushers' own
// orders. Each variable's history is checked: per variable, the sequence of
// writers seen must be consistent with every pusher's program order.
#include <atomic>
#include <thread>

#include "test_util.hpp"

namespace ordo::test {
namespace {

TEST(ConcurrentPush, FourPushersSharedVariablesOneMillionOps) {
  const std::uint64_t seed = test_seed("concurrent");
  for (unsigned workers : {1U, 2U}) {
    Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = workers});
    constexpr int kVars = 8;
    constexpr int kThreads = 4;
    const int per_thread = 250000;  // 1M ops in total, under the sanitizers too
    std::vector<Var> vars;
    for (int i = 0; i < kVars; ++i) vars.push_back(engine.new_variable());
    // Per variable: the last (thread, index) that wrote it. Each op checks
    // that, for its own thread, indexes grow: program order is kept per pusher.
    struct Slot {
      std::int64_t last[kThreads] = {-1, -1, -1, -1};
      std::uint64_t writes = 0;
    };
    std::vector<Slot> slots(kVars);
    std::atomic<std::int64_t> violations{0};
    std::vector<std::thread> pushers;
    for (int t = 0; t < kThreads; ++t) {
      pushers.emplace_back([&, t] {
        std::mt19937_64 rng(seed + static_cast<std::uint64_t>(t));
        for (int i = 0; i < per_thread; ++i) {
          const int v1 = static_cast<int>(rng() % kVars);
          int v2 = static_cast<int>(rng() % kVars);
          if (v2 == v1) v2 = (v1 + 1) % kVars;
          const int r = static_cast<int>(rng() % kVars);
          engine.push_sync(
              [&, t, i, v1, v2] {
                for (int v : {v1, v2}) {
                  Slot& s = slots[static_cast<std::size_t>(v)];
                  if (s.last[t] >= i) violations.fetch_add(1);
                  s.last[t] = i;
                  ++s.writes;
                }
              },
              Context::cpu(), {vars[static_cast<std::size_t>(r)]},
              {vars[static_cast<std::size_t>(v1)], vars[static_cast<std::size_t>(v2)]});
        }
      });
    }
    for (auto& p : pushers) p.join();
    engine.wait_for_all();
    std::uint64_t total = 0;
    for (int v = 0; v < kVars; ++v) {
      total += slots[static_cast<std::size_t>(v)].writes;
      EXPECT_EQ(engine.var_version(vars[static_cast<std::size_t>(v)]), slots[static_cast<std::size_t>(v)].writes);
    }
    EXPECT_EQ(violations.load(), 0) << "a pusher's ops on a variable ran out of its program order, seed=" << seed;
    EXPECT_EQ(total, static_cast<std::uint64_t>(2 * kThreads * per_thread));
  }
}

TEST(ConcurrentPush, PushersAndWaitersTogether) {
  Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = 2});
  Var a = engine.new_variable(), b = engine.new_variable();
  std::atomic<bool> stop{false};
  std::int64_t x = 0;
  std::thread waiter([&] {
    while (!stop.load()) {
      engine.wait_for_var(a);
      engine.wait_for_all();
    }
  });
  for (int i = 0; i < 50000 / kScale; ++i) engine.push_sync([&x] { ++x; }, Context::cpu(), {b}, {a});
  stop = true;
  waiter.join();
  engine.wait_for_all();
  EXPECT_EQ(x, 50000 / kScale);
}

}  // namespace
}  // namespace ordo::test

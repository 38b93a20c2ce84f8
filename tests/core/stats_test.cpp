// tests/core/stats_test.cpp - Engine::stats(): the live counters (ordo/stats.hpp).
#include <atomic>
#include <thread>
#include <chrono>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/test_util.hpp"

namespace ordo::test {
namespace {

const PoolStats* find_pool(const EngineStats& s, const std::string& name) {
  for (const PoolStats& p : s.pools) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

class StatsCounts : public ::testing::TestWithParam<EngineConfig> {};

// A random trace (some ops throw, their dependants are skipped): once the
// engine is idle, every op pushed is counted once as pushed and once as
// completed, and every op that threw once as failed, on every engine kind,
// whichever thread ran or finished it (workers' batches, pushers running
// ops inline, the direct path, async completions from foreign threads).
TEST_P(StatsCounts, EveryOpCountedOnceWhenIdle) {
  const EngineConfig& config = GetParam();
  const std::uint64_t seed = test_seed("stats_counts");
  std::mt19937_64 rng(seed);
  Engine engine(config.options);
  std::vector<Var> vars;
  for (int i = 0; i < 8; ++i) vars.push_back(engine.new_variable());
  std::vector<std::thread> completers;
  std::mutex completers_mutex;
  const int ops = 2000 / kScale;
  int throwing = 0;
  // Snapshots taken all along from another thread: completions never go
  // back, and never run ahead of the pushes.
  std::atomic<bool> done_pushing{false};
  std::uint64_t snapshots = 0;
  std::thread reader([&] {
    std::uint64_t last_completed = 0;
    while (!done_pushing.load(std::memory_order_acquire)) {
      const EngineStats s = engine.stats();
      EXPECT_GE(s.ops_completed, last_completed);
      EXPECT_GE(s.ops_pushed, s.ops_completed);
      last_completed = s.ops_completed;
      ++snapshots;
    }
  });
  for (int i = 0; i < ops; ++i) {
    const Var r = vars[rng() % vars.size()];
    const Var w = vars[rng() % vars.size()];
    const bool fails = rng() % 50 == 0;
    throwing += fails ? 1 : 0;
    OpAttrs attrs{.name = "op", .inline_ok = config.inline_ok};
    if (rng() % 8 == 0) {
      // Async, completed from a thread of its own (a foreign completion).
      engine.push_async(
          [&, fails](RunContext, OnComplete done) {
            std::lock_guard lock(completers_mutex);
            completers.emplace_back([done, fails] {
              if (fails) {
                done(std::make_exception_ptr(std::runtime_error("async op failed")));
              } else {
                done();
              }
            });
          },
          Context::cpu(), {r}, {w}, attrs);
    } else {
      engine.push_sync(
          [fails] {
            if (fails) throw std::runtime_error("op failed");
          },
          Context::cpu(), {r}, {w}, attrs);
    }
  }
  engine.post([] {}, Context::cpu());
  try {
    engine.wait_for_all();
  } catch (const std::exception&) {
    // the failures are what the test counts
  }
  done_pushing.store(true, std::memory_order_release);
  reader.join();
  {
    std::lock_guard lock(completers_mutex);
    for (std::thread& t : completers) t.join();
  }
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.ops_in_flight, 0U);
  EXPECT_EQ(s.ops_pushed, static_cast<std::uint64_t>(ops + 1));
  EXPECT_EQ(s.ops_completed, static_cast<std::uint64_t>(ops + 1));
  // A throwing op whose input was failed is skipped, not run: at most `throwing`.
  EXPECT_LE(s.ops_failed, static_cast<std::uint64_t>(throwing));
  EXPECT_GT(s.uptime_ns, 0);
  if (config.options.kind == EngineKind::naive) {
    EXPECT_TRUE(s.pools.empty() || find_pool(s, "cpu") == nullptr);
  } else {
    const PoolStats* cpu = find_pool(s, "cpu");
    ASSERT_NE(cpu, nullptr);
    EXPECT_EQ(cpu->workers, config.options.cpu_workers);
    EXPECT_EQ(cpu->ready, 0U);
    EXPECT_GE(cpu->idle_ns + cpu->busy_ns, 0);
  }
}

// The failures are counted exactly when no op can be skipped: every op on a
// variable of its own.
TEST_P(StatsCounts, FailuresCountedExactly) {
  Engine engine(GetParam().options);
  const OpAttrs attrs{.name = "failing", .inline_ok = GetParam().inline_ok};
  std::vector<Var> vars;
  for (int i = 0; i < 10; ++i) {
    vars.push_back(engine.new_variable());
    engine.push_sync([i] {
      if (i % 3 == 0) throw std::runtime_error("failing op");
    }, Context::cpu(), {}, {vars.back()}, attrs);
  }
  int observed = 0;
  for (const Var& v : vars) {
    try {
      engine.wait_for_var(v);  // each failure observed once (none reported as unobserved)
    } catch (const std::runtime_error&) {
      ++observed;
    }
  }
  engine.wait_for_all();
  EXPECT_EQ(observed, 4);
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.ops_failed, 4U);
  EXPECT_EQ(s.ops_completed, 20U);  // ten ops, ten waits
  EXPECT_EQ(s.ops_pushed, 20U);
}

INSTANTIATE_TEST_SUITE_P(Engines, StatsCounts, ::testing::ValuesIn(all_engine_configs()), config_name);

// While ops block in their bodies, a snapshot taken from another thread sees
// them in flight, the workers running, and the ops behind them ready; the
// engine is not stopped by it (the ops finish once released).
TEST(StatsLive, SnapshotWhileOpsRun) {
  Engine engine(Options{.kind = EngineKind::pooled, .cpu_workers = 2});
  Gate gate;
  Counter started;
  // Two blockers on variables of their own: one per worker.
  for (int i = 0; i < 2; ++i) {
    engine.push_sync([&] {
      started.arrive();
      gate.wait();
    }, Context::cpu(), {}, {engine.new_variable()}, OpAttrs{.name = "blocker"});
  }
  ASSERT_TRUE(started.wait_for(2));
  // Five more: ready, but no worker is free.
  for (int i = 0; i < 5; ++i) engine.push_sync([] {}, Context::cpu(), {}, {engine.new_variable()});
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.ops_in_flight, 7U);
  EXPECT_EQ(s.ops_pushed, 7U);
  EXPECT_EQ(s.ops_completed, 0U);
  const PoolStats* cpu = find_pool(s, "cpu");
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->workers, 2U);
  EXPECT_EQ(cpu->ready, 5U);
  EXPECT_EQ(cpu->running, 2U);
  gate.open();
  engine.wait_for_all();
  const EngineStats after = engine.stats();
  EXPECT_EQ(after.ops_completed, 7U);
  EXPECT_EQ(after.ops_in_flight, 0U);
  EXPECT_EQ(find_pool(after, "cpu")->ready, 0U);
}

// Idle time grows while the workers have nothing to do, and idle + busy is
// the workers' whole life (within the snapshot's own duration).
TEST(StatsLive, IdleTimeGrowsWhileIdle) {
  Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = 2});
  engine.push_sync([] { busy_for(std::chrono::microseconds(2000)); }, Context::cpu(), {}, {engine.new_variable()});
  engine.wait_for_all();
  const EngineStats a = engine.stats();
  const PoolStats* pa = find_pool(a, "cpu");
  ASSERT_NE(pa, nullptr);
  EXPECT_GT(pa->busy_ns, 0);
  // Poll (not sleep): the idle total must grow as time passes with no work.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::int64_t idle = pa->idle_ns;
  while (idle <= pa->idle_ns && std::chrono::steady_clock::now() < deadline) {
    idle = find_pool(engine.stats(), "cpu")->idle_ns;
  }
  EXPECT_GT(idle, pa->idle_ns);
  const EngineStats b = engine.stats();
  const PoolStats* pb = find_pool(b, "cpu");
  // Both workers were created within the engine's first moments.
  EXPECT_LE(pb->idle_ns + pb->busy_ns, 2 * b.uptime_ns);
  EXPECT_GE(pb->idle_ns + pb->busy_ns, 2 * (b.uptime_ns - std::chrono::nanoseconds(std::chrono::seconds(1)).count()));
}

}  // namespace
}  // namespace ordo::test

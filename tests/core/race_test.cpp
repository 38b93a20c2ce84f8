// Stress tests of the races the API allows: completion called twice from two
// threads, deletion racing pushes, operator deletion racing pushes.
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace ordo::test {
namespace {

TEST(Race, TwoThreadsCompletingTheSameOpExactlyOneWins) {
  Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = 2});
  Var v = engine.new_variable();
  const int rounds = 2000 / kScale;
  std::atomic<int> wins{0}, rejections{0};
  for (int i = 0; i < rounds; ++i) {
    OnComplete saved;
    Counter handed;
    engine.push_async([&](RunContext, OnComplete done) { saved = done; handed.arrive(); }, Context::cpu(), {}, {v});
    ASSERT_TRUE(handed.wait_for(1));
    auto attempt = [&] {
      try {
        saved();
        wins.fetch_add(1);
      } catch (const Error& e) {
        if (e.code() == Errc::double_completion) rejections.fetch_add(1);
      }
    };
    std::thread other(attempt);
    attempt();
    other.join();
    engine.wait_for_var(v);
  }
  EXPECT_EQ(wins.load(), rounds);
  EXPECT_EQ(rejections.load(), rounds);
  EXPECT_EQ(engine.var_version(v), static_cast<std::uint64_t>(rounds));
}

TEST(Race, DeleteVariableRacingPushesFromAnotherThread) {
  Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = 2});
  const int rounds = 300 / kScale;
  for (int r = 0; r < rounds; ++r) {
    Var v = engine.new_variable();
    std::atomic<bool> deleted_ran{false};
    std::atomic<int> ran_after_delete{0}, accepted{0}, rejected{0}, ran{0};
    std::thread pusher([&] {
      for (int i = 0; i < 200; ++i) {
        try {
          engine.push_sync([&] {
            if (deleted_ran.load()) ran_after_delete.fetch_add(1);
            ran.fetch_add(1);
          }, Context::cpu(), {v}, {});
          accepted.fetch_add(1);
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), Errc::deleted_var);
          rejected.fetch_add(1);
        }
      }
    });
    engine.delete_variable([&] { deleted_ran.store(true); }, Context::cpu(), v);
    pusher.join();
    engine.wait_for_all();
    EXPECT_EQ(ran_after_delete.load(), 0) << "an op accepted on a variable ran after its deleter";
    EXPECT_EQ(ran.load(), accepted.load());
    EXPECT_EQ(accepted.load() + rejected.load(), 200);
    EXPECT_TRUE(deleted_ran.load());
  }
}

TEST(Race, DeleteOperatorRacingPushes) {
  Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = 2});
  const int rounds = 300 / kScale;
  for (int r = 0; r < rounds; ++r) {
    Var v = engine.new_variable();
    std::atomic<int> ran{0}, accepted{0};
    Operator op = engine.new_operator([&ran] { ran.fetch_add(1); }, {}, {v});
    std::thread pusher([&] {
      for (int i = 0; i < 200; ++i) {
        try {
          engine.push(op, Context::cpu());
          accepted.fetch_add(1);
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), Errc::deleted_operator);
        }
      }
    });
    engine.delete_operator(op);
    pusher.join();
    engine.wait_for_all();
    EXPECT_EQ(ran.load(), accepted.load());
  }
}

// An operator's callable that knows whether it is still alive: its
// destructor clears `magic`, and `live` counts the instances in existence.
struct Tracked {
  static constexpr std::uint64_t kMagic = 0x0bd0'0bd0'0bd0'0bd0ULL;
  std::atomic<std::uint64_t> magic{kMagic};
  std::atomic<int>* live;
  std::atomic<int>* ran;
  std::atomic<int>* dead_runs;
  Tracked(std::atomic<int>* l, std::atomic<int>* r, std::atomic<int>* d) : live(l), ran(r), dead_runs(d) {
    live->fetch_add(1);
  }
  Tracked(const Tracked& o) : live(o.live), ran(o.ran), dead_runs(o.dead_runs) { live->fetch_add(1); }
  Tracked& operator=(const Tracked&) = delete;
  ~Tracked() {
    magic.store(0);
    live->fetch_sub(1);
  }
  void operator()() const {
    if (magic.load() != kMagic) dead_runs->fetch_add(1);
    // A short body still open when delete_operator comes, now and then.
    for (int i = 0; i < 64; ++i) {
      if (magic.load(std::memory_order_relaxed) != kMagic) break;
    }
    if (magic.load() != kMagic) dead_runs->fetch_add(1);
    ran->fetch_add(1);
  }
};

// Pushes of stale handles race the deletion of their operator and the
// re-use of its record by the next operator, with other variables: a push
// that takes the direct path (no reference held) must either run a live
// body once or throw deleted_operator, never run a destroyed one, and every
// callable is destroyed once its operator is deleted and its pushes done.
TEST(Race, DirectOperatorPushesRacingDeleteAndRecordReuse) {
  for (const EngineKind kind : {EngineKind::naive, EngineKind::per_device}) {
    SCOPED_TRACE(kind == EngineKind::naive ? "naive" : "per_device");
    std::atomic<int> live{0}, ran{0}, dead_runs{0}, accepted{0}, rejected{0};
    {
      Engine engine(Options{.kind = kind, .cpu_workers = 2});
      std::vector<Var> vars;
      for (int i = 0; i < 5; ++i) vars.push_back(engine.new_variable());
      const int operators = 3000 / kScale;
      std::vector<Operator> ops(static_cast<std::size_t>(operators));
      std::atomic<int> published{0};
      std::atomic<bool> done{false};
      auto pusher = [&] {
        while (!done.load(std::memory_order_acquire)) {
          const int k = published.load(std::memory_order_acquire);
          if (k == 0) continue;
          try {
            engine.push(ops[static_cast<std::size_t>(k - 1)], Context::cpu());
            accepted.fetch_add(1);
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), Errc::deleted_operator);
            rejected.fetch_add(1);
          }
        }
      };
      std::thread a(pusher), b(pusher);
      for (int k = 0; k < operators; ++k) {
        const auto u = static_cast<std::size_t>(k);
        // Lists that change from one operator to the next (a stale copy of
        // the previous one names other variables, in another order).
        ops[u] = engine.new_operator(Tracked(&live, &ran, &dead_runs), {vars[u % 2], vars[2 + u % 3]},
                                     {vars[(u + 1) % 5]});
        published.store(k + 1, std::memory_order_release);
        const int seen = accepted.load() + rejected.load();
        while (accepted.load() + rejected.load() < seen + 2) std::this_thread::yield();
        engine.delete_operator(ops[u]);
      }
      done.store(true, std::memory_order_release);
      a.join();
      b.join();
      engine.wait_for_all();
      EXPECT_EQ(live.load(), 0) << "a deleted operator's callable was never destroyed";
    }
    EXPECT_EQ(dead_runs.load(), 0) << "a push ran the body of a destroyed callable";
    EXPECT_EQ(ran.load(), accepted.load());
    EXPECT_GT(rejected.load(), 0);
    EXPECT_EQ(live.load(), 0);
  }
}

// delete_operator from inside the operator's own body, run on the pusher by
// the direct path: the callable outlives its body and is destroyed before the
// push returns; the next push is refused.
TEST(Race, DeleteOperatorInsideItsOwnDirectRun) {
  Engine engine(Options{.kind = EngineKind::naive});
  Var v = engine.new_variable();
  std::atomic<int> live{0}, ran{0}, dead_runs{0};
  Operator self;
  int live_after_delete = -1;
  {
    Tracked body(&live, &ran, &dead_runs);
    self = engine.new_operator(
        [&, body] {
          engine.delete_operator(self);
          live_after_delete = live.load();
          body();
        },
        {}, {v});
  }
  ASSERT_EQ(live.load(), 1);
  engine.push(self, Context::cpu());
  EXPECT_EQ(live_after_delete, 1) << "the callable was destroyed while its body ran";
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(dead_runs.load(), 0);
  EXPECT_EQ(live.load(), 0) << "the deleted operator's callable outlived its last run";
  EXPECT_THROW(engine.push(self, Context::cpu()), Error);
  EXPECT_EQ(engine.var_version(v), 1U);
}

}  // namespace
}  // namespace ordo::test

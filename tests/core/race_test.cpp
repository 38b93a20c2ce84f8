// Stress tests of the races the API allows: completion called twice from two
// threads, deletion racing pushes, operator deletion racing pushes.
#include <atomic>
#include <thread>

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

}  // namespace
}  // namespace ordo::test

// Cancellation of co_await ordo::push through a std::stop_token, and
// resume_on(executor): where the awaiting coroutine continues.
#include <deque>
#include <functional>
#include <stop_token>
#include <string>
#include <vector>

#include "coro_test_util.hpp"

namespace ordo::test {
namespace {

static_assert(Executor<ThreadExecutor>);

/// An async op on `x` that holds it until release() (works on every engine,
/// naive included: the body returns at once and keeps its OnComplete).
class Blocker {
 public:
  Blocker(Engine& engine, Var x, std::vector<std::string>* log = nullptr) {
    engine.push_async(
        [this, log](RunContext, OnComplete done) {
          if (log != nullptr) log->push_back("blocker");
          done_ = done;
          running_.open();
        },
        Context::cpu(), {}, {x});
  }
  void release() {
    EXPECT_TRUE(running_.wait()) << "the blocker never ran";
    done_();
  }

 private:
  Gate running_;
  OnComplete done_;
};

class CoroCancel : public ::testing::TestWithParam<EngineConfig> {};

TEST_P(CoroCancel, CancelBeforeGrantResumesAtOnceAndTheOpStillCompletesInOrder) {
  Engine engine(GetParam().options);
  Var x = engine.new_variable();
  std::vector<std::string> log;  // appended by ops on x only: ordered by the engine
  Blocker blocker(engine, x, &log);
  std::stop_source stop;
  std::atomic<int> cancelled{0};
  std::atomic<bool> user_code_ran{false};
  AsyncScope scope;
  auto lease_task = [&]() -> Task<void> {
    try {
      Lease l = co_await push(engine, reads(), writes(x), Context::cpu(), {.name = "held-back"}, stop.get_token());
      user_code_ran = true;
    } catch (const CancelledError& e) {
      EXPECT_EQ(e.code(), Errc::cancelled);
      EXPECT_NE(std::string(e.what()).find("held-back"), std::string::npos) << e.what();
      cancelled.fetch_add(1);
    }
  };
  auto fn_task = [&]() -> Task<void> {
    try {
      co_await push(engine, reads(x), writes(), [&] { user_code_ran = true; }, stop.get_token());
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::cancelled);
      cancelled.fetch_add(1);
    }
  };
  auto wait_task = [&]() -> Task<void> {
    EXPECT_THROW(co_await wait_for(engine, x, stop.get_token()), CancelledError);
    cancelled.fetch_add(1);
  };
  scope.spawn(lease_task());
  scope.spawn(fn_task());
  scope.spawn(wait_task());
  stop.request_stop();  // resumes all three here, before their ops are granted
  EXPECT_EQ(cancelled.load(), 3) << "cancellation should resume the coroutines at once";
  scope.sync_join();
  // A token stopped before the push: the co_await throws without suspending.
  auto late = [&]() -> Task<void> {
    EXPECT_THROW(co_await push(engine, reads(), writes(x), stop.get_token()), CancelledError);
  };
  run_bounded(late());
  engine.push_sync([&] { log.push_back("after"); }, Context::cpu(), {}, {x});
  blocker.release();
  EXPECT_NO_THROW(bounded_wait(engine, x)) << "a cancelled op stores no error";
  EXPECT_EQ(log, (std::vector<std::string>{"blocker", "after"}));
  EXPECT_FALSE(user_code_ran.load());
  EXPECT_EQ(engine.var_version(x), 4U) << "blocker, the two cancelled writers (as no-ops), after";
}

TEST_P(CoroCancel, StopAfterTheGrantHasNoEffect) {
  Engine engine(GetParam().options);
  Var x = engine.new_variable();
  int value = 0;
  auto task = [&]() -> Task<int> {
    std::stop_source s1;
    Lease l = co_await push(engine, reads(), writes(x), s1.get_token());
    s1.request_stop();
    EXPECT_TRUE(l.held());
    value = 5;
    l.release();
    std::stop_source s2;
    const int got = co_await push(
        engine, reads(x), writes(),
        [&] {
          s2.request_stop();  // while fn runs: too late to cancel
          return value + 1;
        },
        s2.get_token());
    co_return got;
  };
  EXPECT_EQ(run_bounded(task()), 6);
  EXPECT_NO_THROW(bounded_wait(engine, x));
}

TEST_P(CoroCancel, CancelRacingTheGrant) {
  Engine engine(GetParam().options);
  constexpr int kOps = 32;
  const int rounds = 24 / kScale;
  std::vector<Var> vars;
  for (int k = 0; k < kOps; ++k) vars.push_back(engine.new_variable());
  std::atomic<int> granted{0};
  std::atomic<int> cancelled{0};
  // Defined once, outside the loop: a coroutine lambda must outlive its coroutines.
  auto task = [&](Var x, std::vector<int>* lg, std::stop_token tok, bool fn_form) -> Task<void> {
    try {
      if (fn_form) {
        co_await push(engine, reads(), writes(x), [lg] { lg->push_back(2); }, tok);
      } else {
        Lease l = co_await push(engine, reads(), writes(x), tok);
        lg->push_back(2);
      }
      granted.fetch_add(1);
    } catch (const CancelledError&) {
      cancelled.fetch_add(1);
    }
  };
  AsyncScope scope;
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::vector<int>> logs(kOps);  // logs[k]: ops on vars[k], in the order they ran
    std::vector<std::unique_ptr<Blocker>> blockers;
    std::vector<std::stop_source> stops(kOps);
    for (int k = 0; k < kOps; ++k) {
      Var x = vars[k];
      std::vector<int>* lg = &logs[k];
      engine.push_sync([lg] { lg->push_back(1); }, Context::cpu(), {}, {x});
      blockers.push_back(std::make_unique<Blocker>(engine, x));
      scope.spawn(task(x, lg, stops[k].get_token(), k % 2 == 1));
      engine.push_sync([lg] { lg->push_back(3); }, Context::cpu(), {}, {x});
    }
    std::atomic<bool> go{false};
    std::thread stopper([&] {
      while (!go.load(std::memory_order_acquire)) {
      }
      for (auto& s : stops) s.request_stop();
    });
    go.store(true, std::memory_order_release);
    for (auto& b : blockers) b->release();
    stopper.join();
    scope.sync_join();
    for (int k = 0; k < kOps; ++k) {
      EXPECT_NO_THROW(bounded_wait(engine, vars[k]));
      const std::vector<int>& lg = logs[k];
      EXPECT_TRUE(lg == (std::vector<int>{1, 3}) || lg == (std::vector<int>{1, 2, 3})) << "var " << k;
    }
  }
  EXPECT_EQ(granted.load() + cancelled.load(), kOps * rounds);
  EXPECT_EQ(engine.var_version(vars[0]), static_cast<std::uint64_t>(4 * rounds));
  std::printf("[          ] %d granted, %d cancelled\n", granted.load(), cancelled.load());
}

TEST_P(CoroCancel, ResumeOnAnExecutor) {
  Engine engine(GetParam().options);
  Var x = engine.new_variable();
  Var y = engine.new_variable();
  ThreadExecutor ex;
  auto task = [&]() -> Task<int> {
    Lease l = co_await push(engine, reads(), writes(x)).resume_on(ex);
    EXPECT_EQ(std::this_thread::get_id(), ex.id());
    EXPECT_TRUE(l.held());
    l.release();
    const int v = co_await push(engine, reads(x), writes(), [] { return 3; }).resume_on(ex);
    EXPECT_EQ(std::this_thread::get_id(), ex.id());
    // Granted before the co_await (a free FnProperty::async op runs inline in
    // push): still continues on the executor.
    auto early = push(engine, reads(), writes(y), Context::cpu(), {.prop = FnProperty::async});
    Lease l2 = co_await early.resume_on(ex);
    EXPECT_EQ(std::this_thread::get_id(), ex.id());
    co_return v;
  };
  EXPECT_EQ(run_bounded(task()), 3);
  EXPECT_GE(ex.ran(), 3);
  // Cancellation with resume_on: the coroutine continues on the executor too.
  Blocker blocker(engine, x);
  std::stop_source stop;
  std::atomic<bool> on_executor{false};
  AsyncScope scope;
  auto cancelled = [&]() -> Task<void> {
    try {
      co_await push(engine, reads(), writes(x), stop.get_token()).resume_on(ex);
    } catch (const CancelledError&) {
      on_executor = std::this_thread::get_id() == ex.id();
    }
  };
  scope.spawn(cancelled());
  stop.request_stop();
  scope.sync_join();
  EXPECT_TRUE(on_executor.load());
  blocker.release();
  EXPECT_NO_THROW(bounded_wait(engine, x));
}

INSTANTIATE_TEST_SUITE_P(Engines, CoroCancel, ::testing::ValuesIn(all_engine_configs()), config_name);

}  // namespace
}  // namespace ordo::test

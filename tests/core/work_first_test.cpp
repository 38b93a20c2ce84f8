// Work first (Options::inline_below_ns): a ready sync CPU op runs on its
// pusher while the engine's timed CPU ops are short, and goes to a worker
// otherwise. The engine's first 8 ops are timed, then one in 16 per thread;
// until one has been timed, ops go to the workers.
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <future>
#include <thread>

#include "test_util.hpp"

namespace ordo::test {
namespace {

using Clock = std::chrono::steady_clock;

struct Kind {
  std::string label;
  EngineKind kind;
};

class WorkFirst : public ::testing::TestWithParam<Kind> {
 protected:
  /// One CPU worker: the first op runs there and is timed.
  Options options(unsigned inline_below_ns) const {
    Options o;
    o.kind = GetParam().kind;
    o.cpu_workers = 1;
    o.inline_below_ns = inline_below_ns;
    return o;
  }
};

void busy_for(std::chrono::microseconds d) {
  const auto end = Clock::now() + d;
  while (Clock::now() < end) {
  }
}

/// Pushes one op on `v` that records where it ran; returns whether it had
/// already run on this thread when push returned.
bool ran_inline(Engine& engine, Var v, std::chrono::microseconds work = {}) {
  const auto me = std::this_thread::get_id();
  std::atomic<bool> here{false};
  std::atomic<int> worker{-2};
  engine.push_sync(
      [&](RunContext rc) {
        busy_for(work);
        worker.store(rc.worker);
        here.store(std::this_thread::get_id() == me);
      },
      Context::cpu(), {}, {v});
  const bool done_in_push = here.load();
  engine.wait_for_all();
  if (done_in_push) {
    EXPECT_EQ(worker.load(), -1) << "an op run on its pusher must see RunContext::worker == -1";
  }
  EXPECT_TRUE(done_in_push || !here.load()) << "the op ran on the pushing thread after push returned";
  return done_in_push;
}

/// With a bound no op reaches: after a few ops the next one runs in its push.
bool runs_inline_after_warm_up(Engine& engine, Var v) {
  for (int i = 0; i < 17; ++i) ran_inline(engine, v);
  return ran_inline(engine, v);
}

TEST_P(WorkFirst, ShortReadyOpRunsOnThePusherOnceTimed) {
  Engine engine(options(UINT_MAX));  // every timed op counts as short
  Var v = engine.new_variable();
  // Nothing timed yet: the first op goes to the worker, which times it.
  EXPECT_FALSE(ran_inline(engine, v)) << "the first op ran before any op was timed";
  for (int i = 0; i < 40; ++i) EXPECT_TRUE(ran_inline(engine, v)) << "op " << i + 1;
}

TEST_P(WorkFirst, ZeroNeverRunsOnThePusher) {
  Engine engine(options(0));
  Var v = engine.new_variable();
  for (int i = 0; i < 200; ++i) ASSERT_FALSE(ran_inline(engine, v)) << "op " << i;
}

TEST_P(WorkFirst, OpsLongerThanTheBoundGoToWorkers) {
  Engine engine(options(1));  // 1 ns: no op is that short
  Var v = engine.new_variable();
  for (int i = 0; i < 200; ++i) ASSERT_FALSE(ran_inline(engine, v)) << "op " << i;
}

TEST_P(WorkFirst, AnOpThatIsNotReadyIsNeverRunByThePush) {
  Engine engine(options(UINT_MAX));
  Var v = engine.new_variable();
  ASSERT_TRUE(runs_inline_after_warm_up(engine, v));
  // An async op holds v; the op pushed behind it must not run in the push,
  // nor on this thread later (it is made ready by a completion here).
  std::promise<OnComplete> held;
  engine.push_async([&](RunContext, OnComplete done) { held.set_value(std::move(done)); }, Context::cpu(), {}, {v});
  OnComplete release_v = held.get_future().get();
  const auto me = std::this_thread::get_id();
  std::atomic<bool> ran{false}, here{false};
  engine.push_sync([&] {
    here.store(std::this_thread::get_id() == me);
    ran.store(true);
  }, Context::cpu(), {}, {v});
  EXPECT_FALSE(ran.load()) << "an op waiting for v ran in push";
  release_v();
  engine.wait_for_all();
  EXPECT_TRUE(ran.load());
  EXPECT_FALSE(here.load()) << "made ready by a completion on a foreign thread, it must go to a worker";
}

TEST_P(WorkFirst, OnlyNormalSyncCpuOpsRunOnThePusher) {
  Engine engine(options(UINT_MAX));
  Var v = engine.new_variable();
  ASSERT_TRUE(runs_inline_after_warm_up(engine, v));
  const auto me = std::this_thread::get_id();
  std::atomic<int> on_pusher{0};
  auto body = [&] {
    if (std::this_thread::get_id() == me) on_pusher.fetch_add(1);
  };
  if (GetParam().kind == EngineKind::per_device) {
    engine.push_sync(body, Context::cpu(), {}, {v}, {.prop = FnProperty::cpu_prioritized});
  }
  engine.push_sync(body, Context::cpu(), {}, {v}, {.prop = FnProperty::copy_to_device});
  engine.post(body);
  engine.wait_for_all();
  EXPECT_EQ(on_pusher.load(), 0);
}

TEST_P(WorkFirst, SwitchesToWorkersWhenOpsGetLongAndBack) {
  // 20 us: ops that busy-wait 200 us are always longer, empty ones shorter
  // even on a loaded sanitizer build (a timed outlier is clamped, and the
  // average forgets it within a few samples).
  Engine engine(options(20'000));
  Var v = engine.new_variable();
  int pushes = 0;
  while (!ran_inline(engine, v)) ASSERT_LT(++pushes, 5000) << "short ops never ran on the pusher";
  pushes = 0;
  while (ran_inline(engine, v, std::chrono::microseconds(200))) {
    ASSERT_LT(++pushes, 1000) << "long ops kept running on the pusher";
  }
  pushes = 0;
  while (!ran_inline(engine, v)) ASSERT_LT(++pushes, 5000) << "short ops never came back to the pusher";
}

TEST_P(WorkFirst, ExceptionOfAnInlineOpTravelsAsUsual) {
  Engine engine(options(UINT_MAX));
  Var v = engine.new_variable();
  ASSERT_TRUE(runs_inline_after_warm_up(engine, v));
  const auto me = std::this_thread::get_id();
  std::atomic<bool> here{false};
  EXPECT_NO_THROW(engine.push_sync([&] {
    here.store(std::this_thread::get_id() == me);
    throw std::runtime_error("inline failure");
  }, Context::cpu(), {}, {v}, {.name = "thrower"}));
  EXPECT_TRUE(here.load()) << "the failing op did not run on the pusher";
  try {
    engine.wait_for_var(v);
    FAIL() << "wait_for_var did not rethrow";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "inline failure");
  }
}

TEST_P(WorkFirst, WaitInsideAnInlineOpIsTheUsualError) {
  Engine engine(options(UINT_MAX));
  Var v = engine.new_variable();
  ASSERT_TRUE(runs_inline_after_warm_up(engine, v));
  std::atomic<int> code{-1};
  engine.push_sync([&] {
    try {
      engine.wait_for_all();
    } catch (const Error& e) {
      code.store(static_cast<int>(e.code()));
    }
  }, Context::cpu(), {}, {v});
  engine.wait_for_all();
  EXPECT_EQ(code.load(), static_cast<int>(Errc::wait_inside_op));
}

TEST(WorkFirstOptions, FromEnvReadsTheBound) {
  ::setenv("ORDO_INLINE_BELOW_NS", "0", 1);
  EXPECT_EQ(Options::from_env().inline_below_ns, 0U);
  ::setenv("ORDO_INLINE_BELOW_NS", "2500", 1);
  EXPECT_EQ(Options::from_env().inline_below_ns, 2500U);
  ::setenv("ORDO_INLINE_BELOW_NS", "fast", 1);
  try {
    (void)Options::from_env();
    ADD_FAILURE() << "a malformed ORDO_INLINE_BELOW_NS was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("ORDO_INLINE_BELOW_NS"), std::string::npos) << e.what();
  }
  ::unsetenv("ORDO_INLINE_BELOW_NS");
  EXPECT_EQ(Options::from_env().inline_below_ns, Options{}.inline_below_ns);
}

INSTANTIATE_TEST_SUITE_P(Engines, WorkFirst,
                         ::testing::Values(Kind{"pooled", EngineKind::pooled},
                                           Kind{"per_device", EngineKind::per_device}),
                         [](const ::testing::TestParamInfo<Kind>& p) { return p.param.label; });

}  // namespace
}  // namespace ordo::test

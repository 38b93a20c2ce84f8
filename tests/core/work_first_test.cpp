// Work first (Options::inline_below_ns): a ready sync CPU op runs on its
// pusher while the engine's timed CPU ops are short, and goes to a worker
// otherwise. The engine's first 8 ops are timed, then one in 16 per thread;
// until one has been timed, ops go to the workers.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <future>
#include <memory>
#include <span>
#include <stdexcept>
#include <vector>
#include <thread>

#include "test_util.hpp"

namespace ordo::test {
namespace {

class WorkFirst : public ::testing::TestWithParam<ThreadedKind> {
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

/// The same on a variable of its own: the engine's ops are timed as short.
bool warmed_up(Engine& engine) { return runs_inline_after_warm_up(engine, engine.new_variable()); }

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

// The direct path (detail::DirectRun): a short op whose variables are free
// runs on its pusher without an op record. It must keep every rule of a
// queued op: versions, errors in and out, reads shared, writes exclusive.

TEST_P(WorkFirst, DirectOpsKeepVersionsAndCarryErrorsLikeQueuedOnes) {
  Engine engine(options(UINT_MAX));
  ASSERT_TRUE(warmed_up(engine));
  Var in = engine.new_variable();
  Var out = engine.new_variable();
  Var next = engine.new_variable();
  const auto me = std::this_thread::get_id();
  std::atomic<bool> failer_here{false};
  engine.push_sync([&] {
    failer_here.store(std::this_thread::get_id() == me);
    throw std::runtime_error("direct failure");
  }, Context::cpu(), {in}, {out}, {.name = "failer"});
  EXPECT_TRUE(failer_here.load()) << "the failing op did not run in its push";
  EXPECT_EQ(engine.var_version(out), 1U) << "a failed write is a write";
  EXPECT_EQ(engine.var_version(in), 0U) << "a read is not";
  // `out` carries the error: an op reading it is skipped (its body is never
  // called) and passes the error on to what it writes.
  std::atomic<bool> called{false};
  engine.push_sync([&] { called.store(true); }, Context::cpu(), {out}, {next});
  EXPECT_THROW(engine.wait_for_all(), std::runtime_error);  // the failure, once
  EXPECT_FALSE(called.load()) << "an op reading a failed variable ran";
  EXPECT_EQ(engine.var_version(next), 1U) << "a skipped write is a write";
}

TEST_P(WorkFirst, DirectErrorReachesWaitForVarThroughASkippedOp) {
  Engine engine(options(UINT_MAX));
  ASSERT_TRUE(warmed_up(engine));
  Var a = engine.new_variable();
  Var b = engine.new_variable();
  engine.push_sync([] { throw std::runtime_error("first"); }, Context::cpu(), {}, {a});
  engine.push_sync([] {}, Context::cpu(), {a}, {b});
  try {
    engine.wait_for_var(b);
    FAIL() << "wait_for_var(b) did not rethrow the error that reached b";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "first");
  }
}

TEST_P(WorkFirst, DirectReadSharesAVariableAWriteWaitsForItsReaders) {
  Engine engine(options(UINT_MAX));
  ASSERT_TRUE(warmed_up(engine));
  Var r = engine.new_variable();
  // An async op reads r and holds its read until we complete it.
  std::promise<OnComplete> held;
  engine.push_async([&](RunContext, OnComplete done) { held.set_value(done); }, Context::cpu(), {r}, {});
  OnComplete done = held.get_future().get();
  // Another read of r is granted beside it: it runs in its push.
  const auto me = std::this_thread::get_id();
  std::atomic<bool> reader_here{false};
  engine.push_sync([&] { reader_here.store(std::this_thread::get_id() == me); }, Context::cpu(), {r}, {});
  EXPECT_TRUE(reader_here.load()) << "a read beside a running read did not run in its push";
  // A write of r must wait for the async reader: not in its push.
  std::atomic<bool> wrote{false};
  engine.push_sync([&] { wrote.store(true); }, Context::cpu(), {}, {r});
  EXPECT_FALSE(wrote.load()) << "a write ran while a read of its variable was running";
  done();
  engine.wait_for_var(r);
  EXPECT_TRUE(wrote.load());
  EXPECT_EQ(engine.var_version(r), 1U);
}

TEST_P(WorkFirst, PreBuiltOperatorRunsOnThePusherAndFailsAsUsual) {
  Engine engine(options(UINT_MAX));
  ASSERT_TRUE(warmed_up(engine));
  Var v = engine.new_variable();
  const auto me = std::this_thread::get_id();
  std::atomic<int> runs{0};
  std::atomic<bool> here{true};
  std::atomic<int> worker{-2};
  std::atomic<bool> fail{false};
  Operator op = engine.new_operator([&](RunContext rc) {
    runs.fetch_add(1);
    worker.store(rc.worker);
    if (std::this_thread::get_id() != me) here.store(false);
    if (fail.load()) throw std::runtime_error("operator failure");
  }, {}, {v}, {.name = "op"});
  for (int i = 0; i < 20; ++i) engine.push(op, Context::cpu());
  EXPECT_EQ(runs.load(), 20) << "an operator push did not run in the push";
  EXPECT_TRUE(here.load());
  EXPECT_EQ(worker.load(), -1);
  fail.store(true);
  engine.push(op, Context::cpu());
  EXPECT_EQ(engine.var_version(v), 21U);
  try {
    engine.wait_for_var(v);
    FAIL() << "wait_for_var did not rethrow the operator's failure";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "operator failure");
  }
  engine.delete_operator(op);
  try {
    engine.push(op, Context::cpu());
    FAIL() << "a push of a deleted operator was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::deleted_operator);
  }
}

TEST_P(WorkFirst, OpsOfManyVariablesAndLvalueBodiesRunInTheirPushAsCopies) {
  Engine engine(options(UINT_MAX));
  ASSERT_TRUE(warmed_up(engine));
  // More variables than the direct path takes (detail::DirectRun::kMaxAccess):
  // the usual push, which still runs it here.
  std::vector<Var> many;
  for (int i = 0; i < 12; ++i) many.push_back(engine.new_variable());
  std::atomic<bool> ran{false};
  engine.push_sync([&] { ran.store(true); }, Context::cpu(), std::span(many).first(6),
                   std::span(many).subspan(6));
  EXPECT_TRUE(ran.load()) << "a short op of 12 variables did not run in its push";
  // A mutable body handed over as an lvalue, const or not: each push runs
  // its own copy, as a queued push does; the caller's object is untouched.
  int seen = 0;
  const auto body = [&seen, calls = 0]() mutable { seen = ++calls; };
  engine.push_sync(body, Context::cpu(), {}, {many[0]});
  engine.push_sync(body, Context::cpu(), {}, {many[0]});
  engine.wait_for_all();
  EXPECT_EQ(seen, 1) << "each push runs its own copy of the body";
  auto counter = [&seen, calls = 0]() mutable { seen = ++calls; };
  engine.push_sync(counter, Context::cpu(), {}, {many[0]});
  engine.push_sync(counter, Context::cpu(), {}, {many[0]});
  EXPECT_EQ(seen, 1) << "each push runs its own copy of the body";
  counter();
  EXPECT_EQ(seen, 1) << "a push called the caller's own body object";
  // A move-only body runs in place.
  auto owned = std::make_unique<int>(7);
  engine.push_sync([p = std::move(owned), &seen] { seen = *p; }, Context::cpu(), {}, {many[1]});
  engine.wait_for_all();
  EXPECT_EQ(seen, 7);
}

TEST_P(WorkFirst, AVariableListedTwiceCountsOnceAsWritten) {
  Engine engine(options(UINT_MAX));
  ASSERT_TRUE(warmed_up(engine));
  Var v = engine.new_variable();
  Var w = engine.new_variable();
  const auto me = std::this_thread::get_id();
  std::atomic<int> runs{0};
  std::atomic<bool> here{true};
  auto body = [&] {
    runs.fetch_add(1);
    if (std::this_thread::get_id() != me) here.store(false);
  };
  engine.push_sync(body, Context::cpu(), {v}, {v});           // read and write
  engine.push_sync(body, Context::cpu(), {}, {w, v, w});      // a write twice
  engine.push_sync(body, Context::cpu(), {w, w, v, w}, {});   // reads only
  EXPECT_EQ(runs.load(), 3) << "an op with a variable listed twice did not run in its push";
  EXPECT_TRUE(here.load());
  EXPECT_EQ(engine.var_version(v), 2U);
  EXPECT_EQ(engine.var_version(w), 1U);
  engine.wait_for_all();
}

TEST_P(WorkFirst, ShortOpsQueuedBehindALongOneHoldThePusherAtAShortWindow) {
  // While ops are short a pusher is held back at 256 ops in flight
  // (EngineCore::window), not max_in_flight, and waits for a full drain: a
  // chain queued behind a worker's op then comes back to the pusher instead
  // of following the worker op by op.
  Engine engine(options(UINT_MAX));  // every timed op counts as short
  ASSERT_TRUE(warmed_up(engine));
  Var v = engine.new_variable();
  // A long op (timed busy work, no waiting on this thread) holds v on a
  // worker; cpu_prioritized, so that it is not timed and ops stay short.
  std::atomic<bool> started{false};
  engine.push_sync([&] {
    started.store(true);
    busy_for(std::chrono::milliseconds(20));
  }, Context::cpu(), {}, {v}, {.prop = FnProperty::cpu_prioritized});
  constexpr int kOps = 1000;
  const auto me = std::this_thread::get_id();
  std::vector<char> in_push(kOps, 0);
  int pushing = -1;  // the op being pushed; written only by this thread
  std::uint64_t chain = 0;
  std::size_t most_in_flight = 0;
  for (int i = 0; i < kOps; ++i) {
    pushing = i;
    engine.push_sync([&, i] {
      chain = chain * 31 + static_cast<std::uint64_t>(i);
      in_push[i] = std::this_thread::get_id() == me && pushing == i ? 1 : 0;
    }, Context::cpu(), {}, {v});
    most_in_flight = std::max(most_in_flight, engine.in_flight());
  }
  engine.wait_for_all();
  EXPECT_LE(most_in_flight, 257U) << "a pusher of short ops ran past the short window";
  int offloaded = 0;
  for (int i = kOps / 2; i < kOps; ++i) offloaded += in_push[i] == 0 ? 1 : 0;
  EXPECT_EQ(offloaded, 0) << "after the drain, ops of the chain still went to the worker";
  std::uint64_t expect = 0;
  for (int i = 0; i < kOps; ++i) expect = expect * 31 + static_cast<std::uint64_t>(i);
  EXPECT_EQ(chain, expect);
}

/// A body whose copy throws once `armed` is set (a queued push copies an
/// lvalue body into the op; so does the direct path, before it grants).
struct ThrowsOnCopy {
  std::atomic<bool>* armed;
  std::atomic<int>* calls;
  ThrowsOnCopy(std::atomic<bool>* a, std::atomic<int>* c) : armed(a), calls(c) {}
  ThrowsOnCopy(const ThrowsOnCopy& o) : armed(o.armed), calls(o.calls) {
    if (armed->load()) throw std::runtime_error("copy failed");
  }
  ThrowsOnCopy(ThrowsOnCopy&&) noexcept = default;
  void operator()() const { calls->fetch_add(1); }
};

TEST_P(WorkFirst, ABodyWhoseCopyThrowsFailsThePushNotTheOp) {
  Engine engine(options(UINT_MAX));
  ASSERT_TRUE(warmed_up(engine));
  Var v = engine.new_variable();
  std::atomic<bool> armed{false};
  std::atomic<int> calls{0};
  const ThrowsOnCopy body(&armed, &calls);
  engine.push_sync(body, Context::cpu(), {}, {v});
  EXPECT_EQ(calls.load(), 1);
  armed.store(true);
  EXPECT_THROW(engine.push_sync(body, Context::cpu(), {}, {v}), std::runtime_error);
  EXPECT_EQ(calls.load(), 1) << "the body of a push that threw ran";
  EXPECT_EQ(engine.var_version(v), 1U) << "a push that threw counted as a write";
  EXPECT_EQ(engine.pending_errors(), 0U) << "a push that threw left an op error";
  engine.push_sync(ThrowsOnCopy(&armed, &calls), Context::cpu(), {}, {v});  // moved, not copied
  EXPECT_EQ(calls.load(), 2);
  EXPECT_NO_THROW(engine.wait_for_var(v));
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

INSTANTIATE_TEST_SUITE_P(Engines, WorkFirst, threaded_kinds(), threaded_kind_name);

}  // namespace
}  // namespace ordo::test

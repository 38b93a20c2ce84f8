// OpAttrs::inline_ok: an op that says it is short and never blocks runs on
// its pusher when it is ready at push (the only way a push runs a body), and
// keeps every rule of a queued op. tests/core/placement_test.cpp checks that
// no other op ever does.
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

class InlineOk : public ::testing::TestWithParam<ThreadedKind> {
 protected:
  Options options() const {
    Options o;
    o.kind = GetParam().kind;
    o.cpu_workers = 1;
    return o;
  }
};

constexpr OpAttrs kInline{.inline_ok = true};

/// Pushes one op on `v` that records where it ran; returns whether it had
/// already run on this thread when push returned.
bool ran_inline(Engine& engine, Var v, OpAttrs attrs) {
  const auto me = std::this_thread::get_id();
  std::atomic<bool> here{false};
  std::atomic<int> worker{-2};
  engine.push_sync(
      [&](RunContext rc) {
        worker.store(rc.worker);
        here.store(std::this_thread::get_id() == me);
      },
      Context::cpu(), {}, {v}, attrs);
  const bool done_in_push = here.load();
  engine.wait_for_all();
  if (done_in_push) {
    EXPECT_EQ(worker.load(), -1) << "an op run on its pusher must see RunContext::worker == -1";
  }
  EXPECT_TRUE(done_in_push || !here.load()) << "the op ran on the pushing thread after push returned";
  return done_in_push;
}

TEST_P(InlineOk, AReadyOpRunsOnItsPusherOnlyWithTheFlag) {
  Engine engine(options());
  Var v = engine.new_variable();
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(ran_inline(engine, v, kInline)) << "op " << i;
    ASSERT_FALSE(ran_inline(engine, v, {})) << "op " << i;
  }
}

TEST_P(InlineOk, AnOpThatIsNotReadyIsNeverRunByThePush) {
  Engine engine(options());
  Var v = engine.new_variable();
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
  }, Context::cpu(), {}, {v}, kInline);
  EXPECT_FALSE(ran.load()) << "an op waiting for v ran in push";
  release_v();
  engine.wait_for_all();
  EXPECT_TRUE(ran.load());
  EXPECT_FALSE(here.load()) << "made ready by a completion on a foreign thread, it must go to a worker";
}

TEST_P(InlineOk, ExceptionOfAnInlineOpTravelsAsUsual) {
  Engine engine(options());
  Var v = engine.new_variable();
  const auto me = std::this_thread::get_id();
  std::atomic<bool> here{false};
  EXPECT_NO_THROW(engine.push_sync([&] {
    here.store(std::this_thread::get_id() == me);
    throw std::runtime_error("inline failure");
  }, Context::cpu(), {}, {v}, {.name = "thrower", .inline_ok = true}));
  EXPECT_TRUE(here.load()) << "the failing op did not run on the pusher";
  try {
    engine.wait_for_var(v);
    FAIL() << "wait_for_var did not rethrow";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "inline failure");
  }
}

TEST_P(InlineOk, WaitInsideAnInlineOpIsTheUsualError) {
  Engine engine(options());
  Var v = engine.new_variable();
  std::atomic<int> code{-1};
  engine.push_sync([&] {
    try {
      engine.wait_for_all();
    } catch (const Error& e) {
      code.store(static_cast<int>(e.code()));
    }
  }, Context::cpu(), {}, {v}, kInline);
  engine.wait_for_all();
  EXPECT_EQ(code.load(), static_cast<int>(Errc::wait_inside_op));
}

// The direct path (detail::DirectRun): a short op whose variables are free
// runs on its pusher without an op record. It must keep every rule of a
// queued op: versions, errors in and out, reads shared, writes exclusive.

TEST_P(InlineOk, DirectOpsKeepVersionsAndCarryErrorsLikeQueuedOnes) {
  Engine engine(options());
  Var in = engine.new_variable();
  Var out = engine.new_variable();
  Var next = engine.new_variable();
  const auto me = std::this_thread::get_id();
  std::atomic<bool> failer_here{false};
  engine.push_sync([&] {
    failer_here.store(std::this_thread::get_id() == me);
    throw std::runtime_error("direct failure");
  }, Context::cpu(), {in}, {out}, {.name = "failer", .inline_ok = true});
  EXPECT_TRUE(failer_here.load()) << "the failing op did not run in its push";
  EXPECT_EQ(engine.var_version(out), 1U) << "a failed write is a write";
  EXPECT_EQ(engine.var_version(in), 0U) << "a read is not";
  // `out` carries the error: an op reading it is skipped (its body is never
  // called) and passes the error on to what it writes.
  std::atomic<bool> called{false};
  engine.push_sync([&] { called.store(true); }, Context::cpu(), {out}, {next}, kInline);
  EXPECT_THROW(engine.wait_for_all(), std::runtime_error);  // the failure, once
  EXPECT_FALSE(called.load()) << "an op reading a failed variable ran";
  EXPECT_EQ(engine.var_version(next), 1U) << "a skipped write is a write";
}

TEST_P(InlineOk, DirectErrorReachesWaitForVarThroughASkippedOp) {
  Engine engine(options());
  Var a = engine.new_variable();
  Var b = engine.new_variable();
  engine.push_sync([] { throw std::runtime_error("first"); }, Context::cpu(), {}, {a}, kInline);
  engine.push_sync([] {}, Context::cpu(), {a}, {b}, kInline);
  try {
    engine.wait_for_var(b);
    FAIL() << "wait_for_var(b) did not rethrow the error that reached b";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "first");
  }
}

TEST_P(InlineOk, DirectReadSharesAVariableAWriteWaitsForItsReaders) {
  Engine engine(options());
  Var r = engine.new_variable();
  // An async op reads r and holds its read until we complete it.
  std::promise<OnComplete> held;
  engine.push_async([&](RunContext, OnComplete done) { held.set_value(done); }, Context::cpu(), {r}, {});
  OnComplete done = held.get_future().get();
  // Another read of r is granted beside it: it runs in its push.
  const auto me = std::this_thread::get_id();
  std::atomic<bool> reader_here{false};
  engine.push_sync([&] { reader_here.store(std::this_thread::get_id() == me); }, Context::cpu(), {r}, {}, kInline);
  EXPECT_TRUE(reader_here.load()) << "a read beside a running read did not run in its push";
  // A write of r must wait for the async reader: not in its push.
  std::atomic<bool> wrote{false};
  engine.push_sync([&] { wrote.store(true); }, Context::cpu(), {}, {r}, kInline);
  EXPECT_FALSE(wrote.load()) << "a write ran while a read of its variable was running";
  done();
  engine.wait_for_var(r);
  EXPECT_TRUE(wrote.load());
  EXPECT_EQ(engine.var_version(r), 1U);
}

TEST_P(InlineOk, PreBuiltOperatorRunsOnThePusherAndFailsAsUsual) {
  Engine engine(options());
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
  }, {}, {v}, {.name = "op", .inline_ok = true});
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

TEST_P(InlineOk, OpsOfManyVariablesAndLvalueBodiesRunInTheirPushAsCopies) {
  Engine engine(options());
  // More variables than the direct path takes (detail::DirectRun::kMaxAccess):
  // the usual push, which still runs it here.
  std::vector<Var> many;
  for (int i = 0; i < 12; ++i) many.push_back(engine.new_variable());
  std::atomic<bool> ran{false};
  engine.push_sync([&] { ran.store(true); }, Context::cpu(), std::span(many).first(6),
                   std::span(many).subspan(6), kInline);
  EXPECT_TRUE(ran.load()) << "a short op of 12 variables did not run in its push";
  // A mutable body handed over as an lvalue, const or not: each push runs
  // its own copy, as a queued push does; the caller's object is untouched.
  int seen = 0;
  const auto body = [&seen, calls = 0]() mutable { seen = ++calls; };
  engine.push_sync(body, Context::cpu(), {}, {many[0]}, kInline);
  engine.push_sync(body, Context::cpu(), {}, {many[0]}, kInline);
  engine.wait_for_all();
  EXPECT_EQ(seen, 1) << "each push runs its own copy of the body";
  auto counter = [&seen, calls = 0]() mutable { seen = ++calls; };
  engine.push_sync(counter, Context::cpu(), {}, {many[0]}, kInline);
  engine.push_sync(counter, Context::cpu(), {}, {many[0]}, kInline);
  EXPECT_EQ(seen, 1) << "each push runs its own copy of the body";
  counter();
  EXPECT_EQ(seen, 1) << "a push called the caller's own body object";
  // A move-only body runs in place.
  auto owned = std::make_unique<int>(7);
  engine.push_sync([p = std::move(owned), &seen] { seen = *p; }, Context::cpu(), {}, {many[1]}, kInline);
  engine.wait_for_all();
  EXPECT_EQ(seen, 7);
}

TEST_P(InlineOk, AVariableListedTwiceCountsOnceAsWritten) {
  Engine engine(options());
  Var v = engine.new_variable();
  Var w = engine.new_variable();
  const auto me = std::this_thread::get_id();
  std::atomic<int> runs{0};
  std::atomic<bool> here{true};
  auto body = [&] {
    runs.fetch_add(1);
    if (std::this_thread::get_id() != me) here.store(false);
  };
  engine.push_sync(body, Context::cpu(), {v}, {v}, kInline);           // read and write
  engine.push_sync(body, Context::cpu(), {}, {w, v, w}, kInline);      // a write twice
  engine.push_sync(body, Context::cpu(), {w, w, v, w}, {}, kInline);   // reads only
  EXPECT_EQ(runs.load(), 3) << "an op with a variable listed twice did not run in its push";
  EXPECT_TRUE(here.load());
  EXPECT_EQ(engine.var_version(v), 2U);
  EXPECT_EQ(engine.var_version(w), 1U);
  engine.wait_for_all();
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

TEST_P(InlineOk, ABodyWhoseCopyThrowsFailsThePushNotTheOp) {
  Engine engine(options());
  Var v = engine.new_variable();
  std::atomic<bool> armed{false};
  std::atomic<int> calls{0};
  const ThrowsOnCopy body(&armed, &calls);
  engine.push_sync(body, Context::cpu(), {}, {v}, kInline);
  EXPECT_EQ(calls.load(), 1);
  armed.store(true);
  EXPECT_THROW(engine.push_sync(body, Context::cpu(), {}, {v}, kInline), std::runtime_error);
  EXPECT_EQ(calls.load(), 1) << "the body of a push that threw ran";
  EXPECT_EQ(engine.var_version(v), 1U) << "a push that threw counted as a write";
  EXPECT_EQ(engine.pending_errors(), 0U) << "a push that threw left an op error";
  engine.push_sync(ThrowsOnCopy(&armed, &calls), Context::cpu(), {}, {v}, kInline);  // moved, not copied
  EXPECT_EQ(calls.load(), 2);
  EXPECT_NO_THROW(engine.wait_for_var(v));
}

INSTANTIATE_TEST_SUITE_P(Engines, InlineOk, threaded_kinds(), threaded_kind_name);

}  // namespace
}  // namespace ordo::test

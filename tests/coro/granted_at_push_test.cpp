// A coroutine lease (co_await ordo::push, access form) whose variables are
// free at push is granted inside the push: the coroutine goes on where it is,
// without suspending, and runs no other op. No op body ever runs on the
// pushing thread: the function form runs fn on a worker.
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "coro_test_util.hpp"

namespace ordo::test {
namespace {

class GrantedAtPush : public ::testing::TestWithParam<ThreadedKind> {
 protected:
  Options options() const {
    Options o;
    o.kind = GetParam().kind;
    o.cpu_workers = 2;
    return o;
  }
};

/// Where one lease's coroutine went on after its co_await.
struct Where {
  std::thread::id thread;
  int worker = -2;
};

/// Takes a write lease on `v`, holds it for `hold`, records where it ran.
Task<void> step(Engine& engine, Var v, Where& out, std::chrono::microseconds hold) {
  Lease lease = co_await push(engine, reads(), writes(v));
  out.thread = std::this_thread::get_id();
  out.worker = lease.run_context().worker;
  busy_for(hold);
}

/// Spawns `n` steps on `v` from this thread, one after the other, each after
/// the previous one has finished (so each finds `v` free at its push).
std::vector<Where> run_steps(Engine& engine, Var v, int n, std::chrono::microseconds hold = {}) {
  std::vector<Where> where(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    AsyncScope scope;
    scope.spawn(step(engine, v, where[static_cast<std::size_t>(i)], hold));
    scope.sync_join();
    bounded_wait(engine, v);
    engine.wait_for_all();  // bounded_wait's own read of v may still be running
  }
  return where;
}

TEST_P(GrantedAtPush, LeasesReadyAtPushAreGrantedOnThePusherShortOrLong) {
  Engine engine(options());
  Var v = engine.new_variable();
  const auto me = std::this_thread::get_id();
  for (const auto hold : {std::chrono::microseconds(0), std::chrono::microseconds(300)}) {
    const std::vector<Where> all = run_steps(engine, v, 32, hold);
    for (std::size_t i = 0; i < all.size(); ++i) {
      EXPECT_EQ(all[i].thread, me) << "lease " << i << " should have been granted on its pusher";
      EXPECT_EQ(all[i].worker, -1) << "lease " << i << ": a pusher is not a worker";
    }
  }
}

TEST_P(GrantedAtPush, TheFunctionFormNeverRunsOnThePusher) {
  Engine engine(options());
  Var v = engine.new_variable();
  const auto me = std::this_thread::get_id();
  int on_pusher = 0;  // written by fn, read after the join
  auto body = [&]() -> Task<void> {
    for (int i = 0; i < 200; ++i) {
      co_await push(engine, reads(), writes(v), [&] {
        if (std::this_thread::get_id() == me) ++on_pusher;
      });
    }
  };
  AsyncScope scope;
  scope.spawn(body());
  scope.sync_join();
  engine.wait_for_all();
  EXPECT_EQ(on_pusher, 0);
}

TEST_P(GrantedAtPush, ALeaseGrantedOnThePusherStillOrdersLaterOps) {
  // Granted at push, then held across a suspension on another op: a sync op
  // pushed meanwhile on the same variable waits for the lease's release, and
  // the coroutine resumes on the worker that granted the awaited op.
  Engine engine(options());
  Var v = engine.new_variable();
  Var w = engine.new_variable();
  // w is held by a coroutine (granted here too) that waits for an event.
  Event release_w;
  auto holder = [&]() -> Task<void> {
    Lease held = co_await push(engine, reads(), writes(w));
    co_await release_w;
  };
  AsyncScope scope;
  scope.spawn(holder());
  std::vector<int> log;  // ordered by v
  Where first;
  Where second;
  auto body = [&]() -> Task<void> {
    Lease lease = co_await push(engine, reads(), writes(v));
    first = Where{std::this_thread::get_id(), lease.run_context().worker};
    log.push_back(1);
    Lease other = co_await push(engine, reads(w), writes());  // waits for the holder
    second = Where{std::this_thread::get_id(), other.run_context().worker};
    log.push_back(2);
  };
  scope.spawn(body());
  EXPECT_EQ(first.thread, std::this_thread::get_id()) << "granted at push, on this thread";
  EXPECT_EQ(log, (std::vector<int>{1})) << "suspended on w, still holding v";
  engine.push_sync([&] { log.push_back(3); }, Context::cpu(), {}, {v});  // waits for the lease on v
  release_w.set();
  scope.sync_join();
  bounded_wait(engine, v);
  EXPECT_EQ(log, (std::vector<int>{1, 2, 3}));
  EXPECT_GE(second.worker, 0) << "resumed by the worker that granted the read of w";
}

TEST_P(GrantedAtPush, ALeaseReadyAtPushOnAWorkerIsGrantedThere) {
  // A coroutine on a CPU worker (resumed there by the grant of a lease that
  // had to wait) pushes a lease whose variable is free: it is granted at
  // once on that worker and the coroutine goes on there. The lease still
  // orders later ops: a sync op pushed meanwhile on its variable waits for
  // its release.
  Engine engine(options());
  Var a = engine.new_variable();
  Var b = engine.new_variable();
  OnComplete finish_a;
  Gate a_started;
  engine.push_async(
      [&](RunContext, OnComplete done) {
        finish_a = done;
        a_started.open();
      },
      Context::cpu(), {}, {a});
  ASSERT_TRUE(a_started.wait(std::chrono::seconds(60)));
  Where first;
  Where second;
  std::vector<int> log;  // ordered by b
  bool granted_at_push = false;
  Gate holding_b;
  Event release_b;
  auto body = [&]() -> Task<void> {
    Lease la = co_await push(engine, reads(), writes(a));  // waits for the async op: granted on a worker
    first = Where{std::this_thread::get_id(), la.run_context().worker};
    auto pushed_b = push(engine, reads(), writes(b));  // b is free
    granted_at_push = pushed_b.operator co_await().await_ready();
    Lease lb = co_await std::move(pushed_b);
    second = Where{std::this_thread::get_id(), lb.run_context().worker};
    log.push_back(1);
    holding_b.open();
    co_await release_b;  // suspended, still holding a and b
    log.push_back(2);
  };
  AsyncScope scope;
  scope.spawn(body());
  finish_a();  // releases a: its lease is granted on a worker
  ASSERT_TRUE(holding_b.wait(std::chrono::seconds(60)));
  EXPECT_GE(first.worker, 0) << "the first lease waited, so a worker granted it";
  EXPECT_TRUE(granted_at_push) << "b was free: its lease should have been granted inside the push";
  EXPECT_EQ(second.thread, first.thread) << "granted at push on that worker: no suspension, same thread";
  EXPECT_EQ(second.worker, first.worker);
  EXPECT_GE(engine.in_flight(), 2U) << "both held leases are in flight";
  engine.push_sync([&] { log.push_back(3); }, Context::cpu(), {}, {b});  // waits for the lease on b
  release_b.set();
  scope.sync_join();
  bounded_wait(engine, b);
  EXPECT_EQ(log, (std::vector<int>{1, 2, 3}));
  engine.wait_for_all();
  EXPECT_EQ(engine.in_flight(), 0U);
}

TEST_P(GrantedAtPush, ALeaseGrantedAtPushIsInFlightAndFailsItsVariables) {
  // Granted on this thread at push (no op body ran), the lease is an op in
  // flight until released, and failing it stores the error on what it writes.
  Engine engine(options());
  Var v = engine.new_variable();
  Event release;
  Where where;
  auto body = [&]() -> Task<void> {
    Lease lease = co_await push(engine, reads(), writes(v));
    where = Where{std::this_thread::get_id(), lease.run_context().worker};
    co_await release;
    lease.fail(std::make_exception_ptr(Boom("failed lease")));
  };
  AsyncScope scope;
  scope.spawn(body());
  EXPECT_EQ(where.thread, std::this_thread::get_id()) << "granted at push, on this thread";
  EXPECT_EQ(where.worker, -1);
  EXPECT_GE(engine.in_flight(), 1U) << "a held lease is in flight";
  const std::uint64_t before = engine.var_version(v);
  release.set();
  scope.sync_join();
  EXPECT_THROW(bounded_wait(engine, v), Boom);
  EXPECT_EQ(engine.var_version(v), before + 1) << "a failed write still counts as a version";
}

TEST_P(GrantedAtPush, ChainsOfShortLeasesMatchASerialRun) {
  // Many coroutines over a few variables, spawned from this thread: granted
  // here or on workers, the result must be the serial one.
  Engine engine(options());
  constexpr int kVars = 4;
  constexpr int kSteps = 4000;
  std::vector<Var> vars;
  for (int i = 0; i < kVars; ++i) vars.push_back(engine.new_variable());
  std::vector<std::uint64_t> slot(kVars, 1), serial(kVars, 1);
  auto op = [&](int i) -> Task<void> {
    const int a = i % kVars;
    const int b = (i * 7 + 3) % kVars;
    Lease lease = co_await push(engine, reads(vars[static_cast<std::size_t>(b)]),
                                writes(vars[static_cast<std::size_t>(a)]));
    slot[static_cast<std::size_t>(a)] = mix(slot[static_cast<std::size_t>(a)],
                                            slot[static_cast<std::size_t>(b)] + static_cast<std::uint64_t>(i));
  };
  AsyncScope scope;
  for (int i = 0; i < kSteps; ++i) scope.spawn(op(i));
  scope.sync_join();
  engine.wait_for_all();
  for (int i = 0; i < kSteps; ++i) {
    const int a = i % kVars;
    const int b = (i * 7 + 3) % kVars;
    serial[static_cast<std::size_t>(a)] = mix(serial[static_cast<std::size_t>(a)],
                                              serial[static_cast<std::size_t>(b)] + static_cast<std::uint64_t>(i));
  }
  EXPECT_EQ(slot, serial);
}

INSTANTIATE_TEST_SUITE_P(Engines, GrantedAtPush, threaded_kinds(), threaded_kind_name);

}  // namespace
}  // namespace ordo::test

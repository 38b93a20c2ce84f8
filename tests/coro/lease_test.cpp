// co_await ordo::push / ordo::wait_for against every engine: grants, leases
// released on every path, eager registration, errors, AsyncScope with ops.
#include <algorithm>
#include <chrono>
#include <string>
#include <tuple>
#include <vector>

#include "coro_test_util.hpp"

namespace ordo::test {
namespace {

/// A log several ops append to; the engine's ordering makes the appends
/// race-free when the ops conflict on a variable (and TSan checks it).
using Log = std::vector<std::string>;

class Coro : public ::testing::TestWithParam<EngineConfig> {
 protected:
  bool is_naive() const { return GetParam().options.kind == EngineKind::naive; }
};

TEST_P(Coro, LeaseResumesOnAWorkerAndExcludesConflictingOps) {
  Engine engine(GetParam().options);
  Var x = engine.new_variable();
  Log log;
  int worker = -2;
  AsyncScope scope;
  // "before" holds x until the lease is pushed behind it (a lease whose
  // variables are free would be granted in its push, on this thread).
  Gate pushed;
  if (is_naive()) pushed.open();  // naive runs "before" inside its push
  engine.push_sync([&] {
    ASSERT_TRUE(pushed.wait());
    log.push_back("before");
  }, Context::cpu(), {}, {x});
  auto task = [&]() -> Task<void> {
    Lease lease = co_await push(engine, reads(), writes(x));
    EXPECT_TRUE(lease.held());
    worker = lease.run_context().worker;
    log.push_back("lease");
    lease.release();
    EXPECT_FALSE(lease.held());
  };
  scope.spawn(task());  // registers its push before returning
  pushed.open();
  engine.push_sync([&] { log.push_back("after"); }, Context::cpu(), {}, {x});
  scope.sync_join();
  bounded_wait(engine, x);
  EXPECT_EQ(log, (Log{"before", "lease", "after"}));
  if (!is_naive()) {
    EXPECT_GE(worker, 0) << "the op should be granted on a worker of the engine";
  }
}

TEST_P(Coro, ReadLeasesShareAndWriteLeasesSerialize) {
  Engine engine(GetParam().options);
  Var x = engine.new_variable();
  std::atomic<int> readers{0};
  std::atomic<int> max_readers{0};
  int value = 0;
  AsyncScope scope;
  auto writer = [&](int v) -> Task<void> {
    Lease l = co_await push(engine, reads(), writes(x));
    EXPECT_EQ(readers.load(), 0);
    value = v;
  };
  auto reader = [&](int expect) -> Task<void> {
    Lease l = co_await push(engine, reads(x), writes());
    const int now = readers.fetch_add(1) + 1;
    int seen = max_readers.load();
    while (seen < now && !max_readers.compare_exchange_weak(seen, now)) {
    }
    EXPECT_EQ(value, expect);
    readers.fetch_sub(1);
  };
  for (int round = 1; round <= 20; ++round) {
    scope.spawn(writer(round));
    for (int i = 0; i < 3; ++i) scope.spawn(reader(round));
  }
  scope.sync_join();
  bounded_wait(engine, x);
  EXPECT_EQ(value, 20);
}

TEST_P(Coro, LeaseReleasedByDestructorAndByFail) {
  Engine engine(GetParam().options);
  Var x = engine.new_variable();
  Var y = engine.new_variable();
  auto task = [&]() -> Task<void> {
    { Lease l = co_await push(engine, reads(), writes(x)); }  // destructor: success
    Lease l = co_await push(engine, reads(), writes(y));
    l.fail(std::make_exception_ptr(Boom("failed lease")));
    EXPECT_THROW(l.release(), Error) << "a lease completes once";
  };
  run_bounded(task());
  EXPECT_NO_THROW(bounded_wait(engine, x));
  EXPECT_THROW(bounded_wait(engine, y), Boom) << "fail(e) stores e on the variables the op mutates";
}

TEST_P(Coro, ExceptionUnwindingThroughALeaseFailsTheOpWithThatException) {
  Engine engine(GetParam().options);
  Var x = engine.new_variable();
  Var y = engine.new_variable();
  std::atomic<int> ran{0};
  auto task = [&]() -> Task<void> {
    Lease l = co_await push(engine, reads(), writes(x));
    throw Boom("thrown while holding the lease");
  };
  try {
    run_bounded(task());
    ADD_FAILURE() << "the task's awaiter did not get the exception";
  } catch (const Boom& e) {
    EXPECT_STREQ(e.what(), "thrown while holding the lease");
  }
  engine.push_sync([&] { ran.fetch_add(1); }, Context::cpu(), {x}, {y});  // skipped: x carries the error
  try {
    bounded_wait(engine, y);
    ADD_FAILURE() << "the error did not travel from x to y";
  } catch (const Boom& e) {
    EXPECT_STREQ(e.what(), "thrown while holding the lease");
  }
  EXPECT_THROW(bounded_wait(engine, x), Boom);
  EXPECT_EQ(ran.load(), 0);
}

TEST_P(Coro, ExceptionCaughtInsideTheCoroutineStillReleasesTheLease) {
  Engine engine(GetParam().options);
  Var x = engine.new_variable();
  auto task = [&]() -> Task<int> {
    try {
      Lease l = co_await push(engine, reads(), writes(x));
      throw Boom("caught below");
    } catch (const Boom&) {
    }
    // The parked lease is failed at the next co_await, so this does not deadlock.
    Lease again = co_await push(engine, reads(), writes(x), Context::cpu(), {.always_run = true});
    co_return 1;
  };
  EXPECT_EQ(run_bounded(task()), 1);
  EXPECT_NO_THROW(bounded_wait(engine, x)) << "the always_run write repaired x";
  // Without a later co_await, the lease is failed when the coroutine returns.
  auto task2 = [&]() -> Task<void> {
    try {
      Lease l = co_await push(engine, reads(), writes(x));
      throw Boom("caught");
    } catch (const Boom&) {
    }
  };
  run_bounded(task2());
  try {
    bounded_wait(engine, x);
    ADD_FAILURE() << "x should carry the unwinding error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::cancelled);
  }
}

TEST_P(Coro, AwaitableDestroyedBeforeTheGrantReleasesItsOp) {
  Engine engine(GetParam().options);
  Var x = engine.new_variable();
  auto gate = std::make_shared<Gate>();
  if (!is_naive()) {
    engine.push_sync([gate] { EXPECT_TRUE(gate->wait()); }, Context::cpu(), {}, {x});  // holds x
  }
  { auto unawaited = push(engine, reads(), writes(x)); }  // queued behind the blocker, then dropped
  gate->open();
  int after = 0;
  engine.push_sync([&] { after = 1; }, Context::cpu(), {}, {x});
  bounded_wait(engine, x);
  EXPECT_EQ(after, 1);
}

TEST_P(Coro, AwaitableDestroyedAfterTheGrantReleasesItsOp) {
  Engine engine(GetParam().options);
  Var x = engine.new_variable();
  {
    // FnProperty::async: a free op runs inline in push, so it is granted before push returns.
    auto unawaited = push(engine, reads(), writes(x), Context::cpu(), {.prop = FnProperty::async});
  }
  int after = 0;
  engine.push_sync([&] { after = 1; }, Context::cpu(), {}, {x});
  bounded_wait(engine, x);
  EXPECT_EQ(after, 1);
  // Both, racing, many times.
  for (int i = 0; i < 200 / kScale; ++i) {
    auto dropped = push(engine, reads(), writes(x));
  }
  bounded_wait(engine, x);
}

TEST_P(Coro, DependenciesAreRegisteredAtPushNotAtAwait) {
  Engine engine(GetParam().options);
  Var x = engine.new_variable();
  Log log;
  // Function form, awaited in reverse order.
  auto fn_form = [&]() -> Task<int> {
    auto a = push(engine, reads(), writes(x), [&] { log.push_back("A"); return 1; });
    auto b = push(engine, reads(), writes(x), [&] { log.push_back("B"); return 2; });
    const int rb = co_await b;
    const int ra = co_await a;
    co_return ra * 10 + rb;
  };
  EXPECT_EQ(run_bounded(fn_form()), 12);
  EXPECT_EQ(log, (Log{"A", "B"}));

  // Access form: a plain push made between the coroutine's push and its
  // co_await runs after the coroutine's op.
  log.clear();
  auto lease_then_plain = [&]() -> Task<void> {
    auto a = push(engine, reads(), writes(x));
    engine.push_sync([&] { log.push_back("plain"); }, Context::cpu(), {}, {x});
    Lease l = co_await a;
    log.push_back("lease");
  };
  run_bounded(lease_then_plain());
  bounded_wait(engine, x);
  EXPECT_EQ(log, (Log{"lease", "plain"}));

  // Access form, awaited in reverse order: a is consumed by another task.
  log.clear();
  AsyncScope scope;
  auto holder = [&](LeaseAwaitable aw) -> Task<void> {
    Lease l = co_await aw;
    log.push_back("A");
  };
  auto reversed = [&]() -> Task<void> {
    auto a = push(engine, reads(), writes(x));
    auto b = push(engine, reads(), writes(x));
    scope.spawn(holder(std::move(a)));
    Lease l = co_await b;
    log.push_back("B");
  };
  run_bounded(reversed());
  scope.sync_join();
  EXPECT_EQ(log, (Log{"A", "B"}));
}

TEST_P(Coro, WhenAllRegistersChildOpsInArgumentOrder) {
  Engine engine(GetParam().options);
  Var x = engine.new_variable();
  Log log;
  auto child = [&](int i) -> Task<int> {
    Lease l = co_await push(engine, reads(), writes(x));  // pushed before the child first suspends
    log.push_back(std::to_string(i));
    co_return i;
  };
  auto fn_child = [&](int i) -> Task<int> {
    co_return co_await push(engine, reads(), writes(x), [&log, i] {
      log.push_back(std::to_string(i));
      return i;
    });
  };
  auto all = [&]() -> Task<std::tuple<int, int, int, int>> {
    co_return co_await when_all(child(0), fn_child(1), child(2), fn_child(3));
  };
  EXPECT_EQ(run_bounded(all()), std::make_tuple(0, 1, 2, 3));
  bounded_wait(engine, x);
  EXPECT_EQ(log, (Log{"0", "1", "2", "3"}));
}

TEST_P(Coro, FunctionFormResultsAndExceptions) {
  Engine engine(GetParam().options);
  Var x = engine.new_variable();
  Var y = engine.new_variable();
  auto task = [&]() -> Task<int> {
    const int a = co_await push(engine, reads(), writes(x), [] { return 40; });
    std::unique_ptr<int> b = co_await push(engine, reads(x), writes(), [] { return std::make_unique<int>(2); });
    int worker = -2;
    co_await push(engine, reads(x), writes(), [&](const RunContext& rc) { worker = rc.worker; });
    if (!is_naive()) {
      EXPECT_GE(worker, 0);
    }
    try {
      co_await push(engine, reads(), writes(y), []() -> int { throw Boom("from fn"); });
      ADD_FAILURE() << "fn's exception did not reach the coroutine";
    } catch (const Boom& e) {
      EXPECT_STREQ(e.what(), "from fn");
    }
    co_return a + *b;
  };
  EXPECT_EQ(run_bounded(task()), 42);
  EXPECT_THROW(bounded_wait(engine, y), Boom) << "fn's exception is stored on its writes, like push_sync";
}

TEST_P(Coro, FunctionFormAbandonedStillRuns) {
  Engine engine(GetParam().options);
  Var x = engine.new_variable();
  std::atomic<int> ran{0};
  for (int i = 0; i < 50; ++i) {
    auto dropped = push(engine, reads(), writes(x), [&] { ran.fetch_add(1); return std::string(100, 'x'); });
  }
  bounded_wait(engine, x);
  EXPECT_EQ(ran.load(), 50);
}

TEST_P(Coro, WaitForResumesAfterEarlierWrites) {
  Engine engine(GetParam().options);
  Var x = engine.new_variable();
  auto gate = std::make_shared<Gate>();
  int value = 0;
  if (!is_naive()) {
    engine.push_sync([gate, &value] { EXPECT_TRUE(gate->wait()); value = 1; }, Context::cpu(), {}, {x});
  } else {
    engine.push_sync([&value] { value = 1; }, Context::cpu(), {}, {x});
  }
  AsyncScope scope;
  int seen = -1;
  auto waiter = [&]() -> Task<void> {
    co_await wait_for(engine, x);
    seen = value;
  };
  scope.spawn(waiter());
  gate->open();
  scope.sync_join();
  EXPECT_EQ(seen, 1);
}

TEST_P(Coro, ErroredVariablesHandTheOriginalExceptionToCoroutines) {
  Engine engine(GetParam().options);
  Var x = engine.new_variable();
  Var y = engine.new_variable();
  engine.push_sync([] { throw Boom("producer"); }, Context::cpu(), {}, {x});
  auto task = [&]() -> Task<int> {
    int got = 0;
    try {
      co_await wait_for(engine, x);
    } catch (const Boom& e) {
      got += std::string(e.what()) == "producer" ? 1 : 100;
    }
    try {
      Lease l = co_await push(engine, reads(x), writes(y), Context::cpu(), {.name = "consumer"});
      ADD_FAILURE() << "a lease on an errored variable was granted";
    } catch (const Boom& e) {
      got += std::string(e.what()) == "producer" ? 1 : 100;
    }
    bool ran = false;
    try {
      co_await push(engine, reads(x), writes(), [&] { ran = true; });
    } catch (const Boom&) {
      ++got;
    }
    EXPECT_FALSE(ran);
    co_return got;
  };
  EXPECT_EQ(run_bounded(task()), 3) << "each skipped push must rethrow the producer's exception";
  // The original error is still on x (not cleared by the coroutine) and reached y.
  EXPECT_THROW(bounded_wait(engine, y), Boom);
  EXPECT_THROW(bounded_wait(engine, x), Boom);
}

TEST_P(Coro, MisuseThrowsFromPushInsideTheCoroutine) {
  Engine engine(GetParam().options);
  Var x = engine.new_variable();
  engine.delete_variable(x);
  auto task = [&]() -> Task<void> { Lease l = co_await push(engine, reads(x), writes()); };
  try {
    run_bounded(task());
    ADD_FAILURE() << "push of a deleted variable did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::deleted_var);
  }
  engine.wait_for_all();
}

TEST_P(Coro, LongChainsOfLeasesPingPongInBoundedStack) {
  Engine engine(GetParam().options);
  Var x = engine.new_variable();
  const int rounds = 20'000 / kScale;
  int turns = 0;
  auto player = [&](int n) -> Task<void> {
    for (int i = 0; i < n; ++i) {
      Lease l = co_await push(engine, reads(), writes(x));
      ++turns;
    }
  };
  auto both = [&]() -> Task<void> { co_await when_all(player(rounds), player(rounds)); };
  run_bounded(both());
  bounded_wait(engine, x);
  EXPECT_EQ(turns, 2 * rounds);
  EXPECT_EQ(engine.var_version(x), static_cast<std::uint64_t>(2 * rounds));
}

TEST_P(Coro, ScopeOfTasksJoinedBeforeTheEngineGoes) {
  Engine engine(GetParam().options);
  std::vector<Var> vars;
  for (int i = 0; i < 8; ++i) vars.push_back(engine.new_variable());
  std::vector<std::uint64_t> vals(vars.size(), 0);
  AsyncScope scope;  // declared after the engine: destroyed (joined) first
  auto step = [&](std::size_t from, std::size_t to, std::uint64_t k) -> Task<void> {
    Lease l = co_await push(engine, reads(vars[from]), writes(vars[to]));
    vals[to] = mix(vals[to], vals[from] + k);
  };
  std::vector<std::uint64_t> expect(vars.size(), 0);
  for (std::uint64_t k = 0; k < 400; ++k) {
    const std::size_t from = k % vars.size();
    const std::size_t to = (k * 3 + 1) % vars.size();
    scope.spawn(step(from, to, k));
    expect[to] = mix(expect[to], expect[from] + k);
  }
  auto joiner = [&]() -> Task<void> { co_await scope.join(); };
  run_bounded(joiner());
  engine.wait_for_all();
  EXPECT_EQ(vals, expect);
}

TEST_P(Coro, BackpressureWithCoroutinePushers) {
  Options options = GetParam().options;
  options.max_in_flight = 32;
  Engine engine(options);
  Var x = engine.new_variable();
  Var y = engine.new_variable();
  const int n = 400 / kScale;
  // A coroutine pushes far more lease ops than the window before awaiting
  // any: the ops wait for this very coroutine, so the throttled push must
  // go on (the engine lets a pusher through when every worker is idle).
  auto hoarder = [&]() -> Task<int> {
    std::vector<LeaseAwaitable> pending;
    for (int i = 0; i < n; ++i) pending.push_back(push(engine, reads(), writes(x)));
    int got = 0;
    for (auto& aw : pending) {
      Lease l = co_await aw;
      ++got;
    }
    co_return got;
  };
  EXPECT_EQ(run_bounded(hoarder()), n);
  // Many spawned tasks from this thread, beyond the window.
  AsyncScope scope;
  int count = 0;
  auto one = [&]() -> Task<void> {
    Lease l = co_await push(engine, reads(), writes(y));
    ++count;
  };
  for (int i = 0; i < n; ++i) scope.spawn(one());
  scope.sync_join();
  bounded_wait(engine, x);
  bounded_wait(engine, y);
  EXPECT_EQ(count, n);
}

TEST_P(Coro, LongVariableListsGoToTheHeap) {
  Engine engine(GetParam().options);
  std::vector<Var> many;
  for (int i = 0; i < 20; ++i) many.push_back(engine.new_variable());
  Var out = engine.new_variable();
  Reads r = reads(many);
  Reads copy = r;
  Reads moved = std::move(copy);
  ASSERT_EQ(moved.size(), 20U);
  EXPECT_TRUE(std::equal(moved.begin(), moved.end(), many.begin()));
  Writes w = writes(out, many[0]);  // read and written: counts as written
  EXPECT_EQ(w.size(), 2U);
  w = writes(out);
  int runs = 0;
  auto task = [&]() -> Task<void> {
    for (int i = 0; i < 3; ++i) {
      Lease l = co_await push(engine, moved, w);
      ++runs;
    }
    co_await push(engine, reads(many), writes(out), [&] { ++runs; });
  };
  run_bounded(task());
  bounded_wait(engine, out);
  EXPECT_EQ(runs, 4);
  EXPECT_EQ(engine.var_version(out), 4U);
}

// Regression (issue 31): a lease still held when its engine is destroyed was
// reported as "an unnamed op" although it was pushed with a name.
TEST_P(Coro, AbandonedLeaseIsReportedByItsName) {
  std::vector<ErrorReport> reports;
  Lease kept;
  {
    Options o = GetParam().options;
    o.shutdown_timeout = std::chrono::milliseconds(100);
    o.on_unobserved_error = [&](const ErrorReport& r) { reports.push_back(r); };
    Engine engine(o);
    Var v = engine.new_variable();
    auto take = [&]() -> Task<void> {
      kept = co_await push(engine, reads(), writes(v), Context::cpu(), OpAttrs{.name = "holder"});
    };
    sync_wait(take());
    ASSERT_TRUE(kept.held());
  }  // never released: abandoned after shutdown_timeout
  ASSERT_EQ(reports.size(), 1U);
  EXPECT_EQ(reports[0].op_name, "holder");
  EXPECT_NE(reports[0].message.find("abandoned"), std::string::npos) << reports[0].message;
  kept.release();  // late: harmless
}

// Regression (issue 31): a destructor waiting for a lease that is never
// released said nothing for shutdown_timeout (60 s by default). Within
// kStuckNotice (1 s) of no progress it names what it waits for on stderr.
TEST_P(Coro, StuckShutdownSaysWhatItWaitsFor) {
  Lease kept;
  ::testing::internal::CaptureStderr();
  {
    Options o = GetParam().options;
    o.shutdown_timeout = std::chrono::milliseconds(1500);
    o.on_unobserved_error = [](const ErrorReport&) {};
    Engine engine(o);
    Var v = engine.new_variable();
    Var w = engine.new_variable();
    auto take = [&]() -> Task<void> {
      kept = co_await push(engine, reads(), writes(v), Context::cpu(), OpAttrs{.name = "holder"});
    };
    sync_wait(take());
    engine.push_sync([] {}, Context::cpu(), {v}, {w}, {.name = "behind"});
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("make no progress"), std::string::npos) << err;
  EXPECT_NE(err.find("op 'holder' holds var"), std::string::npos) << err;
  EXPECT_NE(err.find("op 'behind' waits for var"), std::string::npos) << err;
  kept.release();
}

INSTANTIATE_TEST_SUITE_P(Engines, Coro, ::testing::ValuesIn(all_engine_configs()), config_name);

}  // namespace
}  // namespace ordo::test

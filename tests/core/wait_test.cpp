// wait_for_var / wait_for_all semantics, versions, variable and operator
// deletion, backpressure, shutdown drain.
#include <sched.h>

#include <atomic>
#include <future>
#include <latch>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace ordo::test {
namespace {

Options two_workers() { return Options{.kind = EngineKind::per_device, .cpu_workers = 2}; }

TEST(Wait, WaitForVarWaitsForEarlierWritesOnly) {
  Engine engine(two_workers());
  Var v = engine.new_variable();
  Gate read_gate;
  Counter read_started;
  int value = 0;
  engine.push_sync([&] { value = 1; }, Context::cpu(), {}, {v});
  // A read that blocks: wait_for_var must NOT wait for it (MXNet semantics).
  engine.push_sync([&] { read_started.arrive(); ASSERT_TRUE(read_gate.wait()); }, Context::cpu(), {v}, {});
  ASSERT_TRUE(read_started.wait_for(1));
  engine.wait_for_var(v);  // returns although the read is still running
  EXPECT_EQ(value, 1);
  read_gate.open();
  engine.wait_for_all();
}

TEST(Wait, WaitForVarSeesTheWriteJustPushed) {
  Engine engine(two_workers());
  Var v = engine.new_variable();
  Gate gate;
  int value = 0;
  engine.push_sync([&] { ASSERT_TRUE(gate.wait()); value = 42; }, Context::cpu(), {}, {v});
  auto waiter = std::async(std::launch::async, [&] { engine.wait_for_var(v); return value; });
  gate.open();
  EXPECT_EQ(waiter.get(), 42);
}

TEST(Wait, WaitForAllWaitsForOpsPushedByOps) {
  Engine engine(two_workers());
  Var v = engine.new_variable();
  std::atomic<int> count{0};
  std::function<void(int)> spawn = [&](int depth) {
    count.fetch_add(1);
    if (depth == 0) return;
    for (int i = 0; i < 2; ++i) engine.push_sync([&spawn, depth] { spawn(depth - 1); }, Context::cpu(), {}, {});
  };
  engine.push_sync([&] { spawn(10); }, Context::cpu(), {}, {v});
  engine.wait_for_all();
  EXPECT_EQ(count.load(), 2047);
  EXPECT_EQ(engine.in_flight(), 0U);
}

TEST(Wait, VersionCountsWritesNotReads) {
  Engine engine(two_workers());
  Var v = engine.new_variable();
  EXPECT_EQ(engine.var_version(v), 0U);
  for (int i = 0; i < 5; ++i) engine.push_sync([] {}, Context::cpu(), {}, {v});
  for (int i = 0; i < 7; ++i) engine.push_sync([] {}, Context::cpu(), {v}, {});
  engine.wait_for_all();
  EXPECT_EQ(engine.var_version(v), 5U);
}

TEST(Wait, VersionCountsFailedAndSkippedWrites) {
  Engine engine(two_workers());
  Var a = engine.new_variable(), b = engine.new_variable();
  engine.push_sync([] { throw std::runtime_error("x"); }, Context::cpu(), {}, {a});  // failed write of a
  engine.push_sync([] { ADD_FAILURE() << "skipped op ran"; }, Context::cpu(), {a}, {b});  // skipped write of b
  engine.push_sync([] { ADD_FAILURE() << "skipped op ran"; }, Context::cpu(), {}, {a});  // skipped write of a
  EXPECT_THROW(engine.wait_for_all(), std::runtime_error);
  EXPECT_EQ(engine.var_version(a), 2U);
  EXPECT_EQ(engine.var_version(b), 1U);
}

TEST(Deletion, DeleteRunsAfterEveryOpAlreadyPushed) {
  Engine engine(two_workers());
  Var v = engine.new_variable();
  std::vector<int> order;
  std::mutex m;
  auto add = [&](int x) { std::lock_guard lock(m); order.push_back(x); };
  Gate gate;
  engine.push_sync([&] { ASSERT_TRUE(gate.wait()); add(1); }, Context::cpu(), {}, {v});
  engine.push_sync([&] { add(2); }, Context::cpu(), {v}, {});
  engine.push_sync([&] { add(3); }, Context::cpu(), {v}, {});
  engine.delete_variable([&] { add(4); }, Context::cpu(), v);
  gate.open();
  engine.wait_for_all();
  ASSERT_EQ(order.size(), 4U);
  EXPECT_EQ(order.front(), 1);
  EXPECT_EQ(order.back(), 4);
}

TEST(Deletion, UsingADeletedVariableIsAClearError) {
  Engine engine(two_workers());
  Var v = engine.new_variable();
  Var w = engine.new_variable();
  engine.delete_variable(v);
  auto expect_deleted = [](auto&& fn) {
    try {
      fn();
      ADD_FAILURE() << "expected ordo::Error(deleted_var)";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::deleted_var) << e.what();
      EXPECT_NE(std::string(e.what()).find("deleted"), std::string::npos) << e.what();
    }
  };
  expect_deleted([&] { engine.push_sync([] {}, Context::cpu(), {v}, {}); });
  expect_deleted([&] { engine.push_sync([] {}, Context::cpu(), {w}, {v}); });
  expect_deleted([&] { engine.wait_for_var(v); });
  expect_deleted([&] { engine.delete_variable(v); });
  engine.wait_for_all();
  // The record is recycled: a new variable may reuse it; the old handle stays dead.
  std::vector<Var> fresh;
  for (int i = 0; i < 4; ++i) fresh.push_back(engine.new_variable());
  expect_deleted([&] { (void)engine.var_version(v); });
  expect_deleted([&] { engine.push_sync([] {}, Context::cpu(), {}, {v}); });
  // A failed push leaves the engine consistent: w still works.
  int x = 0;
  engine.push_sync([&] { x = 1; }, Context::cpu(), {}, {w});
  engine.wait_for_var(w);
  EXPECT_EQ(x, 1);
  engine.wait_for_all();
  EXPECT_EQ(engine.in_flight(), 0U);
}

TEST(Deletion, EmptyAndForeignVariablesAreRejected) {
  Engine engine(two_workers());
  Engine other(two_workers());
  Var foreign = other.new_variable();
  try {
    engine.push_sync([] {}, Context::cpu(), {}, {Var{}});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::empty_var);
  }
  try {
    engine.push_sync([] {}, Context::cpu(), {foreign}, {});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::foreign_var);
  }
  EXPECT_EQ(engine.in_flight(), 0U);
}

TEST(Operators, DeletionIsDeferredUntilItsPushesFinish) {
  Engine engine(two_workers());
  Var v = engine.new_variable();
  Gate gate;
  auto token = std::make_shared<int>(0);
  std::weak_ptr<int> watch = token;
  std::atomic<int> runs{0};
  Operator op = engine.new_operator(
      [token, &gate, &runs](RunContext) {
        EXPECT_TRUE(gate.wait());
        runs.fetch_add(1);
      },
      {}, {v}, {.name = "gated"});
  token.reset();
  for (int i = 0; i < 3; ++i) engine.push(op, Context::cpu());
  engine.delete_operator(op);
  EXPECT_FALSE(watch.expired()) << "operator freed while pushes were pending";
  try {
    engine.push(op, Context::cpu());
    ADD_FAILURE() << "push of a deleted operator succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::deleted_operator);
  }
  EXPECT_THROW(engine.delete_operator(op), Error);
  gate.open();
  engine.wait_for_all();
  EXPECT_EQ(runs.load(), 3);
  EXPECT_TRUE(watch.expired()) << "operator body not released after its last push";
}

TEST(Operators, AsyncOperatorAndPriorityOverride) {
  Engine engine(two_workers());
  Var v = engine.new_variable();
  int count = 0;
  Operator op = engine.new_operator([&](RunContext, OnComplete done) { ++count; done(); }, {}, {v});
  for (int i = 0; i < 1000; ++i) engine.push(op, Context::cpu(), i % 3);
  engine.wait_for_var(v);
  EXPECT_EQ(count, 1000);
  engine.delete_operator(op);
  engine.wait_for_all();
}

TEST(Backpressure, PusherWaitsAndMemoryStaysBounded) {
  const std::size_t bound = 64;
  Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = 2, .max_in_flight = bound});
  Var v = engine.new_variable();
  std::uint64_t sum = 0;
  std::size_t peak = 0;
  for (int i = 0; i < 20000 / kScale; ++i) {
    engine.push_sync([&sum, i] { sum += static_cast<std::uint64_t>(i); }, Context::cpu(), {}, {v});
    peak = std::max(peak, engine.in_flight());
  }
  engine.wait_for_all();
  // At the bound; a stall (no op finished for 10 ms, EngineCore::throttle)
  // lets the pusher one bound further, which a loaded machine shows now and
  // then: a few bounds, never the whole run.
  EXPECT_LE(peak, 4 * bound) << "in-flight count exceeded the bound";
  const std::uint64_t n = 20000 / kScale;
  EXPECT_EQ(sum, n * (n - 1) / 2);
}

namespace {
/// ~20 us of register-only work (no sleep): an op work first times as long.
std::uint64_t long_body(std::uint64_t h) {
  for (int j = 0; j < 20000; ++j) h = h * 6364136223846793005ULL + 1442695040888963407ULL;
  return h;
}
/// Runs enough long ops on `engine` for work first to have timed them.
void warm_up_long(Engine& engine) {
  Var w = engine.new_variable();
  std::uint64_t h = 1;
  for (int i = 0; i < 32; ++i) engine.push_sync([&h] { h = long_body(h); }, Context::cpu(), {}, {w});
  engine.wait_for_all();
}
}  // namespace

TEST(Wakeups, OpsReadyTogetherStartTogether) {
  // Each round, one worker runs a long op while the other spins and goes to
  // sleep; the pusher waits for it, then pushes two independent ops at once,
  // each of which waits until both have started. The worker that ran the
  // long op is spinning when the pair arrives and takes the first; the
  // second must wake the sleeper. Queued just as the spinner took the first
  // (the spinner still counted as spinning, so the push wakes nobody) it was
  // left in the queue, unseen by the spinner's own look, until the first op
  // ended: a rendezvous that never met.
  Engine engine(two_workers());
  warm_up_long(engine);
  const int rounds = 3000 / kScale;
  Var w = engine.new_variable();
  std::uint64_t h = 1;
  for (int round = 0; round < rounds; ++round) {
    engine.push_sync([&h] {
      for (int i = 0; i < 15; ++i) h = long_body(h);  // ~300 us: the other worker's spin ends
    }, Context::cpu(), {}, {w});
    engine.wait_for_all();
    std::atomic<int> started{0};
    std::atomic<int> missed{0};
    std::atomic<bool> on_pusher{false};
    const auto me = std::this_thread::get_id();
    for (int k = 0; k < 2; ++k) {
      engine.push_sync([&] {
        started.fetch_add(1, std::memory_order_acq_rel);
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
        while (started.load(std::memory_order_acquire) < 2) {
          if (std::chrono::steady_clock::now() > deadline) {
            missed.fetch_add(1, std::memory_order_relaxed);
            if (std::this_thread::get_id() == me) on_pusher.store(true);
            break;
          }
        }
      }, Context::cpu(), {}, {engine.new_variable()});
    }
    engine.wait_for_all();
    ASSERT_EQ(missed.load(), 0) << "round " << round << " of " << rounds
                                << ": an op stayed queued for 2 s while a worker slept"
                                << (on_pusher.load() ? " (one ran on the pusher: work first)" : "");
  }
}

TEST(Batches, LongOpsAreNotHeldInABatchWhileAWorkerIdles) {
  // A worker takes several queued ops at once only while its ops are short:
  // the rest of a batch waits for the op that runs first. Here both workers
  // have timed long ops (300 us), then the first of 32 ops ready together
  // waits until the 31 others have finished: taken in a batch with it, they
  // would wait for it, and it for them, until its deadline.
  Engine engine(two_workers());
  const auto busy = [](std::chrono::microseconds d) {
    const auto end = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < end) {
    }
  };
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 32; ++i) {
      engine.push_sync([&] { busy(std::chrono::microseconds(300)); }, Context::cpu(), {}, {engine.new_variable()});
    }
    engine.wait_for_all();
    std::atomic<int> finished{0};
    std::atomic<int> at_deadline{-1};
    engine.push_sync([&] {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (finished.load(std::memory_order_acquire) < 31) {
        if (std::chrono::steady_clock::now() > deadline) {
          at_deadline.store(finished.load());
          break;
        }
      }
    }, Context::cpu(), {}, {engine.new_variable()});
    for (int i = 0; i < 31; ++i) {
      engine.push_sync([&] {
        busy(std::chrono::microseconds(300));
        finished.fetch_add(1, std::memory_order_acq_rel);
      }, Context::cpu(), {}, {engine.new_variable()});
    }
    engine.wait_for_all();
    ASSERT_EQ(at_deadline.load(), -1) << "round " << round << ": " << at_deadline.load()
                                      << " of 31 long ops finished in 10 s; the rest waited behind the first"
                                         " in its worker's batch";
  }
}

TEST(Backpressure, HeldPusherGoesOnWhileAnOpWaitsForIt) {
  // One worker is busy in a gated op; 1000 ops queue behind it on its
  // variable, past the bound (256), so the other worker has nothing to run.
  // The op that opens the gate comes after the 1000: the pusher must go on
  // once nothing finishes (kStallPatience). Held until half the bound
  // drained, it would wait for ever (one worker busy: not every worker idle).
  Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = 2, .max_in_flight = 256});
  warm_up_long(engine);
  Var x = engine.new_variable();
  Var y = engine.new_variable();
  Gate gate;
  Counter gated_started;
  engine.push_sync([&] { gated_started.arrive(); ASSERT_TRUE(gate.wait()); }, Context::cpu(), {}, {x});
  ASSERT_TRUE(gated_started.wait_for(1));
  std::atomic<int> ran{0};
  Counter pushed;
  std::thread pusher([&] {
    for (int i = 0; i < 1000; ++i) {
      engine.push_sync([&] { ran.fetch_add(1); (void)long_body(1); }, Context::cpu(), {}, {x});
    }
    engine.push_sync([&] { gate.open(); }, Context::cpu(), {}, {y});
    pushed.arrive();
  });
  const bool went_on = pushed.wait_for(1, std::chrono::seconds(30));
  EXPECT_TRUE(went_on) << "pusher held at the bound by ops that wait for it";
  if (!went_on) gate.open();  // let the test end
  pusher.join();
  engine.wait_for_all();
  EXPECT_EQ(ran.load(), 1000);
}

TEST(Backpressure, OpsPushingOpsAreNeverBlocked) {
  Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = 1, .max_in_flight = 4});
  Var v = engine.new_variable();
  std::atomic<int> children{0};
  // One op pushes 1000 children on the same variable: they can only run
  // after it returns, so blocking it at the bound would deadlock.
  engine.push_sync([&] {
    for (int i = 0; i < 1000; ++i) engine.push_sync([&] { children.fetch_add(1); }, Context::cpu(), {}, {v});
  }, Context::cpu(), {}, {v});
  engine.wait_for_all();
  EXPECT_EQ(children.load(), 1000);
}

TEST(Backpressure, HeldPusherGoesOnWhenOnlyItCanUnblockTheEngine) {
  // Everything pushed waits for an async op that this very thread completes
  // after its pushing loop: blocking at the bound would deadlock.
  Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = 2, .max_in_flight = 8});
  Var gate_var = engine.new_variable();
  OnComplete open_gate;
  engine.push_async([&](RunContext, OnComplete done) { open_gate = done; }, Context::cpu(), {}, {gate_var},
                    {.prop = FnProperty::async});
  std::atomic<int> ran{0};
  for (int i = 0; i < 1000; ++i) engine.push_sync([&] { ran.fetch_add(1); }, Context::cpu(), {gate_var}, {});
  EXPECT_EQ(ran.load(), 0);
  open_gate();
  engine.wait_for_all();
  EXPECT_EQ(ran.load(), 1000);
}

TEST(Backpressure, StartedAsyncOpsDoNotHoldPushersBack) {
  // 100 async ops started and waiting on the outside (e.g. I/O, or
  // coroutines holding leases) must not count against a bound of 8, or the
  // pusher below would be stuck while one worker is busy in a gated op.
  Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = 2, .max_in_flight = 8});
  std::vector<OnComplete> held;
  std::mutex held_mutex;
  Counter bodies_ran;
  for (int i = 0; i < 100; ++i) {
    Var v = engine.new_variable();
    engine.push_async([&](RunContext, OnComplete done) {
      {
        std::lock_guard lock(held_mutex);
        held.push_back(done);
      }
      bodies_ran.arrive();
    }, Context::cpu(), {}, {v}, {.prop = FnProperty::async});
  }
  Gate gate;
  Counter gated_started;
  Var g = engine.new_variable();
  engine.push_sync([&] { gated_started.arrive(); ASSERT_TRUE(gate.wait()); }, Context::cpu(), {}, {g});
  ASSERT_TRUE(gated_started.wait_for(1));
  Counter pushed;
  std::atomic<int> ran{0};
  std::thread pusher([&] {
    Var w = engine.new_variable();
    for (int i = 0; i < 200; ++i) engine.push_sync([&] { ran.fetch_add(1); }, Context::cpu(), {}, {w});
    pushed.arrive();
  });
  EXPECT_TRUE(pushed.wait_for(1, std::chrono::seconds(30))) << "pusher held back by started async ops";
  gate.open();
  pusher.join();
  // Every body must have stored its completion before they are called, or
  // one stored later would never be completed.
  ASSERT_TRUE(bodies_ran.wait_for(100));
  {
    std::lock_guard lock(held_mutex);
    for (auto& done : held) done();
  }
  engine.wait_for_all();
  EXPECT_EQ(ran.load(), 200);
}

TEST(Backpressure, DefaultBoundIsOnAndCanBeTurnedOff) {
  EXPECT_EQ(Options{}.max_in_flight, 4096U);
  Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = 1, .max_in_flight = 0});
  Var v = engine.new_variable();
  Gate gate;
  engine.push_sync([&] { ASSERT_TRUE(gate.wait()); }, Context::cpu(), {}, {v});
  for (int i = 0; i < 100000; ++i) engine.push_sync([] {}, Context::cpu(), {}, {v});
  EXPECT_GE(engine.in_flight(), 100000U) << "unbounded engine held the pusher back";
  gate.open();
  engine.wait_for_all();
}

TEST(Shutdown, DestructorDrainsEveryPushedOp) {
  for (const auto& cfg : all_engine_configs()) {
    std::atomic<int> ran{0};
    {
      Engine engine(cfg.options);
      Var v = engine.new_variable();
      for (int i = 0; i < 1000; ++i) {
        engine.push_sync([&] {
          ran.fetch_add(1);
          if (ran.load() % 100 == 0) engine.push_sync([&] { ran.fetch_add(1); }, Context::cpu(), {}, {});
        }, Context::cpu(), {}, {v});
      }
    }  // no wait: the destructor drains
    EXPECT_GE(ran.load(), 1000) << cfg.label;
  }
}

TEST(Options, DefaultWorkersAreTheCpusTheCreatorMayUse) {
  // Affinity is per thread: a helper thread narrows its own mask to one CPU
  // (as taskset or a container's CPU set would) and creates engines there;
  // std::thread::hardware_concurrency() would still count every CPU.
  cpu_set_t mine;
  CPU_ZERO(&mine);
  ASSERT_EQ(::sched_getaffinity(0, sizeof mine, &mine), 0);
  EXPECT_EQ(usable_cpus(), static_cast<unsigned>(CPU_COUNT(&mine)));
  int first = 0;
  while (!CPU_ISSET(first, &mine)) ++first;
  std::thread narrowed([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
    EXPECT_EQ(usable_cpus(), 1U);
    Engine engine;
    EXPECT_EQ(engine.options().cpu_workers, 1U) << "default workers ignored the affinity mask";
    Engine explicit_count(Options{.cpu_workers = 3});
    EXPECT_EQ(explicit_count.options().cpu_workers, 3U);
    Var v = engine.new_variable();
    int runs = 0;
    for (int i = 0; i < 100; ++i) engine.push_sync([&runs] { ++runs; }, Context::cpu(), {}, {v});
    engine.wait_for_all();
    EXPECT_EQ(runs, 100);
  });
  narrowed.join();
}

TEST(Options, WorkersRunWithTheCreatorsAffinityMask) {
  // A pool's workers move to CPUs of their own as they start (worker_pool.cpp,
  // spread_start), then get their creator's mask back: none may stay pinned,
  // none may gain a CPU its creator may not use. Checked on the creator's
  // own mask and, where it has three or more CPUs, on two of them.
  auto masks_of_workers = [](unsigned workers) {
    std::vector<cpu_set_t> seen(workers);
    Engine engine(Options{.cpu_workers = workers});
    std::latch all_running(workers);  // one op on every worker at once
    for (unsigned i = 0; i < workers; ++i) {
      engine.push_sync([&](RunContext rc) {
        ASSERT_GE(rc.worker, 0);
        ASSERT_LT(rc.worker, static_cast<int>(workers));
        ASSERT_EQ(::sched_getaffinity(0, sizeof(cpu_set_t), &seen[static_cast<std::size_t>(rc.worker)]), 0);
        all_running.arrive_and_wait();
      }, Context::cpu(), {}, {});
    }
    engine.wait_for_all();
    return seen;
  };
  cpu_set_t mine;
  CPU_ZERO(&mine);
  ASSERT_EQ(::sched_getaffinity(0, sizeof mine, &mine), 0);
  for (const cpu_set_t& m : masks_of_workers(4)) {
    EXPECT_TRUE(CPU_EQUAL(&m, &mine)) << "a worker kept " << CPU_COUNT(&m) << " of the creator's "
                                      << CPU_COUNT(&mine) << " CPUs";
  }
  if (CPU_COUNT(&mine) < 3) return;
  cpu_set_t two;
  CPU_ZERO(&two);
  for (int c = CPU_SETSIZE - 1, k = 0; c >= 0 && k < 2; --c) {
    if (CPU_ISSET(c, &mine)) {
      CPU_SET(c, &two);
      ++k;
    }
  }
  std::thread narrowed([&] {
    ASSERT_EQ(::sched_setaffinity(0, sizeof two, &two), 0);
    for (const cpu_set_t& m : masks_of_workers(3)) {
      EXPECT_TRUE(CPU_EQUAL(&m, &two)) << "a worker of a narrowed creator runs with " << CPU_COUNT(&m) << " CPUs";
    }
  });
  narrowed.join();
}

TEST(Options, FromEnvReadsOnlyNamedVariables) {
  ::setenv("ORDO_ENGINE", "pooled", 1);
  ::setenv("ORDO_CPU_WORKERS", "3", 1);
  Options o = Options::from_env();
  EXPECT_EQ(o.kind, EngineKind::pooled);
  EXPECT_EQ(o.cpu_workers, 3U);
  ::setenv("ORDO_ENGINE", "turbo", 1);
  EXPECT_THROW((void)Options::from_env(), Error);
  ::setenv("ORDO_ENGINE", "naive", 1);
  ::setenv("ORDO_CPU_WORKERS", "two", 1);
  try {
    (void)Options::from_env();
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("ORDO_CPU_WORKERS"), std::string::npos);
  }
  ::unsetenv("ORDO_ENGINE");
  ::unsetenv("ORDO_CPU_WORKERS");
  // Engine construction itself never reads the environment.
  ::setenv("ORDO_ENGINE", "naive", 1);
  Engine engine;
  EXPECT_EQ(engine.kind(), EngineKind::per_device);
  ::unsetenv("ORDO_ENGINE");
}

}  // namespace
}  // namespace ordo::test

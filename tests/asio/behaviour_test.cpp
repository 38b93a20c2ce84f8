// ordo::asio semantics: eager registration, executor affinity, work
// counting, allocators, cancellation, errors, wait_for.
#include <asio/experimental/deferred.hpp>
#include <gtest/gtest.h>

#include <latch>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "asio/asio_test_util.hpp"

namespace {

using namespace ordo_asio_test;

// The measurement: with a wrapper that pushes inside the initiation,
// use_awaitable starts the operation at co_await, so awaiting B before A ran
// B first. ordo::asio pushes in the initiating function.
TEST(AsioEager, RegistrationOrderIsCallOrderNotAwaitOrder) {
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();
  asio::io_context io;
  std::string order;  // written only by ops mutating v: serialised by the engine
  run_coro(io, [&]() -> asio::awaitable<void> {
    auto a = ordo::asio::push(engine, ordo::reads(), ordo::writes(v), [&] { order += 'A'; }, asio::use_awaitable);
    auto b = ordo::asio::push(engine, ordo::reads(), ordo::writes(v), [&] { order += 'B'; }, asio::use_awaitable);
    co_await std::move(b);
    EXPECT_EQ(order, "AB") << "B completed, so A (pushed first, conflicting) must have run before it";
    co_await std::move(a);
  });
  EXPECT_EQ(order, "AB");
}

TEST(AsioEager, RegistrationHappensEvenIfNeverStarted) {
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();
  std::vector<int> seen;
  {
    auto d1 = ordo::asio::push(engine, {}, {v}, [&] { seen.push_back(1); }, asio::experimental::deferred);
    auto aw = ordo::asio::push(engine, {}, {v}, [&] { seen.push_back(2); return 2; }, asio::use_awaitable);
    (void)d1;
    (void)aw;
  }  // dropped unstarted: the ops still run, in push order, and results are dropped
  engine.push_sync([&] { seen.push_back(3); }, ordo::Context::cpu(), {}, {v});
  engine.wait_for_var(v);
  EXPECT_EQ(seen, (std::vector<int>{1, 2, 3}));
}

TEST(AsioEager, ManyInterleavedAwaitsKeepPushOrder) {
  ordo::Engine engine(test_options(2));
  ordo::Var v = engine.new_variable();
  asio::io_context io;
  std::vector<int> log;
  run_coro(io, [&]() -> asio::awaitable<void> {
    std::vector<asio::awaitable<int>> ops;
    for (int i = 0; i < 50; ++i) {
      ops.push_back(ordo::asio::push(engine, ordo::reads(), ordo::writes(v), [&log, i] { log.push_back(i); return i; },
                                     asio::use_awaitable));
    }
    for (int i = 49; i >= 0; --i) EXPECT_EQ(co_await std::move(ops[static_cast<std::size_t>(i)]), i);
  });
  ASSERT_EQ(log.size(), 50U);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(log[static_cast<std::size_t>(i)], i);
}

TEST(AsioAffinity, HandlersRunOnTheirExecutorNeverOnAWorker) {
  IoThread t1, t2;  // before the engine: it may still hold their executors until it is destroyed
  ordo::Engine engine(test_options(2));
  auto strand = asio::make_strand(t2.io());
  constexpr int kOps = 200;
  std::latch done(2 * kOps);
  std::atomic<int> wrong{0};
  ordo::Var v = engine.new_variable();
  for (int i = 0; i < kOps; ++i) {
    ordo::asio::push(engine, {v}, {}, [] { return ordo::Engine::inside_op(); },
                     asio::bind_executor(t1.io(), [&](std::exception_ptr, bool ran_inside_op) {
                       if (!ran_inside_op || std::this_thread::get_id() != t1.id() || ordo::Engine::inside_op()) ++wrong;
                       done.count_down();
                     }));
    ordo::asio::push(engine, {}, {v}, [] {},
                     asio::bind_executor(strand, [&, strand](std::exception_ptr) {
                       if (!strand.running_in_this_thread() || ordo::Engine::inside_op()) ++wrong;
                       done.count_down();
                     }));
  }
  done.wait();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(AsioAffinity, NeverInvokedInsideTheInitiatingFunction) {
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();  // no writes pending: wait_for completes at once, inline
  asio::io_context io;
  bool called = false;
  ordo::asio::wait_for(engine, v, asio::bind_executor(io, [&](std::exception_ptr) { called = true; }));
  EXPECT_FALSE(called) << "an operation that completes immediately must still post its handler";
  io.run();
  EXPECT_TRUE(called);
}

TEST(AsioAffinity, EngineExecutorRunsHandlersOnWorkers) {
  ordo::Engine engine(test_options(2));
  ordo::asio::engine_executor ex(engine);
  std::promise<bool> p;
  ordo::asio::push(engine, {}, {}, [] { return 1; },
                   asio::bind_executor(ex, [&](std::exception_ptr, int) { p.set_value(ordo::Engine::inside_op()); }));
  EXPECT_TRUE(p.get_future().get());
}

// Without outstanding work counted while an op is pending, run() would
// return as soon as the posted lambda ran (the op is still blocked by then).
TEST(AsioAffinity, PendingOperationKeepsRunFromReturning) {
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();
  Gate gate;
  asio::io_context io;
  bool called = false;
  ordo::asio::push(engine, {}, {v}, [&] { gate.wait(); }, asio::bind_executor(io, [&](std::exception_ptr) { called = true; }));
  asio::post(io, [&] { gate.open(); });
  io.run();
  EXPECT_TRUE(called);
}

TEST(AsioAllocator, HandlerMemoryComesFromItsAllocatorAndIsFreedBeforeTheUpcall) {
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();
  asio::io_context io;
  AllocStats stats;
  int live_in_handler = -1;
  ordo::asio::push(engine, {}, {v}, [] { return 1; },
                   asio::bind_allocator(CountingAllocator<int>(&stats),
                                        asio::bind_executor(io, [&](std::exception_ptr, int) {
                                          live_in_handler = stats.live.load();
                                        })));
  io.run();
  EXPECT_GE(stats.allocations.load(), 1);
  EXPECT_EQ(live_in_handler, 0) << "the pending handler's memory must be released before it is called";
  EXPECT_EQ(stats.live.load(), 0);
}

TEST(AsioCancel, PendingPushCompletesWithOperationAbortedAndStaysOrdered) {
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();
  Gate gate;
  std::string order;
  engine.push_sync([&] { gate.wait(); order += 'G'; }, ordo::Context::cpu(), {}, {v});
  asio::io_context io;
  asio::cancellation_signal signal;
  std::error_code code;
  bool cancelled_fn_ran = false;
  ordo::asio::push(engine, {}, {v}, [&] { cancelled_fn_ran = true; return 1; },
                   asio::bind_cancellation_slot(signal.slot(), asio::bind_executor(io, [&](std::exception_ptr e, int n) {
                     EXPECT_EQ(n, 0);
                     try {
                       std::rethrow_exception(e);
                     } catch (const std::system_error& se) {
                       code = se.code();
                     }
                   })));
  ordo::asio::push(engine, {}, {v}, [&] { order += 'C'; }, asio::bind_executor(io, [](std::exception_ptr e) { EXPECT_FALSE(e); }));
  asio::post(io, [&] { signal.emit(asio::cancellation_type::terminal); });
  io.run_one();  // the emit
  io.run_one();  // the cancelled handler: posted by the emit, while the gate still holds v
  EXPECT_EQ(code, asio::error::operation_aborted);
  EXPECT_EQ(order, "");
  gate.open();
  io.run();
  EXPECT_FALSE(cancelled_fn_ran);
  EXPECT_EQ(order, "GC");
  EXPECT_EQ(engine.var_version(v), 3U);
  EXPECT_EQ(engine.pending_errors(), 0U) << "a cancelled op stores nothing on its variables";
}

TEST(AsioCancel, SignalAfterTheGrantHasNoEffect) {
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();
  Gate release;
  std::latch started(1);
  asio::io_context io;
  asio::cancellation_signal signal;
  std::exception_ptr err;
  int result = 0;
  ordo::asio::push(engine, {}, {v}, [&] { started.count_down(); release.wait(); return 9; },
                   asio::bind_cancellation_slot(signal.slot(), asio::bind_executor(io, [&](std::exception_ptr e, int n) {
                     err = e;
                     result = n;
                   })));
  started.wait();  // fn is running: the op was granted
  signal.emit(asio::cancellation_type::total);
  release.open();
  io.run();
  EXPECT_FALSE(err);
  EXPECT_EQ(result, 9);
}

TEST(AsioCancel, AwaitableCancelledThroughCoSpawnSlot) {
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();
  Gate gate;
  engine.push_sync([&] { gate.wait(); }, ordo::Context::cpu(), {}, {v});
  asio::io_context io;
  asio::cancellation_signal signal;
  std::exception_ptr outcome;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    co_await ordo::asio::wait_for(engine, v, asio::use_awaitable);
  }, asio::bind_cancellation_slot(signal.slot(), [&](std::exception_ptr e) { outcome = e; }));
  asio::post(io, [&] { signal.emit(asio::cancellation_type::terminal); });
  io.run();
  ASSERT_TRUE(outcome);
  try {
    std::rethrow_exception(outcome);
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), asio::error::operation_aborted);
  }
  gate.open();
  engine.wait_for_var(v);
}

TEST(AsioErrors, ExceptionOfFnReachesTheHandlerAndTheVariable) {
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();
  asio::io_context io;
  std::string message;
  ordo::asio::push(engine, {}, {v}, []() -> int { throw std::runtime_error("bad request"); },
                   asio::bind_executor(io, [&](std::exception_ptr e, int) {
                     try {
                       std::rethrow_exception(e);
                     } catch (const std::runtime_error& r) {
                       message = r.what();
                     }
                   }));
  io.run();
  EXPECT_EQ(message, "bad request");
  // A later reader of v is skipped and gets the original exception...
  io.restart();
  EXPECT_THROW(run_coro(io, [&]() -> asio::awaitable<int> {
                 co_return co_await ordo::asio::push(engine, ordo::reads(v), ordo::writes(), [] { return 1; },
                                                     asio::use_awaitable);
               }),
               std::runtime_error);
  // ...and so does wait_for, which (unlike wait_for_var) leaves it on v.
  EXPECT_THROW(run_coro(io, [&]() -> asio::awaitable<void> { co_await ordo::asio::wait_for(engine, v, asio::use_awaitable); }),
               std::runtime_error);
  EXPECT_THROW(engine.wait_for_var(v), std::runtime_error);
  engine.wait_for_var(v);  // cleared
}

TEST(AsioErrors, MisuseThrowsFromTheInitiatingFunction) {
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();
  engine.delete_variable(v);
  asio::io_context io;
  try {
    ordo::asio::push(engine, {v}, {}, [] {}, asio::bind_executor(io, [](std::exception_ptr) { ADD_FAILURE(); }));
    FAIL() << "pushing a deleted variable must throw";
  } catch (const ordo::Error& e) {
    EXPECT_EQ(e.code(), ordo::Errc::deleted_var);
    const std::error_code ec = ordo::error_code_of(e);
    EXPECT_EQ(ec, ordo::Errc::deleted_var);
    EXPECT_STREQ(ec.category().name(), "ordo");
    EXPECT_EQ(ec.message(), "variable was deleted");
  }
  EXPECT_EQ(io.run(), 0U) << "no handler may be left behind by a failed initiation";
  std::error_code cancelled = ordo::Errc::cancelled;
  EXPECT_NE(cancelled, std::error_code(asio::error::operation_aborted));
  EXPECT_EQ(cancelled.message(), "cancelled before it ran");
}

TEST(AsioWaitFor, CompletesOnlyAfterEarlierWrites) {
  IoThread io;  // before the engine, so every handler runs (docs/asio.md, "Lifetime")
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();
  Gate gate;
  std::atomic<bool> write_done{false};
  engine.push_sync([&] { gate.wait(); write_done = true; }, ordo::Context::cpu(), {}, {v});
  std::promise<bool> seen;
  ordo::asio::wait_for(engine, v, asio::bind_executor(io.io(), [&](std::exception_ptr e) {
    EXPECT_FALSE(e);
    seen.set_value(write_done.load());
  }));
  auto f = seen.get_future();
  EXPECT_EQ(f.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  gate.open();
  EXPECT_TRUE(f.get());
}

// Many threads push and cancel at once (for ThreadSanitizer): the grant and
// the cancellation race on one flag; every handler runs exactly once.
TEST(AsioStress, ConcurrentPushesAndCancellations) {
  IoThread a, b;  // before the engine, so every handler runs (docs/asio.md, "Lifetime")
  ordo::Engine engine(test_options(2));
  std::vector<ordo::Var> vars;
  for (int i = 0; i < 4; ++i) vars.push_back(engine.new_variable());
  constexpr int kPerThread = 400;
  std::atomic<int> completions{0}, aborted{0}, ran{0};
  std::latch done(2 * kPerThread);
  auto drive = [&](IoThread& t, unsigned seed) {
    asio::post(t.io(), [&, seed] {
      auto signals = std::make_shared<std::vector<asio::cancellation_signal>>(kPerThread);
      for (int i = 0; i < kPerThread; ++i) {
        const ordo::Var w = vars[(seed + static_cast<unsigned>(i)) % vars.size()];
        ordo::asio::push(engine, {vars[0]}, {w}, [&] { ran.fetch_add(1); return 1; },
                         asio::bind_cancellation_slot((*signals)[static_cast<std::size_t>(i)].slot(),
                                                      asio::bind_executor(t.io(), [&, signals](std::exception_ptr e, int) {
                                                        completions.fetch_add(1);
                                                        if (e) aborted.fetch_add(1);
                                                        done.count_down();
                                                      })));
        if (i % 3 == 0) {
          asio::post(t.io(), [signals, i] { (*signals)[static_cast<std::size_t>(i)].emit(asio::cancellation_type::terminal); });
        }
      }
    });
  };
  drive(a, 1);
  drive(b, 2);
  done.wait();
  engine.wait_for_all();
  EXPECT_EQ(completions.load(), 2 * kPerThread);
  EXPECT_EQ(ran.load() + aborted.load(), 2 * kPerThread);
}

}  // namespace

// ordo::asio's inline path (detail/asio_inline.hpp): when push() runs an
// inline_ok fn on the calling io thread (never without the flag), and that
// everything else holds when it does:
// handlers still posted to their executors, push order, errors, the wait
// guard inside ops, cancellation.
//
// fn's cost is what the policy learns from earlier runs; the tests set it
// (white box) so that the decision does not depend on how fast this machine
// ran a previous fn.
#include <asio/experimental/deferred.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <future>
#include <iostream>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "asio/asio_test_util.hpp"

namespace {

using namespace ordo_asio_test;

/// The inline path is opt-in: fn must be pushed with OpAttrs::inline_ok.
const ordo::OpAttrs kInline{.inline_ok = true};

constexpr std::int64_t kTrivial = 0;                                       // inline whenever ready
constexpr std::int64_t kModerate = 50'000;                                 // inline only when nothing else
constexpr std::int64_t kHeavy = 1'000'000;                                 // above the cost limit: always offloaded

/// Sets the learned run time of fn type F.
template <class F>
void set_cost(const F&, std::int64_t ns) {
  ordo::asio_detail::g_fn_cost_ns<F>.store(ns);
}

/// From a handler running on `io`: makes this thread a known io thread of
/// io, as the first attached handler does in a server. wait_for runs inline
/// (an async launcher), so no worker is involved and nothing stays in flight.
void register_io_thread(ordo::Engine& e, asio::io_context& io) {
  ordo::Var fresh = e.new_variable();
  ordo::asio::wait_for(e, fresh, asio::bind_executor(io, [](std::exception_ptr) {}));
}

TEST(AsioInline, TrivialFnRunsInsidePushOnTheIoThreadAndTheHandlerIsStillPosted) {
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();
  asio::io_context io;
  auto strand = asio::make_strand(io);
  const auto me = std::this_thread::get_id();
  std::thread::id fn_thread;
  bool fn_inside_op = false;
  auto fn = [&] {
    fn_thread = std::this_thread::get_id();
    fn_inside_op = ordo::Engine::inside_op();
    return 7;
  };
  set_cost(fn, kTrivial);
  bool ran_before_push_returned = false, called_inside_push = false, called = false, strand_ok = false;
  int got = 0;
  asio::post(io, [&] {
    register_io_thread(engine, io);
    ordo::asio::push(engine, {}, {v}, fn, ordo::Context::cpu(), kInline, asio::bind_executor(strand, [&](std::exception_ptr e, int n) {
                       EXPECT_FALSE(e);
                       got = n;
                       called = true;
                       strand_ok = strand.running_in_this_thread() && !ordo::Engine::inside_op();
                     }));
    ran_before_push_returned = fn_thread == me;
    called_inside_push = called;
  });
  io.run();
  EXPECT_TRUE(ran_before_push_returned) << "a trivial fn, ready at push on a known io thread, runs inside push";
  EXPECT_TRUE(fn_inside_op) << "fn runs as an op body (blocking engine waits inside it throw)";
  EXPECT_FALSE(called_inside_push) << "the handler is posted, never run inside the initiating function";
  EXPECT_TRUE(called);
  EXPECT_TRUE(strand_ok) << "the handler runs on its associated executor (the strand)";
  EXPECT_EQ(got, 7);
  EXPECT_EQ(engine.var_version(v), 1U);
}

// The kv_server path: use_awaitable handlers carry an any_io_executor; the
// first awaited push makes the thread known, the next ones run inline.
TEST(AsioInline, AwaitedPushesFromACoroutineRunOnItsIoThread) {
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();
  asio::io_context io;
  const auto me = std::this_thread::get_id();
  std::vector<bool> on_io;
  auto fn = [&] {
    on_io.push_back(std::this_thread::get_id() == me);
    return static_cast<int>(on_io.size());
  };
  run_coro(io, [&]() -> asio::awaitable<void> {
    for (int i = 1; i <= 5; ++i) {
      set_cost(fn, kTrivial);
      auto op = ordo::asio::push(engine, ordo::reads(), ordo::writes(v), fn, ordo::Context::cpu(), kInline, asio::use_awaitable);
      EXPECT_EQ(co_await std::move(op), i);
    }
  });
  ASSERT_EQ(on_io.size(), 5U);
  EXPECT_FALSE(on_io[0]) << "before any handler was attached on it, the thread is not known as an io thread";
  for (std::size_t i = 1; i < on_io.size(); ++i) EXPECT_TRUE(on_io[i]) << "push " << i;
}

TEST(AsioInline, HeavyFnIsOffloadedEvenFromAnIdleIoThread) {
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();
  asio::io_context io;
  const auto me = std::this_thread::get_id();
  std::thread::id fn_thread;
  auto fn = [&] { fn_thread = std::this_thread::get_id(); };
  set_cost(fn, kHeavy);
  bool done = false;
  asio::post(io, [&] {
    register_io_thread(engine, io);
    ordo::asio::push(engine, {}, {v}, fn, ordo::Context::cpu(), kInline, asio::bind_executor(io, [&](std::exception_ptr) { done = true; }));
  });
  io.run();
  EXPECT_TRUE(done);
  EXPECT_NE(fn_thread, me) << "a fn measured above kInlineCostLimitNs must run on a worker";
}

// A moderate fn runs inline only when the io thread has nothing else: the
// second request read in the same turn, or any request while the engine has
// work in flight, goes to a worker.
TEST(AsioInline, ModerateFnGoesToAWorkerWhenTheTurnOrTheEngineIsBusy) {
  ordo::Engine engine(test_options());
  ordo::Var a = engine.new_variable(), b = engine.new_variable(), c = engine.new_variable(), g = engine.new_variable();
  asio::io_context io;
  const auto me = std::this_thread::get_id();
  std::thread::id ta, tb, tc;
  auto fn = [](std::thread::id& where) { where = std::this_thread::get_id(); };
  auto fa = [&] { fn(ta); };
  auto fb = [&] { fn(tb); };
  auto fc = [&] { fn(tc); };
  set_cost(fa, kModerate);
  set_cost(fb, kModerate);
  set_cost(fc, kModerate);
  Gate gate;
  auto blocker = [&] { gate.wait(); };
  set_cost(blocker, kHeavy);
  int completed = 0;
  auto second_turn = [&] {
    // Both earlier completions have run: the turn is clear, but the blocker
    // holds a worker, so the engine is busy.
    ordo::asio::push(engine, {}, {g}, blocker, ordo::Context::cpu(), kInline, asio::bind_executor(io, [&](std::exception_ptr) { ++completed; }));
    ordo::asio::push(engine, {}, {c}, fc, ordo::Context::cpu(), kInline, asio::bind_executor(io, [&](std::exception_ptr) {
                       ++completed;
                       gate.open();
                     }));
  };
  asio::post(io, [&] {
    register_io_thread(engine, io);
    ordo::asio::push(engine, {}, {a}, fa, ordo::Context::cpu(), kInline, asio::bind_executor(io, [&](std::exception_ptr) {
                       if (++completed == 2) second_turn();
                     }));
    ordo::asio::push(engine, {}, {b}, fb, ordo::Context::cpu(), kInline, asio::bind_executor(io, [&](std::exception_ptr) {
                       if (++completed == 2) second_turn();
                     }));
  });
  io.run();
  EXPECT_EQ(completed, 4);
  EXPECT_EQ(ta, me) << "first moderate request of an idle turn on an idle engine: inline";
  EXPECT_NE(tb, me) << "second request of the same turn: a worker";
  EXPECT_NE(tc, me) << "engine busy (the blocker holds a worker): a worker";
}

// An inline run counts its completion as pending on the io_context until
// the handler runs; an operation dropped unstarted must give that back, or
// the io thread would offload for ever after.
TEST(AsioInline, DroppedOperationGivesItsTurnBack) {
  ordo::Engine engine(test_options());
  ordo::Var a = engine.new_variable(), b = engine.new_variable();
  asio::io_context io;
  const auto me = std::this_thread::get_id();
  std::thread::id ta, tb;
  auto fa = [&] { ta = std::this_thread::get_id(); };
  auto fb = [&] { tb = std::this_thread::get_id(); };
  set_cost(fa, kModerate);
  set_cost(fb, kModerate);
  bool done = false;
  asio::post(io, [&] {
    register_io_thread(engine, io);
    {
      auto dropped = ordo::asio::push(engine, {}, {a}, fa, ordo::Context::cpu(), kInline, asio::experimental::deferred);
      (void)dropped;
    }
    ordo::asio::push(engine, {}, {b}, fb, ordo::Context::cpu(), kInline, asio::bind_executor(io, [&](std::exception_ptr) { done = true; }));
  });
  io.run();
  EXPECT_TRUE(done);
  EXPECT_EQ(ta, me);
  EXPECT_EQ(tb, me) << "the dropped operation's pending completion was not given back";
}

TEST(AsioInline, NoInlineRunOnAThreadThatIsNotRunningTheIoContext) {
  IoThread t;  // before the engine, so every handler runs (docs/asio.md, "Lifetime")
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();
  const auto me = std::this_thread::get_id();
  std::thread::id fn_thread;
  auto fn = [&] { fn_thread = std::this_thread::get_id(); };
  for (int i = 0; i < 3; ++i) {
    set_cost(fn, kTrivial);
    std::promise<void> p;
    ordo::asio::push(engine, {}, {v}, fn, ordo::Context::cpu(), kInline, asio::bind_executor(t.io(), [&](std::exception_ptr) { p.set_value(); }));
    p.get_future().get();
    EXPECT_NE(fn_thread, me) << "push " << i << " from a thread that runs no io_context";
  }
}

TEST(AsioInline, ExceptionOfAnInlineFnReachesTheHandlerAndTheVariable) {
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();
  asio::io_context io;
  const auto me = std::this_thread::get_id();
  std::thread::id fn_thread;
  auto fn = [&]() -> int {
    fn_thread = std::this_thread::get_id();
    throw std::runtime_error("bad request");
  };
  set_cost(fn, kTrivial);
  std::string message;
  asio::post(io, [&] {
    register_io_thread(engine, io);
    ordo::asio::push(engine, {}, {v}, fn, ordo::Context::cpu(), kInline, asio::bind_executor(io, [&](std::exception_ptr e, int n) {
                       EXPECT_EQ(n, 0);
                       try {
                         std::rethrow_exception(e);
                       } catch (const std::runtime_error& r) {
                         message = r.what();
                       }
                     }));
  });
  io.run();
  EXPECT_EQ(fn_thread, me);
  EXPECT_EQ(message, "bad request");
  EXPECT_THROW(engine.wait_for_var(v), std::runtime_error) << "stored on the variable the op mutates";
}

TEST(AsioInline, BlockingEngineWaitInsideAnInlineFnThrows) {
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable(), other = engine.new_variable();
  asio::io_context io;
  const auto me = std::this_thread::get_id();
  std::thread::id fn_thread;
  ordo::Errc code{};
  auto fn = [&] {
    fn_thread = std::this_thread::get_id();
    try {
      engine.wait_for_var(other);
    } catch (const ordo::Error& e) {
      code = e.code();
    }
  };
  set_cost(fn, kTrivial);
  asio::post(io, [&] {
    register_io_thread(engine, io);
    ordo::asio::push(engine, {}, {v}, fn, ordo::Context::cpu(), kInline, asio::bind_executor(io, [](std::exception_ptr e) { EXPECT_FALSE(e); }));
  });
  io.run();
  EXPECT_EQ(fn_thread, me);
  EXPECT_EQ(code, ordo::Errc::wait_inside_op) << "an inline fn is an op body: the deadlock guard must hold";
}

TEST(AsioInline, CancellationAfterAnInlineRunHasNoEffect) {
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();
  asio::io_context io;
  const auto me = std::this_thread::get_id();
  std::thread::id fn_thread;
  auto fn = [&] {
    fn_thread = std::this_thread::get_id();
    return 5;
  };
  set_cost(fn, kTrivial);
  asio::cancellation_signal signal;
  std::exception_ptr err;
  int got = 0;
  asio::post(io, [&] {
    register_io_thread(engine, io);
    ordo::asio::push(engine, {}, {v}, fn, ordo::Context::cpu(), kInline, asio::bind_cancellation_slot(signal.slot(), asio::bind_executor(io, [&](std::exception_ptr e, int n) {
                       err = e;
                       got = n;
                     })));
    signal.emit(asio::cancellation_type::terminal);  // fn already ran: too late
  });
  io.run();
  EXPECT_EQ(fn_thread, me);
  EXPECT_FALSE(err);
  EXPECT_EQ(got, 5);
}

// An inline run finds its outcome ready when the operation starts: the
// upcall is posted straight away, with memory from the handler's allocator,
// released before the handler runs.
TEST(AsioInline, HandlerOfAnInlineRunUsesItsAllocator) {
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();
  asio::io_context io;
  const auto me = std::this_thread::get_id();
  std::thread::id fn_thread;
  auto fn = [&] {
    fn_thread = std::this_thread::get_id();
    return 3;
  };
  set_cost(fn, kTrivial);
  AllocStats stats;
  int live_in_handler = -1, got = 0;
  asio::post(io, [&] {
    register_io_thread(engine, io);
    ordo::asio::push(engine, {}, {v}, fn, ordo::Context::cpu(), kInline, asio::bind_allocator(CountingAllocator<int>(&stats), asio::bind_executor(io, [&](std::exception_ptr, int n) {
                                            got = n;
                                            live_in_handler = stats.live.load();
                                          })));
  });
  io.run();
  EXPECT_EQ(fn_thread, me);
  EXPECT_EQ(got, 3);
  EXPECT_GE(stats.allocations.load(), 1);
  EXPECT_EQ(live_in_handler, 0) << "the posted upcall's memory must be released before the handler is called";
  EXPECT_EQ(stats.live.load(), 0);
}

// Differential: random reads/writes over a few variables, pushed from a
// coroutine and awaited in random order; fns of three cost classes, so some
// run inline at push, some on the worker that frees their variables, some
// offloaded. Every read must see, and the final values must be, what a
// serial run in push order gives.
TEST(AsioInline, MixedInlineAndOffloadedOpsMatchASerialRun) {
  constexpr int kVars = 4, kOps = 400;
  for (int round = 0; round < 3; ++round) {
    const unsigned seed = std::random_device{}();
    std::cout << "AsioInline.MixedInlineAndOffloadedOpsMatchASerialRun seed=" << seed << "\n";
    SCOPED_TRACE("seed=" + std::to_string(seed));
    std::mt19937 rng(seed);
    struct Op {
      std::vector<int> reads, writes;
      int cls = 0;
    };
    std::vector<Op> ops(kOps);
    for (Op& op : ops) {
      std::vector<int> vs{0, 1, 2, 3};
      std::shuffle(vs.begin(), vs.end(), rng);
      const int nr = static_cast<int>(rng() % 3), nw = static_cast<int>(rng() % 3);
      for (int i = 0; i < nw; ++i) op.writes.push_back(vs[static_cast<std::size_t>(i)]);
      for (int i = nw; i < nw + nr && i < kVars; ++i) op.reads.push_back(vs[static_cast<std::size_t>(i)]);
      if (op.reads.empty() && op.writes.empty()) op.writes.push_back(vs[0]);
      op.cls = static_cast<int>(rng() % 3);
    }
    // Serial reference: op i reads (sum of its reads' values), then sets
    // each written value to value * 1000003 + i + 1.
    std::vector<std::uint64_t> ref(kVars, 0), want_seen(kOps);
    for (int i = 0; i < kOps; ++i) {
      std::uint64_t seen = 0;
      for (int r : ops[static_cast<std::size_t>(i)].reads) seen = seen * 31 + ref[static_cast<std::size_t>(r)];
      want_seen[static_cast<std::size_t>(i)] = seen;
      for (int w : ops[static_cast<std::size_t>(i)].writes) {
        ref[static_cast<std::size_t>(w)] = ref[static_cast<std::size_t>(w)] * 1000003 + static_cast<std::uint64_t>(i) + 1;
      }
    }

    ordo::Engine engine(test_options(2));
    std::vector<ordo::Var> vars;
    for (int i = 0; i < kVars; ++i) vars.push_back(engine.new_variable());
    std::vector<std::uint64_t> vals(kVars, 0);  // vals[k] is guarded by vars[k]
    auto body = [&vals, &ops](int i) {
      const Op& op = ops[static_cast<std::size_t>(i)];
      std::uint64_t seen = 0;
      for (int r : op.reads) seen = seen * 31 + vals[static_cast<std::size_t>(r)];
      for (int w : op.writes) vals[static_cast<std::size_t>(w)] = vals[static_cast<std::size_t>(w)] * 1000003 + static_cast<std::uint64_t>(i) + 1;
      return seen;
    };
    asio::io_context io;
    int mismatches = 0;
    run_coro(io, [&]() -> asio::awaitable<void> {
      std::deque<std::pair<int, asio::awaitable<std::uint64_t>>> pending;
      auto await_one = [&](std::size_t k) -> asio::awaitable<void> {
        auto [i, aw] = std::move(pending[k]);
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(k));
        if (co_await std::move(aw) != want_seen[static_cast<std::size_t>(i)]) ++mismatches;
      };
      for (int i = 0; i < kOps; ++i) {
        const Op& op = ops[static_cast<std::size_t>(i)];
        std::vector<ordo::Var> r, w;
        for (int k : op.reads) r.push_back(vars[static_cast<std::size_t>(k)]);
        for (int k : op.writes) w.push_back(vars[static_cast<std::size_t>(k)]);
        // Three fn types, one per cost class.
        auto trivial = [&body, i] { return body(i); };
        auto moderate = [&body, i] { return body(i); };
        auto heavy = [&body, i] { return body(i); };
        set_cost(trivial, kTrivial);
        set_cost(moderate, kModerate);
        set_cost(heavy, kHeavy);
        const ordo::VarSpan rs(r), ws(w);
        if (op.cls == 0) {
          pending.emplace_back(i, ordo::asio::push(engine, rs, ws, trivial, ordo::Context::cpu(), kInline, asio::use_awaitable));
        } else if (op.cls == 1) {
          pending.emplace_back(i, ordo::asio::push(engine, rs, ws, moderate, ordo::Context::cpu(), kInline, asio::use_awaitable));
        } else {
          pending.emplace_back(i, ordo::asio::push(engine, rs, ws, heavy, ordo::Context::cpu(), kInline, asio::use_awaitable));
        }
        for (unsigned n = rng() % 3; n > 0 && !pending.empty(); --n) co_await await_one(rng() % pending.size());
      }
      while (!pending.empty()) co_await await_one(rng() % pending.size());
    });
    EXPECT_EQ(mismatches, 0);
    EXPECT_EQ(vals, ref);
  }
}

TEST(AsioInline, WithoutInlineOkEvenATrivialFnRunsOnAWorker) {
  // The io thread is never taken hostage by a body it handed off: only fn
  // pushed with OpAttrs::inline_ok may run inside push.
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();
  asio::io_context io;
  const auto me = std::this_thread::get_id();
  int on_io_thread = 0;  // written by fn, which runs in push order on v
  auto fn = [&] {
    if (std::this_thread::get_id() == me) ++on_io_thread;
  };
  set_cost(fn, kTrivial);
  int completed = 0;
  asio::post(io, [&] {
    register_io_thread(engine, io);
    for (int i = 0; i < 100; ++i) {
      ordo::asio::push(engine, {}, {v}, fn, asio::bind_executor(io, [&](std::exception_ptr e) {
                         EXPECT_FALSE(e);
                         ++completed;
                       }));
    }
  });
  io.run();
  EXPECT_EQ(completed, 100);
  EXPECT_EQ(on_io_thread, 0);
}

}  // namespace

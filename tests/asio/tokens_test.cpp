// Every completion token ordo::asio operations must work with: callbacks,
// use_awaitable, use_future, deferred, as_tuple, parallel_group, && / ||.
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/experimental/deferred.hpp>
#include <asio/experimental/parallel_group.hpp>
#include <gtest/gtest.h>

#include <array>
#include <optional>
#include <stop_token>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "asio/asio_test_util.hpp"

namespace {

using namespace ordo_asio_test;
using asio::experimental::deferred;

/// push_signature_t<F> names a signature: for a non-callable F (a
/// std::stop_token) that is a substitution failure, not a hard error.
template <class F>
concept has_push_signature = requires { typename ordo::asio::push_signature_t<F>; };

TEST(AsioTokens, CallbackGetsResultOnItsExecutor) {
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();
  asio::io_context io;
  int got = 0;
  bool on_io_thread = false;
  const auto me = std::this_thread::get_id();
  ordo::asio::push(engine, {}, {v}, [] { return 41 + 1; },
                   asio::bind_executor(io, [&](std::exception_ptr e, int n) {
                     EXPECT_FALSE(e);
                     got = n;
                     on_io_thread = std::this_thread::get_id() == me && !ordo::Engine::inside_op();
                   }));
  io.run();  // returns only after the handler ran: the operation counts as work
  EXPECT_EQ(got, 42);
  EXPECT_TRUE(on_io_thread);
}

TEST(AsioTokens, VoidFunctionHasExceptionPtrOnlySignature) {
  static_assert(std::is_same_v<ordo::asio::push_signature_t<void (*)()>, void(std::exception_ptr)>);
  static_assert(std::is_same_v<ordo::asio::push_signature_t<int (*)()>, void(std::exception_ptr, int)>);
  static_assert(std::is_same_v<ordo::asio::push_signature_t<int (*)(const ordo::RunContext&)>,
                               void(std::exception_ptr, int)>);
  // Regression: FnBody::call's deduced return type made this a hard error
  // (g++ and clang 14), as coro.hpp's fn_result_t was before bbe4dea.
  static_assert(!has_push_signature<std::stop_token>);
  static_assert(has_push_signature<int (*)()>);
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();
  asio::io_context io;
  int ran = 0;
  bool called = false;
  ordo::asio::push(engine, {}, {v}, [&] { ++ran; }, asio::bind_executor(io, [&](std::exception_ptr e) {
                     EXPECT_FALSE(e);
                     called = true;
                   }));
  io.run();
  EXPECT_EQ(ran, 1);
  EXPECT_TRUE(called);
}

TEST(AsioTokens, UseAwaitable) {
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();
  asio::io_context io;
  int value = 0;
  const int r = run_coro(io, [&]() -> asio::awaitable<int> {
    for (int i = 0; i < 100; ++i) {
      co_await ordo::asio::push(engine, ordo::reads(), ordo::writes(v), [&] { ++value; }, asio::use_awaitable);
    }
    co_await ordo::asio::wait_for(engine, v, asio::use_awaitable);
    co_return co_await ordo::asio::push(engine, ordo::reads(v), ordo::writes(), [&] { return value * 2; },
                                        asio::use_awaitable);
  });
  EXPECT_EQ(r, 200);
}

TEST(AsioTokens, UseFuture) {
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();
  std::future<std::string> f =
      ordo::asio::push(engine, {}, {v}, [] { return std::string("from a worker"); }, asio::use_future);
  EXPECT_EQ(f.get(), "from a worker");
  std::future<void> g = ordo::asio::push(engine, {v}, {}, [] { throw std::runtime_error("boom"); }, asio::use_future);
  EXPECT_THROW(g.get(), std::runtime_error);
}

TEST(AsioTokens, DeferredLaunchedLaterWithAnyToken) {
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();
  asio::io_context io;
  auto op = ordo::asio::push(engine, {}, {v}, [] { return 7; }, deferred);
  int got = 0;
  std::move(op)(asio::bind_executor(io, [&](std::exception_ptr e, int n) {
    EXPECT_FALSE(e);
    got = n;
  }));
  io.run();
  EXPECT_EQ(got, 7);
  // A deferred operation composes with use_awaitable too.
  io.restart();
  const int r = run_coro(io, [&]() -> asio::awaitable<int> {
    auto d = ordo::asio::push(engine, ordo::reads(v), ordo::writes(), [] { return 8; }, deferred);
    co_return co_await std::move(d)(asio::use_awaitable);
  });
  EXPECT_EQ(r, 8);
}

TEST(AsioTokens, DeferredLaunchedTwiceThrows) {
  ordo::Engine engine(test_options());
  asio::io_context io;
  auto op = ordo::asio::push(engine, {}, {}, [] { return 1; }, deferred);
  auto copy = op;
  int calls = 0;
  copy(asio::bind_executor(io, [&](std::exception_ptr, int) { ++calls; }));
  try {
    op(asio::bind_executor(io, [&](std::exception_ptr, int) { ++calls; }));
    FAIL() << "a second launch must throw";
  } catch (const ordo::Error& e) {
    EXPECT_EQ(e.code(), ordo::Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("started twice"), std::string::npos) << e.what();
  }
  io.run();
  EXPECT_EQ(calls, 1);
}

TEST(AsioTokens, AsTuple) {
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();
  asio::io_context io;
  auto [e1, n] = run_coro(io, [&]() -> asio::awaitable<std::tuple<std::exception_ptr, int>> {
    co_return co_await ordo::asio::push(engine, ordo::reads(), ordo::writes(v), [] { return 5; },
                                        asio::experimental::as_tuple(asio::use_awaitable));
  });
  EXPECT_FALSE(e1);
  EXPECT_EQ(n, 5);
  auto [e2, m] = run_coro(io, [&]() -> asio::awaitable<std::tuple<std::exception_ptr, int>> {
    co_return co_await ordo::asio::push(engine, ordo::reads(), ordo::writes(), []() -> int { throw 3; },
                                        asio::experimental::as_tuple(asio::use_awaitable));
  });
  ASSERT_TRUE(e2);
  EXPECT_EQ(m, 0);  // T{} beside an error
  try {
    std::rethrow_exception(e2);
  } catch (int x) {
    EXPECT_EQ(x, 3);
  }
}

TEST(AsioTokens, ParallelGroupWaitForAll) {
  ordo::Engine engine(test_options());
  ordo::Var a = engine.new_variable(), b = engine.new_variable();
  asio::io_context io;
  int x = 0, y = 0;
  bool done = false;
  asio::experimental::make_parallel_group(
      ordo::asio::push(engine, {}, {a}, [] { return 1; }, deferred),
      ordo::asio::push(engine, {}, {b}, [] { return 2; }, deferred))
      .async_wait(asio::experimental::wait_for_all(),
                  asio::bind_executor(io, [&](std::array<std::size_t, 2> order, std::exception_ptr e1, int r1,
                                              std::exception_ptr e2, int r2) {
                    EXPECT_FALSE(e1);
                    EXPECT_FALSE(e2);
                    EXPECT_EQ(order.size(), 2U);
                    x = r1;
                    y = r2;
                    done = true;
                  }));
  io.run();
  EXPECT_TRUE(done);
  EXPECT_EQ(x, 1);
  EXPECT_EQ(y, 2);
}

TEST(AsioTokens, ParallelGroupWaitForOneCancelsTheBlockedOne) {
  ordo::Engine engine(test_options());
  ordo::Var free_var = engine.new_variable(), busy = engine.new_variable();
  Gate gate;
  engine.push_sync([&] { gate.wait(); }, ordo::Context::cpu(), {}, {busy});  // holds `busy`
  asio::io_context io;
  bool blocked_ran = false;
  std::size_t first = 99;
  std::exception_ptr blocked_error;
  asio::experimental::make_parallel_group(
      ordo::asio::push(engine, {}, {busy}, [&] { blocked_ran = true; return 1; }, deferred),
      ordo::asio::push(engine, {}, {free_var}, [] { return 2; }, deferred))
      .async_wait(asio::experimental::wait_for_one(),
                  asio::bind_executor(io, [&](std::array<std::size_t, 2> order, std::exception_ptr e1, int,
                                              std::exception_ptr, int) {
                    first = order[0];
                    blocked_error = e1;
                  }));
  io.run();  // the group completes once the free op finished and the blocked one was cancelled
  gate.open();
  engine.wait_for_var(busy);
  EXPECT_EQ(first, 1U);
  EXPECT_FALSE(blocked_ran) << "a cancelled op must not run fn";
  ASSERT_TRUE(blocked_error);
  try {
    std::rethrow_exception(blocked_error);
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), asio::error::operation_aborted);
  }
  EXPECT_EQ(engine.var_version(busy), 2U);  // the gate and the cancelled writer (a no-op) both count
}

TEST(AsioTokens, AwaitableOperators) {
  using namespace asio::experimental::awaitable_operators;
  ordo::Engine engine(test_options());
  ordo::Var a = engine.new_variable(), b = engine.new_variable(), busy = engine.new_variable();
  asio::io_context io;
  auto [p, q] = run_coro(io, [&]() -> asio::awaitable<std::tuple<int, int>> {
    co_return co_await (ordo::asio::push(engine, ordo::reads(), ordo::writes(a), [] { return 3; }, asio::use_awaitable) &&
                        ordo::asio::push(engine, ordo::reads(), ordo::writes(b), [] { return 4; }, asio::use_awaitable));
  });
  EXPECT_EQ(p, 3);
  EXPECT_EQ(q, 4);
  Gate gate;
  engine.push_sync([&] { gate.wait(); }, ordo::Context::cpu(), {}, {busy});
  bool blocked_ran = false;
  auto either = run_coro(io, [&]() -> asio::awaitable<std::variant<int, int>> {
    co_return co_await (
        ordo::asio::push(engine, ordo::reads(), ordo::writes(busy), [&] { blocked_ran = true; return 5; },
                         asio::use_awaitable) ||
        ordo::asio::push(engine, ordo::reads(), ordo::writes(a), [] { return 6; }, asio::use_awaitable));
  });
  gate.open();
  engine.wait_for_var(busy);
  ASSERT_EQ(either.index(), 1U);
  EXPECT_EQ(std::get<1>(either), 6);
  EXPECT_FALSE(blocked_ran);
}

}  // namespace

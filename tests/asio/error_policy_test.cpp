// OpAttrs::error_to_awaiter through ordo::asio::push (issue 32, item 8): the
// handler gets the failure, the key it mutates stays usable; without the
// flag the old behaviour (the error stays on the key) is kept.
#include <gtest/gtest.h>

#include <exception>
#include <stdexcept>

#include "asio/asio_test_util.hpp"

namespace {

using namespace ordo_asio_test;

TEST(AsioErrorPolicy, AFailedRequestDoesNotPoisonItsKey) {
  ordo::Engine engine(test_options());
  ordo::Var key = engine.new_variable();
  int value = 0;  // written by ops on `key` only
  asio::io_context io;
  int failures = 0;
  run_coro(io, [&]() -> asio::awaitable<void> {
    const ordo::OpAttrs server{.name = "set", .error_to_awaiter = true};
    co_await ordo::asio::push(engine, ordo::reads(), ordo::writes(key), [&] { value = 1; }, ordo::Context::cpu(),
                              server, asio::use_awaitable);
    try {
      co_await ordo::asio::push(engine, ordo::reads(), ordo::writes(key), [] { throw std::runtime_error("bad"); },
                                ordo::Context::cpu(), server, asio::use_awaitable);
    } catch (const std::runtime_error&) {
      ++failures;
    }
    // The next request on the same key runs and sees the last good value.
    int seen = co_await ordo::asio::push(engine, ordo::reads(key), ordo::writes(), [&] { return value; },
                                         ordo::Context::cpu(), server, asio::use_awaitable);
    EXPECT_EQ(seen, 1);
    co_await ordo::asio::wait_for(engine, key, asio::use_awaitable);  // no error on the key
  });
  EXPECT_EQ(failures, 1);
  EXPECT_EQ(engine.pending_errors(), 0U);
  EXPECT_NO_THROW(engine.wait_for_var(key));
  EXPECT_NO_THROW(engine.wait_for_all());
}

TEST(AsioErrorPolicy, WithoutTheFlagTheKeyCarriesTheError) {
  ordo::Engine engine(test_options());
  ordo::Var key = engine.new_variable();
  asio::io_context io;
  int failures = 0;
  run_coro(io, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < 2; ++i) {
      try {
        co_await ordo::asio::push(engine, ordo::reads(), ordo::writes(key),
                                  [i] { if (i == 0) throw std::runtime_error("bad"); },
                                  asio::use_awaitable);  // the second is skipped: the same error
      } catch (const std::runtime_error&) {
        ++failures;
      }
    }
  });
  EXPECT_EQ(failures, 2);
  EXPECT_THROW(engine.wait_for_var(key), std::runtime_error);
}

}  // namespace

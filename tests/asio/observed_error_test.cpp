// An op's exception handed to an Asio handler is observed: wait_for_all does
// not rethrow it again and the engine's destructor does not report it
// (docs/guide.md, "Errors and exceptions").
#include <gtest/gtest.h>

#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "asio/asio_test_util.hpp"

namespace {

using namespace ordo_asio_test;

std::string describe(const std::vector<ordo::ErrorReport>& reports) {
  std::string out;
  for (const ordo::ErrorReport& r : reports) out += "'" + r.op_name + "': " + r.message + "; ";
  return out;
}

// Regression (issue 31, item 8): fn's exception, handed to the handler, was
// rethrown again by wait_for_all and reported at destruction; so was the
// original exception handed to the handler of an op skipped because of it.
TEST(AsioObservedError, ErrorsHandedToHandlersAreNotRethrownAgain) {
  std::vector<ordo::ErrorReport> reports;
  {
    ordo::Options o = test_options();
    o.on_unobserved_error = [&](const ordo::ErrorReport& r) { reports.push_back(r); };
    ordo::Engine engine(o);
    ordo::Var v = engine.new_variable();
    ordo::Var w = engine.new_variable();
    asio::io_context io;
    int caught = 0;
    // A callback: the exception_ptr is its first argument.
    ordo::asio::push(engine, {}, {v}, []() -> int { throw std::runtime_error("bad request"); },
                     ordo::Context::cpu(), {.name = "request"},
                     asio::bind_executor(io, [&](std::exception_ptr e, int) { caught += e ? 1 : 0; }));
    io.run();
    io.restart();
    // use_awaitable rethrows it; a skipped op completes with the original one.
    run_coro(io, [&]() -> asio::awaitable<void> {
      try {
        co_await ordo::asio::push(engine, ordo::reads(), ordo::writes(w), [] { throw std::runtime_error("fn"); },
                                  asio::use_awaitable);
      } catch (const std::runtime_error&) {
        ++caught;
      }
      try {
        co_await ordo::asio::wait_for(engine, v, asio::use_awaitable);
      } catch (const std::runtime_error&) {
        ++caught;
      }
    });
    EXPECT_EQ(caught, 3);
    EXPECT_EQ(engine.pending_errors(), 0U);
    EXPECT_NO_THROW(engine.wait_for_all());
  }
  EXPECT_TRUE(reports.empty()) << describe(reports);
}

// An operation never started hands its outcome to no handler: its error is
// the engine's to report, once.
TEST(AsioObservedError, AnOperationNeverStartedLeavesItsErrorToTheEngine) {
  std::vector<ordo::ErrorReport> reports;
  {
    ordo::Options o = test_options();
    o.on_unobserved_error = [&](const ordo::ErrorReport& r) { reports.push_back(r); };
    ordo::Engine engine(o);
    ordo::Var v = engine.new_variable();
    {
      auto never = ordo::asio::push(engine, ordo::reads(), ordo::writes(v), [] { throw std::runtime_error("dropped"); },
                                    ordo::Context::cpu(), {.name = "never-started"}, asio::use_awaitable);
    }
  }
  ASSERT_EQ(reports.size(), 1U) << describe(reports);
  EXPECT_EQ(reports[0].op_name, "never-started");
}

}  // namespace

// ordo::asio::replay: a captured graph's replay as an Asio operation.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>

#include "asio/asio_test_util.hpp"

namespace {

using namespace ordo_asio_test;

TEST(AsioReplay, CallbackRunsOnItsExecutorAfterEveryOpOfTheReplay) {
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();
  std::atomic<int> sum{0};
  ordo::Graph g = engine.capture([&] {
    engine.push_sync([&] { sum += ordo::replay_arg<int>(); }, ordo::Context::cpu(), {}, {v});
    engine.push_sync([&] { sum += 10 * ordo::replay_arg<int>(); }, ordo::Context::cpu(), {v}, {});
  });
  asio::io_context io;
  int seen = -1;
  bool on_io_thread = false;
  const auto me = std::this_thread::get_id();
  ordo::asio::replay(engine, g, 2, asio::bind_executor(io, [&](std::exception_ptr e) {
                       EXPECT_FALSE(e);
                       seen = sum.load();
                       on_io_thread = std::this_thread::get_id() == me;
                     }));
  io.run();  // returns only after the handler ran: the operation counts as work
  EXPECT_EQ(seen, 22);
  EXPECT_TRUE(on_io_thread);
}

TEST(AsioReplay, AwaitableGetsTheReplaysErrorOnce) {
  ordo::Engine engine(test_options());
  ordo::Var v = engine.new_variable();
  ordo::Graph g = engine.capture([&] {
    engine.push_sync([] { throw std::runtime_error("replayed failure"); }, ordo::Context::cpu(), {}, {v});
  });
  asio::io_context io;
  std::string what;
  run_coro(io, [&]() -> asio::awaitable<void> {
    try {
      co_await ordo::asio::replay(engine, g, asio::use_awaitable);
    } catch (const std::runtime_error& e) {
      what = e.what();
    }
  });
  EXPECT_EQ(what, "replayed failure");
  EXPECT_EQ(engine.pending_errors(), 0U) << "the handler observed it: wait_for_all must not rethrow it";
}

}  // namespace

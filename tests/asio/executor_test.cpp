// ordo::asio::engine_executor: Asio handlers on an engine's workers.
#include <gtest/gtest.h>

#include <latch>
#include <stdexcept>

#include "asio/asio_test_util.hpp"

namespace {

using namespace ordo_asio_test;

TEST(AsioExecutor, PostRunsOnAWorkerNeverInline) {
  ordo::Engine engine(test_options(2));
  ordo::asio::engine_executor ex(engine);
  EXPECT_EQ(ex, ordo::asio::engine_executor(engine));
  std::promise<bool> p;
  const auto me = std::this_thread::get_id();
  asio::post(ex, [&] { p.set_value(ordo::Engine::inside_op() && std::this_thread::get_id() != me); });
  EXPECT_TRUE(p.get_future().get());
}

TEST(AsioExecutor, DispatchFromOutsideIsNotInline) {
  ordo::Engine engine(test_options(2));
  ordo::asio::engine_executor ex(engine);
  std::atomic<bool> returned{false};
  std::promise<bool> p;
  std::latch go(1);
  asio::dispatch(ex, [&] {
    go.wait();
    p.set_value(returned.load());
  });
  returned = true;  // blocking.never: dispatch returned before the function ran
  go.count_down();
  EXPECT_TRUE(p.get_future().get());
}

TEST(AsioExecutor, StrandOverEngineExecutorSerialises) {
  ordo::Engine engine(test_options(2));
  asio::strand<ordo::asio::engine_executor> strand(ordo::asio::engine_executor{engine});
  constexpr int kTasks = 2000;
  int counter = 0;  // plain int: the strand must serialise the increments
  std::atomic<int> inside{0}, overlap{0};
  std::latch done(kTasks);
  for (int i = 0; i < kTasks; ++i) {
    asio::post(strand, [&] {
      if (inside.fetch_add(1) != 0) ++overlap;
      ++counter;
      inside.fetch_sub(1);
      done.count_down();
    });
  }
  done.wait();
  EXPECT_EQ(counter, kTasks);
  EXPECT_EQ(overlap.load(), 0);
}

TEST(AsioExecutor, HandlerExceptionFailsItsOpAndReachesWaitForAll) {
  ordo::Engine engine(test_options(2));
  ordo::asio::engine_executor ex(engine);
  asio::post(ex, [] { throw std::runtime_error("handler failed"); });
  EXPECT_THROW(engine.wait_for_all(), std::runtime_error);
}

TEST(AsioExecutor, WorkGuardAndCompletionOnWorkers) {
  ordo::Engine engine(test_options(2));
  ordo::asio::engine_executor ex(engine);
  auto guard = asio::make_work_guard(ex);  // no-op tracking, but must compile and be harmless
  ordo::Var v = engine.new_variable();
  std::promise<int> p;
  ordo::asio::push(engine, {}, {v}, [] { return 11; },
                   asio::bind_executor(ex, [&](std::exception_ptr e, int n) {
                     EXPECT_FALSE(e);
                     EXPECT_TRUE(ordo::Engine::inside_op());
                     p.set_value(n);
                   }));
  EXPECT_EQ(p.get_future().get(), 11);
  guard.reset();
}

}  // namespace

namespace {

using namespace ordo_asio_test;

// execute() is Engine::post: it must not be held back by max_in_flight (an
// io_context thread handing work to a busy engine must never block).
TEST(AsioExecutor, ExecuteNeverBlocksUnderBackpressure) {
  ordo::Options o = test_options(1);
  o.max_in_flight = 4;
  ordo::Engine engine(o);
  ordo::Var v = engine.new_variable();
  Gate gate;
  for (int i = 0; i < 4; ++i) engine.push_sync([&] { gate.wait(); }, ordo::Context::cpu(), {}, {v});
  ordo::asio::engine_executor ex(engine);
  constexpr int kPosts = 50;
  std::latch ran(kPosts);
  for (int i = 0; i < kPosts; ++i) asio::post(ex, [&] { ran.count_down(); });  // would block if it were a push
  gate.open();
  ran.wait();
  engine.wait_for_all();
}

TEST(AsioExecutor, NaiveEngineStillNeverRunsInline) {
  ordo::Options o = test_options(1);
  o.kind = ordo::EngineKind::naive;
  ordo::Engine engine(o);
  ordo::asio::engine_executor ex(engine);
  std::promise<std::thread::id> p;
  asio::post(ex, [&] { p.set_value(std::this_thread::get_id()); });
  EXPECT_NE(p.get_future().get(), std::this_thread::get_id());
}

}  // namespace

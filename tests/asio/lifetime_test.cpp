// ordo::asio against the lifetime of the handler's io_context (issue 31):
// an io_context destroyed while ordo still holds handlers for it, as when it
// is declared after the engine. Asio destroys the handlers of its own
// pending operations then, without calling them; ordo::asio does the same
// with its pending ones, while the io_context is still alive, says so on
// stderr, and never touches it again.
#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <memory>
#include <string>
#include <thread>

#include "asio/asio_test_util.hpp"

namespace {

using namespace ordo_asio_test;

/// Opens a gate when destroyed: declared between the engine and the
/// io_context, it lets the engine's ops finish only after the io_context
/// is gone, and before the engine drains. (The gate itself is declared
/// before the engine: an op may still be inside wait() when it opens.)
struct OpenAtExit {
  Gate& gate;
  ~OpenAtExit() { gate.open(); }
};

/// Counts the live copies of a handler (a handler holds one).
struct Live {
  std::shared_ptr<int> token = std::make_shared<int>(0);
  [[nodiscard]] long copies() const { return token.use_count() - 1; }
};

// The order: the engine declared first, so the io_context is
// destroyed first, while ops that hold handlers for it still run. Before
// the fix the ops' completions posted to (and released work on) the freed
// io_context: a heap-use-after-free in HandlerCompletion::post under ASan.
TEST(AsioLifetime, IoContextDeclaredAfterTheEngineDropsPendingHandlers) {
  std::atomic<int> called{0};
  Live live;
  Gate gate;  // outlives the engine: its op may still be inside wait() when the gate opens
  ::testing::internal::CaptureStderr();
  {
    ordo::Engine engine(test_options());
    OpenAtExit opener{gate};
    asio::io_context io;
    ordo::Var v = engine.new_variable();
    ordo::asio::push(engine, {}, {v}, [&] { gate.wait(); }, ordo::Context::cpu(), {.name = "slow request"},
                     asio::bind_executor(io, [&, t = live.token](std::exception_ptr) { ++called; }));
    auto strand = asio::make_strand(io);
    ordo::asio::push(engine, {v}, {}, [] { return 1; }, ordo::Context::cpu(), {.name = "reply on a strand"},
                     asio::bind_executor(strand, [&, t = live.token](std::exception_ptr, int) { ++called; }));
    ordo::asio::wait_for(engine, v, asio::bind_executor(io, [&, t = live.token](std::exception_ptr) { ++called; }));
    ordo::asio::push(engine, {v}, {}, [] {}, asio::bind_executor(io, [&, t = live.token](std::exception_ptr) { ++called; }));
    EXPECT_EQ(live.copies(), 4);
  }  // io (handlers dropped), opener (the ops run), engine (drained)
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(called.load(), 0) << "a handler ran although its io_context was destroyed before it could";
  EXPECT_EQ(live.copies(), 0) << "a handler was never destroyed";
  EXPECT_NE(err.find("4 ordo::asio operations"), std::string::npos) << err;
  EXPECT_NE(err.find("op 'slow request'"), std::string::npos) << err;
  EXPECT_NE(err.find("op 'reply on a strand'"), std::string::npos) << err;
  EXPECT_NE(err.find("op 'asio::wait_for'"), std::string::npos) << err;
  EXPECT_NE(err.find("an unnamed op"), std::string::npos) << err;
}

// use_awaitable: the coroutine is suspended on the op when its io_context
// goes. Its frame is destroyed with the io_context (the handler's
// destruction hands the frame back to the io_context, which destroys it),
// never resumed, and nothing touches the freed io_context afterwards.
TEST(AsioLifetime, CoroutineSuspendedOnAnOpIsDestroyedWithItsIoContext) {
  struct Flag {
    bool& set;
    ~Flag() { set = true; }
  };
  bool resumed = false;
  bool frame_destroyed = false;
  Gate gate;
  ::testing::internal::CaptureStderr();
  {
    ordo::Engine engine(test_options());
    OpenAtExit opener{gate};
    asio::io_context io;
    ordo::Var v = engine.new_variable();
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          Flag flag{frame_destroyed};
          co_await ordo::asio::push(engine, ordo::reads(), ordo::writes(v), [&] { gate.wait(); }, ordo::Context::cpu(),
                                    {.name = "awaited"}, asio::use_awaitable);
          resumed = true;
        },
        asio::detached);
    io.poll();  // runs the coroutine up to its co_await: the handler is attached
    EXPECT_FALSE(frame_destroyed);
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(resumed);
  EXPECT_TRUE(frame_destroyed);
  EXPECT_NE(err.find("op 'awaited'"), std::string::npos) << err;
}

// The race behind the first test: ops completing on workers while their
// io_context is being destroyed. Each handler is either posted before the
// io_context shuts down (Asio then destroys it with its queue) or dropped by
// ordo::asio; none runs, each is destroyed exactly once (run under ASan and
// TSan). Round by round, the destruction starts after a different number of
// ops have completed, and the rest complete while it runs.
TEST(AsioLifetime, IoContextDestroyedWhileOpsCompleteOnWorkers) {
  ordo::Engine engine(test_options(2));
  ::testing::internal::CaptureStderr();
  for (int round = 0; round < 20; ++round) {
    constexpr int kOps = 50;
    const int before = (round * 7) % kOps;  // ops that complete before the destruction starts
    std::atomic<int> called{0};
    std::atomic<int> ran{0};
    std::latch start(1);       // `before` ops have run
    std::latch destroying(1);  // the destroyer is about to destroy io
    Live live;
    Gate gate;
    ordo::Var v = engine.new_variable();
    auto io = std::make_unique<asio::io_context>();
    std::thread destroyer([&] {
      start.wait();
      destroying.count_down();
      io.reset();  // while the rest of the ops complete on the workers
    });
    engine.push_sync([&] { gate.wait(); }, ordo::Context::cpu(), {}, {v});
    for (int i = 0; i < kOps; ++i) {  // held back by the writer above: every handler is attached first
      ordo::asio::push(
          engine, {v}, {},
          [&] {
            const int n = ran.fetch_add(1) + 1;
            if (n == before) start.count_down();
            if (n > before) destroying.wait();
            return 1;
          },
          asio::bind_executor(*io, [&, t = live.token](std::exception_ptr, int) { ++called; }));
    }
    if (before == 0) start.count_down();
    gate.open();
    destroyer.join();
    engine.wait_for_all();
    engine.delete_variable(v);
    EXPECT_EQ(called.load(), 0);
    EXPECT_EQ(live.copies(), 0);
  }
  (void)::testing::internal::GetCapturedStderr();  // one report per round
}

// The usual order (io_context first, engine drained before it goes): every
// handler runs, and nothing is said.
TEST(AsioLifetime, IoContextDeclaredFirstRunsEveryHandlerSilently) {
  std::atomic<int> called{0};
  ::testing::internal::CaptureStderr();
  {
    asio::io_context io;
    {
      ordo::Engine engine(test_options());
      ordo::Var v = engine.new_variable();
      for (int i = 0; i < 10; ++i) {
        ordo::asio::push(engine, {}, {v}, [] {}, asio::bind_executor(io, [&](std::exception_ptr) { ++called; }));
      }
    }  // the engine drains: the completions are posted to io
    io.run();
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(called.load(), 10);
}

// The engine destroyed while an io_context thread still serves requests
// that push to it (issue 43). A request in flight when the destructor
// begins is answered as usual (the drain runs it); a request the io thread
// pushes after that is refused, and its coroutine gets Errc::shutting_down
// from the co_await, once, instead of an answer that never comes. Before the
// fix the late push was accepted and lost once the drain had ended.
TEST(AsioLifetime, EngineDestroyedWhileAnIoThreadPushesAnswersEveryRequest) {
  auto* engine = new ordo::Engine(test_options(2));
  const ordo::Var held = engine->new_variable(), v = engine->new_variable(), probe = engine->new_variable();
  Gate hold_drain, release_first;
  std::latch first_running(1);        // the request in flight is running: pushed before the destructor
  std::promise<std::string> outcome;  // "ok;<refusal>" from the serving coroutine
  std::atomic<int> answers{0};
  IoThread io;
  // Holds the drain until the late request has its answer.
  engine->push_sync([&] { hold_drain.wait(); }, ordo::Context::cpu(), {}, {held}, {.name = "holds the drain"});
  asio::co_spawn(
      io.io(),
      [&]() -> asio::awaitable<void> {
        std::string got;
        try {
          const int first = co_await ordo::asio::push(*engine, ordo::reads(), ordo::writes(v),
                                                      [&] {
                                                        first_running.count_down();
                                                        release_first.wait();
                                                        return 1;
                                                      },
                                                      ordo::Context::cpu(), {.name = "in flight"}, asio::use_awaitable);
          ++answers;
          got = "ok " + std::to_string(first) + ";";
          (void)co_await ordo::asio::push(*engine, ordo::reads(v), ordo::writes(), [] { return 2; },
                                          ordo::Context::cpu(), {.name = "late request"}, asio::use_awaitable);
          got += "late request answered normally";
        } catch (const ordo::Error& e) {
          ++answers;
          got += e.code() == ordo::Errc::shutting_down ? std::string(e.what()) : "wrong code: " + std::string(e.what());
        }
        outcome.set_value(got);
      },
      asio::detached);

  first_running.wait();
  std::thread destroyer([engine] { delete engine; });
  // Once a push from this thread is refused, the destructor is draining.
  bool refused = false;
  for (const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       !refused && std::chrono::steady_clock::now() < end;) {
    try {
      engine->push_sync([] {}, ordo::Context::cpu(), {}, {probe});
      std::this_thread::yield();
    } catch (const ordo::Error&) {
      refused = true;
    }
  }
  ASSERT_TRUE(refused) << "no push was refused while the destructor ran";
  release_first.open();
  auto got = outcome.get_future();
  ASSERT_EQ(got.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "a request was never answered";
  const std::string text = got.get();
  EXPECT_EQ(text.rfind("ok 1;", 0), 0U) << text;
  EXPECT_NE(text.find("op 'late request'"), std::string::npos) << text;
  EXPECT_NE(text.find("being destroyed"), std::string::npos) << text;
  hold_drain.open();
  destroyer.join();
  EXPECT_EQ(answers.load(), 2);
}

}  // namespace

// An ordo::io::Reactor that outlives its engine (issue 43): the engine's
// destructor shuts the reactor down before it drains (requests cancelled,
// their callbacks and coroutines run on the engine), so neither destructor
// hangs and the reactor never touches the freed engine (ASan build). Before
// the fix ~Reactor blocked for ever on the freed engine's TimerService mutex.
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "io/io_test_util.hpp"
#include "ordo/coro.hpp"
#include "ordo/io.hpp"
#include "ordo/task.hpp"
#include "ordo/timer.hpp"

namespace ordo::io {
namespace {

using namespace std::chrono_literals;

/// Runs `fn` on a thread; aborts the process (a hang fails the test at
/// once, not at ctest's timeout) if it has not returned within `limit`.
template <class F>
void bounded(const char* what, F fn, std::chrono::seconds limit = 60s) {
  std::packaged_task<void()> task(std::move(fn));
  std::future<void> done = task.get_future();
  std::thread t(std::move(task));
  if (done.wait_for(limit) != std::future_status::ready) {
    std::fprintf(stderr, "%s did not return within %llds: aborting\n", what, static_cast<long long>(limit.count()));
    std::fflush(stderr);
    std::abort();
  }
  t.join();
  done.get();
}

class ReactorLifetime : public ::testing::TestWithParam<Backend> {};

TEST_P(ReactorLifetime, EngineDestroyedFirstShutsTheReactorDownAndNeitherHangs) {
  auto engine = std::make_unique<Engine>(Options{.kind = EngineKind::pooled, .cpu_workers = 2});
  auto io = std::make_unique<Reactor>(*engine, IoOptions{.backend = GetParam(), .log = [](std::string_view) {}});
  int p[2];
  ASSERT_EQ(::pipe(p), 0);  // never written: every read of it stays pending
  std::vector<char> buf(8), buf2(8);
  std::promise<std::error_code> callback;
  (void)io->read(p[0], std::as_writable_bytes(std::span(buf)), Reactor::kCurrent).then([&](const Result& r) {
    callback.set_value(r.error());
  });
  std::atomic<int> read_error{0};
  std::atomic<bool> woke{false};
  AsyncScope scope;  // joined after the engine is gone: its tasks end during the engine's drain
  auto reader = [&]() -> Task<void> {
    try {
      co_await io->read(p[0], std::as_writable_bytes(std::span(buf2)), Reactor::kCurrent);
    } catch (const IoError& e) {
      read_error = e.code().value();
    }
  };
  auto sleeper = [&]() -> Task<void> {  // under io_uring the reactor serves this sleep
    co_await sleep_for(*engine, 1h);
    woke = true;
  };
  scope.spawn(reader());
  scope.spawn(sleeper());

  bounded("the engine's destructor", [&] { engine.reset(); });
  ASSERT_EQ(callback.get_future().wait_for(0s), std::future_status::ready) << "the callback never ran";
  scope.sync_join();
  EXPECT_EQ(read_error.load(), ECANCELED);
  EXPECT_TRUE(woke.load()) << "a sleep left when the engine died wakes early";
  try {
    (void)io->read(p[0], std::as_writable_bytes(std::span(buf)), Reactor::kCurrent).then([](const Result&) {});
    ADD_FAILURE() << "a request started after the engine was destroyed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::shutting_down);
    EXPECT_NE(std::string(e.what()).find("engine was destroyed"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Reactor"), std::string::npos) << e.what();
  }
  bounded("the reactor's destructor", [&] { io.reset(); });
  ::close(p[0]);
  ::close(p[1]);
}

// A callback that the engine's destructor runs (a request the reactor's
// shutdown cancels) makes a new reactor on that engine: refused at once,
// not a deadlock on the engine's list of reactors.
TEST_P(ReactorLifetime, AReactorMadeWhileTheEngineIsDestroyedIsRefused) {
  auto engine = std::make_unique<Engine>(Options{.kind = EngineKind::pooled, .cpu_workers = 2});
  auto io = std::make_unique<Reactor>(*engine, IoOptions{.backend = GetParam(), .log = [](std::string_view) {}});
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  std::vector<char> buf(8);
  std::promise<std::string> made;
  Engine* raw = engine.get();
  (void)io->read(p[0], std::as_writable_bytes(std::span(buf)), Reactor::kCurrent).then([&](const Result&) {
    try {
      // The thread backend: a second ring mapped where the first was just
      // unmapped (liburing's raw munmap, unseen by ThreadSanitizer) reads to
      // TSan as a race between the two reapers.
      Reactor late(*raw, IoOptions{.backend = Backend::threads, .log = [](std::string_view) {}});
      made.set_value("made");
    } catch (const Error& e) {
      made.set_value(e.code() == Errc::shutting_down ? e.what() : "wrong code");
    }
  });
  bounded("the engine's destructor", [&] { engine.reset(); });
  auto got = made.get_future();
  ASSERT_EQ(got.wait_for(0s), std::future_status::ready) << "the callback never ran";
  EXPECT_NE(got.get().find("being destroyed"), std::string::npos);
  bounded("the reactor's destructor", [&] { io.reset(); });
  ::close(p[0]);
  ::close(p[1]);
}

// The usual order, for comparison: the reactor goes first and the engine
// then drains what it left.
TEST_P(ReactorLifetime, ReactorDestroyedFirstStillWorks) {
  auto engine = std::make_unique<Engine>(Options{.kind = EngineKind::pooled, .cpu_workers = 2});
  auto io = std::make_unique<Reactor>(*engine, IoOptions{.backend = GetParam(), .log = [](std::string_view) {}});
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  std::vector<char> buf(8);
  std::promise<std::error_code> callback;
  (void)io->read(p[0], std::as_writable_bytes(std::span(buf)), Reactor::kCurrent).then([&](const Result& r) {
    callback.set_value(r.error());
  });
  bounded("the reactor's destructor", [&] { io.reset(); });
  EXPECT_EQ(callback.get_future().get().value(), ECANCELED);
  bounded("the engine's destructor", [&] { engine.reset(); });
  ::close(p[0]);
  ::close(p[1]);
}

INSTANTIATE_TEST_SUITE_P(Backends, ReactorLifetime, ::testing::ValuesIn(backends()), backend_name);

}  // namespace
}  // namespace ordo::io

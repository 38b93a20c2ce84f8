// The engine's timers (ordo::sleep_for / sleep_until / with_timeout) with an
// io_uring Reactor present: the ring's timeouts serve them, no timer thread
// starts, they expire in deadline order together with io's own timers and
// deadlines, a stop cancels them at once, and those pending when the reactor
// is destroyed move to the engine's timer thread with their deadlines.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <stop_token>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "coro/coro_test_util.hpp"
#include "io/io_test_util.hpp"
#include "ordo/detail/extension.hpp"
#include "ordo/io.hpp"
#include "ordo/timer.hpp"

namespace ordo::io {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using ordo::test::run_bounded;
using ordo::test::test_seed;

std::unique_ptr<Reactor> uring_reactor(Engine& engine) {
  try {
    return std::make_unique<Reactor>(
        engine, IoOptions{.backend = Backend::uring, .log = [](std::string_view) {}});
  } catch (const Error&) {
    return nullptr;  // io_uring unavailable here
  }
}

ordo::detail::TimerService& timers(Engine& engine) { return ordo::detail::EngineExtension::timers(engine); }

/// The order in which sleepers resumed. One CPU worker and the engine's FIFO
/// queue: resumptions run in the order the expiries were delivered.
struct WakeLog {
  std::mutex m;
  std::vector<int> order;
  std::vector<Clock::time_point> at;
  explicit WakeLog(int n) : at(static_cast<std::size_t>(n)) {}
  void woke(int i) {
    std::lock_guard lock(m);
    order.push_back(i);
    at[static_cast<std::size_t>(i)] = Clock::now();
  }
};

/// Indices sorted by deadline: the expected order of expiry.
std::vector<int> by_deadline(const std::vector<Clock::time_point>& deadlines) {
  std::vector<int> idx(deadlines.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return deadlines[a] < deadlines[b]; });
  return idx;
}

/// The most by which a timer that woke later had an earlier deadline than
/// one that woke before it (0: woke in deadline order).
Clock::duration worst_inversion(const std::vector<int>& order, const std::vector<Clock::time_point>& deadline) {
  Clock::duration worst{0};
  for (std::size_t a = 0; a < order.size(); ++a) {
    for (std::size_t b = a + 1; b < order.size(); ++b) worst = std::max(worst, deadline[order[a]] - deadline[order[b]]);
  }
  return worst;
}

/// How far the ring may deliver out of deadline order: the kernel completes
/// a timeout on the thread that submitted it (task_work), so two timeouts
/// submitted by different threads come out in the order those threads get
/// to run; a loaded machine (ThreadSanitizer, a parallel build) delays one
/// by a few ms. The timer thread's order is strict.
constexpr auto kRingSlack = 10ms;

// With an io_uring reactor, sleeps start no timer thread: each is a timeout
// in the ring (Reactor::in_flight counts them). They still expire in
// deadline order (deadlines 2 ms apart, armed in random order; up to
// kRingSlack), never early.
TEST(EngineTimers, ARingServesThemWithoutATimerThreadInDeadlineOrder) {
  Engine engine{Options{.kind = EngineKind::pooled, .cpu_workers = 1}};
  auto io = uring_reactor(engine);
  if (!io) GTEST_SKIP() << "io_uring unavailable";
  const std::uint64_t seed = test_seed("engine_timers_order");
  std::mt19937_64 rng(seed);
  constexpr int kSleeps = 40;
  std::vector<int> slot(kSleeps);
  std::iota(slot.begin(), slot.end(), 0);
  std::shuffle(slot.begin(), slot.end(), rng);
  const auto base = Clock::now() + 50ms;
  std::vector<Clock::time_point> deadline(kSleeps);
  for (int i = 0; i < kSleeps; ++i) deadline[i] = base + slot[i] * 2ms;
  WakeLog log(kSleeps);
  AsyncScope scope;
  auto sleeper = [&](int i) -> Task<void> {
    co_await sleep_until(engine, deadline[i]);
    log.woke(i);
  };
  for (int i = 0; i < kSleeps; ++i) scope.spawn(sleeper(i));
  const bool armed_in_time = Clock::now() < base;
  EXPECT_EQ(timers(engine).pending(), static_cast<std::size_t>(kSleeps));
  EXPECT_GE(io->in_flight(), static_cast<std::size_t>(kSleeps)) << "each sleep is a request in the ring";
  scope.sync_join();
  EXPECT_FALSE(timers(engine).thread_started()) << "the ring served every sleep";
  EXPECT_EQ(timers(engine).pending(), 0U);
  for (int i = 0; i < kSleeps; ++i) EXPECT_GE(log.at[i], deadline[i]) << "woke early; seed " << seed;
  if (armed_in_time) {
    EXPECT_LE(worst_inversion(log.order, deadline), kRingSlack) << "seed " << seed;
  }
}

// On every engine kind, with the ring serving them: a sleep resumes after
// its deadline, on a worker (the naive engine: wherever it runs posts), and
// the engine starts no timer thread.
TEST(EngineTimers, OnEveryEngineASleepInTheRingResumesOnAWorker) {
  for (const ordo::test::EngineConfig& config : ordo::test::all_engine_configs()) {
    SCOPED_TRACE(config.label);
    Engine engine(config.options);
    auto io = uring_reactor(engine);
    if (!io) GTEST_SKIP() << "io_uring unavailable";
    run_bounded([&]() -> Task<void> {
      for (int i = 0; i < 5; ++i) {
        const auto start = Clock::now();
        co_await sleep_for(engine, 1ms);
        EXPECT_GE(Clock::now() - start, 1ms);
        if (engine.kind() != EngineKind::naive) {
          EXPECT_TRUE(Engine::inside_op()) << "resumed by a post, on a worker";
        }
      }
    }());
    EXPECT_FALSE(timers(engine).thread_started());
  }
}

// A stop cancels a sleep in the ring at once, on the stopping thread, and
// the ring's request is cancelled too (not left until its deadline); a
// with_timeout that finishes first leaves nothing in the ring.
TEST(EngineTimers, AStopCancelsASleepInTheRingAtOnce) {
  Engine engine{Options{.kind = EngineKind::pooled, .cpu_workers = 2}};
  auto io = uring_reactor(engine);
  if (!io) GTEST_SKIP() << "io_uring unavailable";
  std::stop_source stop;
  std::atomic<int> cancelled{0};
  AsyncScope scope;
  // A named lambda: the coroutine's frame refers to its captures.
  auto sleeper = [&]() -> Task<void> {
    try {
      co_await sleep_for(engine, 1h, stop.get_token());
    } catch (const CancelledError&) {
      cancelled.fetch_add(1);
    }
  };
  scope.spawn(sleeper());
  EXPECT_EQ(timers(engine).pending(), 1U);
  EXPECT_EQ(io->in_flight(), 1U);
  stop.request_stop();
  EXPECT_EQ(cancelled.load(), 1) << "resumed on the stopping thread";
  EXPECT_EQ(timers(engine).pending(), 0U);
  scope.sync_join();
  EXPECT_TRUE(eventually([&] { return io->in_flight() == 0; })) << "the ring's timeout was cancelled";
  EXPECT_EQ(run_bounded(with_timeout(engine, 1h, [](std::stop_token) -> Task<int> { co_return 7; })), 7);
  EXPECT_TRUE(eventually([&] { return io->in_flight() == 0; }));
  EXPECT_THROW(run_bounded(with_timeout(engine, 1ms,
                                        [&](std::stop_token st) -> Task<void> { co_await sleep_for(engine, 1h, st); })),
               Error);
  EXPECT_FALSE(timers(engine).thread_started());
}

// Sleeps armed before the reactor exists stay on the timer thread; those
// armed after go to the ring; the reactor's destruction hands the ring's
// back to the thread. Every one keeps its deadline (none wakes early, none
// is cancelled), and once all are on the thread they expire strictly in
// deadline order. A sleep handed back can still be stopped.
TEST(EngineTimers, SleepsCrossTheReactorsLifetimeKeepingTheirDeadlines) {
  Engine engine{Options{.kind = EngineKind::pooled, .cpu_workers = 1}};
  if (!uring_reactor(engine)) GTEST_SKIP() << "io_uring unavailable";
  const std::uint64_t seed = test_seed("engine_timers_handover");
  std::mt19937_64 rng(seed);
  constexpr int kSleeps = 30;  // a third before the reactor, the rest with it
  std::vector<int> slot(kSleeps);
  std::iota(slot.begin(), slot.end(), 0);
  std::shuffle(slot.begin(), slot.end(), rng);
  const auto base = Clock::now() + 80ms;
  std::vector<Clock::time_point> deadline(kSleeps);
  for (int i = 0; i < kSleeps; ++i) deadline[i] = base + slot[i] * 2ms;
  WakeLog log(kSleeps);
  std::atomic<int> errors{0};
  std::stop_source stop;
  std::atomic<int> cancelled{0};
  AsyncScope scope;
  auto sleeper = [&](int i) -> Task<void> {
    try {
      co_await sleep_until(engine, deadline[i]);
      log.woke(i);
    } catch (...) {
      errors.fetch_add(1);
    }
  };
  auto long_sleeper = [&]() -> Task<void> {
    try {
      co_await sleep_for(engine, 1h, stop.get_token());
    } catch (const CancelledError&) {
      cancelled.fetch_add(1);
    }
  };
  for (int i = 0; i < kSleeps / 3; ++i) scope.spawn(sleeper(i));
  const bool thread_before = timers(engine).thread_started();
  auto io = uring_reactor(engine);
  ASSERT_TRUE(io);
  for (int i = kSleeps / 3; i < kSleeps; ++i) scope.spawn(sleeper(i));
  scope.spawn(long_sleeper());
  EXPECT_GE(io->in_flight(), static_cast<std::size_t>(kSleeps - kSleeps / 3 + 1));
  io.reset();  // before any deadline: the ring's sleeps move to the thread
  const bool destroyed_in_time = Clock::now() < base;
  EXPECT_TRUE(thread_before);
  EXPECT_EQ(timers(engine).pending(), static_cast<std::size_t>(kSleeps + 1)) << "none fired, none lost";
  stop.request_stop();
  EXPECT_EQ(cancelled.load(), 1) << "a handed-back sleep is stopped at once";
  scope.sync_join();
  EXPECT_EQ(errors.load(), 0) << "a sleep was cancelled by the reactor's destruction";
  for (int i = 0; i < kSleeps; ++i) EXPECT_GE(log.at[i], deadline[i]) << "woke early; seed " << seed;
  if (destroyed_in_time) {
    EXPECT_EQ(log.order, by_deadline(deadline)) << "seed " << seed;
  }
}

// Engine sleeps, io's own sleeps and io requests' deadlines (a recv that
// never gets data) with random deadlines 2 ms apart, all kernel timers of
// one ring: each expires at or after its time, in deadline order up to
// kRingSlack (io's deadlines are relative to their submit, and a request's
// also waits for the request's cancellation).
TEST(EngineTimers, MixedWithIoTimersAndDeadlinesExpireInDeadlineOrder) {
  Engine engine{Options{.kind = EngineKind::pooled, .cpu_workers = 1}};
  auto io = uring_reactor(engine);
  if (!io) GTEST_SKIP() << "io_uring unavailable";
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  const std::uint64_t seed = test_seed("engine_timers_mixed");
  std::mt19937_64 rng(seed);
  constexpr int kTimers = 36;
  std::vector<int> slot(kTimers);
  std::iota(slot.begin(), slot.end(), 0);
  std::shuffle(slot.begin(), slot.end(), rng);
  const auto base = Clock::now() + 60ms;
  std::vector<Clock::time_point> deadline(kTimers);
  std::vector<int> kind(kTimers);
  for (int i = 0; i < kTimers; ++i) {
    deadline[i] = base + slot[i] * 2ms;
    kind[i] = static_cast<int>(rng() % 3);
  }
  WakeLog log(kTimers);
  std::atomic<int> wrong{0};
  std::vector<std::vector<char>> bufs(kTimers, std::vector<char>(1));
  AsyncScope scope;
  auto timer = [&](int i) -> Task<void> {
    const auto left = [&] { return std::chrono::duration_cast<std::chrono::nanoseconds>(deadline[i] - Clock::now()); };
    switch (kind[i]) {
      case 0:
        co_await sleep_until(engine, deadline[i]);
        break;
      case 1:
        co_await io->sleep_for(std::max(left(), std::chrono::nanoseconds(1)));
        break;
      default:
        try {
          (void)co_await io->recv(sv[0], std::as_writable_bytes(std::span(bufs[i]))).timeout(std::max(left(), std::chrono::nanoseconds(1)));
          wrong.fetch_add(1);
        } catch (const IoError& e) {
          if (e.code() != std::errc::timed_out) wrong.fetch_add(1);
        }
    }
    log.woke(i);
  };
  for (int i = 0; i < kTimers; ++i) scope.spawn(timer(i));
  const bool armed_in_time = Clock::now() < base;
  scope.sync_join();
  ::close(sv[0]);
  ::close(sv[1]);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_FALSE(timers(engine).thread_started());
  for (int i = 0; i < kTimers; ++i) EXPECT_GE(log.at[i], deadline[i]) << "woke early; seed " << seed;
  if (!armed_in_time) return;  // a stalled arming thread: deadlines passed before their timers existed
  EXPECT_LE(worst_inversion(log.order, deadline), kRingSlack) << "seed " << seed;
}

// Stops racing expiries and the reactor's destruction (run under
// ThreadSanitizer): every sleep ends exactly once, woken at or after its
// deadline or cancelled, and the engine's count of pending timers returns
// to zero.
TEST(EngineTimers, StopsExpiriesAndReactorDestructionRace) {
  Engine engine{Options{.kind = EngineKind::pooled, .cpu_workers = 2}};
  if (!uring_reactor(engine)) GTEST_SKIP() << "io_uring unavailable";
  const std::uint64_t seed = test_seed("engine_timers_race");
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 20; ++round) {
    auto io = uring_reactor(engine);
    ASSERT_TRUE(io);
    constexpr int kSleeps = 24;
    std::vector<std::stop_source> stops(kSleeps);
    std::vector<std::chrono::microseconds> d(kSleeps);
    for (auto& x : d) x = std::chrono::microseconds(rng() % 3000);
    std::atomic<int> woke{0}, cancelled{0}, early{0};
    AsyncScope scope;
    auto sleeper = [&](int i) -> Task<void> {
      const auto at = Clock::now() + d[i];
      try {
        co_await sleep_until(engine, at, stops[i].get_token());
        if (Clock::now() < at) early.fetch_add(1);
        woke.fetch_add(1);
      } catch (const CancelledError&) {
        cancelled.fetch_add(1);
      }
    };
    for (int i = 0; i < kSleeps; ++i) scope.spawn(sleeper(i));
    std::thread stopper([&, pick = rng()]() mutable {
      for (int i = 0; i < kSleeps; ++i) {
        if ((pick >> (i % 64)) & 1U) stops[i].request_stop();
      }
    });
    if (round % 2 == 0) io.reset();
    stopper.join();
    io.reset();
    scope.sync_join();
    EXPECT_EQ(woke.load() + cancelled.load(), kSleeps) << "seed " << seed;
    EXPECT_EQ(early.load(), 0) << "seed " << seed;
    EXPECT_EQ(timers(engine).pending(), 0U) << "seed " << seed;
  }
}

// The engine is destroyed after its reactor with a sleep still pending: the
// ring handed it back to the thread, which wakes it early as the engine dies
// (the rule for coroutines left on a dead engine).
TEST(EngineTimers, ASleepLeftWhenReactorAndEngineDieWakesEarly) {
  auto engine = std::make_unique<Engine>(Options{.kind = EngineKind::pooled, .cpu_workers = 1});
  auto io = uring_reactor(*engine);
  if (!io) GTEST_SKIP() << "io_uring unavailable";
  std::atomic<bool> woke{false};
  AsyncScope scope;
  auto sleeper = [&]() -> Task<void> {  // named: the frame refers to its captures
    co_await sleep_for(*engine, 1h);
    woke = true;
  };
  scope.spawn(sleeper());
  io.reset();
  EXPECT_FALSE(woke.load());
  engine.reset();
  scope.sync_join();
  EXPECT_TRUE(woke.load());
}

}  // namespace
}  // namespace ordo::io

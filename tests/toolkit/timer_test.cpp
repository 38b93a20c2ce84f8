// ordo::sleep_for / sleep_until / with_timeout: the engine's timer service.
#include <chrono>
#include <stop_token>
#include <vector>

#include "ordo/schedule.hpp"
#include "ordo/semaphore.hpp"
#include "ordo/timer.hpp"
#include "toolkit/toolkit_test_util.hpp"

namespace ordo::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class TimerEngines : public ::testing::TestWithParam<EngineConfig> {};

TEST_P(TimerEngines, SleepResumesOnAWorkerAfterTheDeadline) {
  Engine engine(GetParam().options);
  auto t = [&]() -> Task<void> {
    const auto start = Clock::now();
    co_await sleep_for(engine, 2ms);
    EXPECT_GE(Clock::now() - start, 2ms);
    if (engine.kind() != EngineKind::naive) {
      EXPECT_TRUE(Engine::inside_op()) << "resumed by a post, on a worker";
    }
    const auto until = Clock::now() + 1ms;
    co_await sleep_until(engine, until);
    EXPECT_GE(Clock::now(), until);
    co_await sleep_for(engine, 0ms);  // no suspension
    co_await sleep_until(engine, std::chrono::system_clock::now() + 1ms);
  };
  run_bounded(t());
}

INSTANTIATE_TEST_SUITE_P(All, TimerEngines, ::testing::ValuesIn(all_engine_configs()), config_name);

TEST(Timer, DeadlinesExpireInOrder) {
  const std::uint64_t seed = test_seed("timer_order");
  std::mt19937_64 rng(seed);
  Engine engine(Options{.kind = EngineKind::pooled, .cpu_workers = 2});
  const int n = 40;
  const auto base = Clock::now() + 20ms;
  std::vector<int> offsets_us(n);
  for (int& o : offsets_us) o = static_cast<int>(rng() % 20000);
  std::mutex m;
  std::vector<Clock::time_point> woke(n);
  auto sleeper = [&](int i) -> Task<void> {
    const auto at = base + std::chrono::microseconds(offsets_us[i]);
    co_await sleep_until(engine, at);
    std::lock_guard lock(m);
    woke[i] = Clock::now();
  };
  auto all = [&]() -> Task<void> {
    AsyncScope scope;
    for (int i = 0; i < n; ++i) scope.spawn(sleeper(i));
    co_await scope.join();
  };
  run_bounded(all());
  for (int i = 0; i < n; ++i) EXPECT_GE(woke[i], base + std::chrono::microseconds(offsets_us[i])) << "seed " << seed;
  EXPECT_EQ(detail::EngineExtension::timers(engine).pending(), 0U);
}

TEST(Timer, StopCancelsASleepAtOnce) {
  Engine engine(Options{.kind = EngineKind::pooled, .cpu_workers = 2});
  std::stop_source stop;
  std::atomic<int> cancelled{0};
  AsyncScope scope;
  auto sleeper = [&]() -> Task<void> {
    try {
      co_await sleep_for(engine, 1h, stop.get_token());
    } catch (const CancelledError&) {
      cancelled.fetch_add(1);
    }
  };
  scope.spawn(sleeper());
  EXPECT_EQ(detail::EngineExtension::timers(engine).pending(), 1U);
  stop.request_stop();  // resumes it here
  EXPECT_EQ(cancelled.load(), 1);
  scope.sync_join();
  EXPECT_EQ(detail::EngineExtension::timers(engine).pending(), 0U);
  EXPECT_THROW(sync_wait([&]() -> Task<void> { co_await sleep_for(engine, 1h, stop.get_token()); }()),
               CancelledError);
}

TEST(Timer, WithTimeoutCancelsTheTaskThroughItsToken) {
  Engine engine(Options{.kind = EngineKind::pooled, .cpu_workers = 2});
  Semaphore never(0);
  std::atomic<bool> saw_stop{false};
  auto slow = [&](std::stop_token st) -> Task<int> {
    try {
      co_await never.acquire(st);
    } catch (const CancelledError&) {
      saw_stop = true;
      throw;
    }
    co_return 1;
  };
  try {
    (void)run_bounded(with_timeout(engine, 2ms, slow));
    FAIL() << "no timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::timed_out);
  }
  EXPECT_TRUE(saw_stop.load()) << "joined after the stop";
  // In time: the value, and the deadline's sleep is cancelled (not left armed).
  auto fast = [&](std::stop_token) -> Task<int> { co_return 7; };
  EXPECT_EQ(run_bounded(with_timeout(engine, 1h, fast)), 7);
  EXPECT_EQ(detail::EngineExtension::timers(engine).pending(), 0U);
  // A task's own exception before the deadline.
  auto bad = [&](std::stop_token) -> Task<void> {
    co_await schedule(engine);
    throw Boom("bad");
  };
  EXPECT_THROW(run_bounded(with_timeout(engine, 1h, bad)), Boom);
}

TEST(Timer, TimersStillArmedWhenTheEngineDiesFireEarly) {
  std::atomic<bool> woke{false};
  auto engine = std::make_unique<Engine>(Options{.kind = EngineKind::pooled, .cpu_workers = 1});
  AsyncScope scope;  // joined below, after the engine is gone (the engine woke the sleeper)
  auto sleeper = [&]() -> Task<void> {
    co_await sleep_for(*engine, 1h);
    woke = true;
  };
  scope.spawn(sleeper());
  engine.reset();
  scope.sync_join();
  EXPECT_TRUE(woke.load());
}

TEST(Schedule, HopsOntoAWorkerAndYields) {
  Engine engine(Options{.kind = EngineKind::pooled, .cpu_workers = 2});
  auto t = [&]() -> Task<int> {
    EXPECT_FALSE(Engine::inside_op());
    co_await schedule(engine);
    EXPECT_TRUE(engine.on_worker_of(Context::cpu()));
    int n = 0;
    for (int i = 0; i < 100; ++i) {
      co_await yield(engine);
      ++n;
    }
    co_return n;
  };
  EXPECT_EQ(run_bounded(t()), 100);
  engine.wait_for_all();
}

}  // namespace
}  // namespace ordo::test

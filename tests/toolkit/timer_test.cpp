// ordo::sleep_for / sleep_until / with_timeout: the engine's timer service.
#include <chrono>
#include <memory>
#include <thread>
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

// Without a delegate the first timer starts the service's thread.
TEST(Timer, TheTimerThreadStartsWithTheFirstTimer) {
  Engine engine(Options{.kind = EngineKind::pooled, .cpu_workers = 1});
  EXPECT_FALSE(detail::EngineExtension::timers(engine).thread_started());
  run_bounded([&]() -> Task<void> { co_await sleep_for(engine, 1ms); }());
  EXPECT_TRUE(detail::EngineExtension::timers(engine).thread_started());
}

/// A delegate that holds its timers until the test settles them (ordo::io's
/// ring does the same with timeout requests).
struct FakeDelegate final : detail::TimerService::Delegate {
  struct Record : detail::TimerService::Claim {
    bool alive = true;  ///< not settled and not cancelled
  };
  bool arm(detail::TimerService& service, detail::TimerService::Timer* t) noexcept override {
    if (refuse) return false;
    records.push_back(std::make_unique<Record>());
    detail::TimerService::hold(*records.back(), t, this);
    (void)service;
    return true;
  }
  bool retain(detail::TimerService::Claim* c) noexcept override { return static_cast<Record*>(c)->alive; }
  void cancel(detail::TimerService::Claim* c) noexcept override {
    ++cancels;
    static_cast<Record*>(c)->alive = false;
  }
  std::vector<std::unique_ptr<Record>> records;
  bool refuse = false;
  int cancels = 0;
};

struct FiredTimer : detail::TimerService::Timer {
  std::atomic<int> fired{0};
  explicit FiredTimer(std::int64_t at) {
    deadline_ns = at;
    fire = [](detail::TimerService::Timer* t) noexcept { static_cast<FiredTimer*>(t)->fired.fetch_add(1); };
  }
};

// The service's arbitration with a delegate: an expiry fires, a disarm wins
// over a later settle and cancels the record, a hand-back moves the timer to
// the thread with its deadline, a refused arm stays on the thread.
TEST(Timer, ADelegateServesTimersAndHandsThemBack) {
  detail::TimerService service;
  FakeDelegate d;
  ASSERT_TRUE(service.attach(&d));
  FakeDelegate other;
  EXPECT_FALSE(service.attach(&other)) << "one delegate at a time";
  const std::int64_t soon = detail::TimerService::now_ns() + 2'000'000;
  // Far enough ahead to be still pending when it is handed back.
  const std::int64_t later = detail::TimerService::now_ns() + 200'000'000;
  FiredTimer expired(soon), disarmed(soon), handed(later);
  service.arm(&expired);
  service.arm(&disarmed);
  service.arm(&handed);
  ASSERT_EQ(d.records.size(), 3U);
  EXPECT_EQ(service.pending(), 3U);
  EXPECT_FALSE(service.thread_started());

  service.settle(d.records[0].get(), true);
  EXPECT_EQ(expired.fired.load(), 1);
  EXPECT_FALSE(service.disarm(&expired)) << "fired";

  EXPECT_TRUE(service.disarm(&disarmed));
  EXPECT_EQ(d.cancels, 1);
  service.settle(d.records[1].get(), true);  // the record's own end, after the cancel
  EXPECT_EQ(disarmed.fired.load(), 0);

  service.settle(d.records[2].get(), false);  // handed back: the thread keeps the deadline
  EXPECT_TRUE(service.thread_started());
  if (detail::TimerService::now_ns() < later) {
    EXPECT_EQ(service.pending(), 1U);
    EXPECT_EQ(handed.fired.load(), 0);
  }
  for (const auto limit = Clock::now() + 10s; handed.fired.load() == 0 && Clock::now() < limit;) {
    std::this_thread::yield();
  }
  EXPECT_EQ(handed.fired.load(), 1);
  EXPECT_GE(detail::TimerService::now_ns(), later) << "handed back with its deadline";

  d.refuse = true;
  FiredTimer refused(detail::TimerService::now_ns() + 3'600'000'000'000);
  service.arm(&refused);
  EXPECT_EQ(d.records.size(), 3U);
  EXPECT_EQ(service.pending(), 1U);
  EXPECT_TRUE(service.disarm(&refused));

  // Detached: a disarm of a timer it still holds cancels nothing (its owner
  // ends its records itself) and later arms go to the thread.
  d.refuse = false;
  FiredTimer held(detail::TimerService::now_ns() + 3'600'000'000'000);
  service.arm(&held);
  ASSERT_EQ(d.records.size(), 4U);
  service.detach(&d);
  EXPECT_TRUE(service.disarm(&held));
  EXPECT_EQ(d.cancels, 1);
  service.settle(d.records[3].get(), false);
  EXPECT_EQ(held.fired.load(), 0);
  EXPECT_EQ(service.pending(), 0U);
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

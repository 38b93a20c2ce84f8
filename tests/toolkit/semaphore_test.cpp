// ordo::Semaphore: permits bound the tasks inside, FIFO grants, cancellation.
#include <stop_token>
#include <string>
#include <vector>

#include "ordo/semaphore.hpp"
#include "toolkit/toolkit_test_util.hpp"

namespace ordo::test {
namespace {

TEST(Semaphore, TryAcquireAndRelease) {
  Semaphore sem(2);
  EXPECT_TRUE(sem.try_acquire());
  EXPECT_TRUE(sem.try_acquire());
  EXPECT_FALSE(sem.try_acquire());
  sem.release(2);
  EXPECT_EQ(sem.available(), 2);
  EXPECT_THROW(Semaphore(-1), Error);
}

TEST(Semaphore, WaitersAreGrantedInArrivalOrder) {
  Semaphore sem(0);
  std::vector<int> order;  // appended by the waiters, each resumed on this thread by release()
  AsyncScope scope;
  auto waiter = [&](int i) -> Task<void> {
    SemaphorePermit p = co_await sem.permit();
    order.push_back(i);
    p.release();  // gives it back at once: must not wake the next waiter out of turn
  };
  for (int i = 0; i < 5; ++i) scope.spawn(waiter(i));
  EXPECT_TRUE(order.empty());
  for (int i = 0; i < 5; ++i) {
    // Each release grants one waiter, which releases again: the next runs on that release.
    if (order.size() == static_cast<std::size_t>(i)) sem.release();
  }
  scope.sync_join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(Semaphore, CancelBeforeGrantThrowsAndTakesNoPermit) {
  Semaphore sem(0);
  std::stop_source stop;
  std::atomic<int> cancelled{0};
  std::atomic<int> granted{0};
  AsyncScope scope;
  auto waiter = [&](std::stop_token st) -> Task<void> {
    try {
      co_await sem.acquire(st);
      granted.fetch_add(1);
      sem.release();
    } catch (const CancelledError& e) {
      EXPECT_EQ(e.code(), Errc::cancelled);
      cancelled.fetch_add(1);
    }
  };
  scope.spawn(waiter(stop.get_token()));
  scope.spawn(waiter({}));
  stop.request_stop();  // resumes the first waiter here, at once
  EXPECT_EQ(cancelled.load(), 1);
  sem.release();  // goes to the second waiter (the cancelled one left the queue)
  scope.sync_join();
  EXPECT_EQ(granted.load(), 1);
  EXPECT_EQ(sem.available(), 1);
  // A token stopped before the co_await: throws without suspending.
  EXPECT_THROW(sync_wait([&]() -> Task<void> { co_await sem.acquire(stop.get_token()); }()), CancelledError);
  EXPECT_EQ(sem.available(), 1);
}

// Regression: release() settled the waiters it granted after unlocking,
// from a list that marked them linked again; a stop requested meanwhile (here
// by the first granted waiter, which resumes inside release) took the second
// for still waiting, cancelled it and lost its permit. Found as a hang of
// StressReleasesFromThreadsAndCancellations.
TEST(Semaphore, AStopAfterTheGrantLeavesTheWaiterGranted) {
  Semaphore sem(0);
  std::stop_source second_stop;
  int granted = 0;
  int cancelled = 0;
  AsyncScope scope;
  auto first = [&]() -> Task<void> {
    co_await sem.acquire();
    ++granted;
    second_stop.request_stop();  // the second waiter was granted by the same release
  };
  auto second = [&](std::stop_token st) -> Task<void> {
    try {
      co_await sem.acquire(st);
      ++granted;
    } catch (const CancelledError&) {
      ++cancelled;
    }
  };
  scope.spawn(first());
  scope.spawn(second(second_stop.get_token()));
  sem.release(2);
  scope.sync_join();
  EXPECT_EQ(granted, 2);
  EXPECT_EQ(cancelled, 0);
  EXPECT_EQ(sem.available(), 0);
}

class SemaphoreEngines : public ::testing::TestWithParam<EngineConfig> {};

// Randomized: tasks hold a permit across engine ops (which resume them on
// workers); never more than `permits` inside, every task runs once, and the
// engine-ordered sum equals the serial one.
TEST_P(SemaphoreEngines, PermitsBoundTheTasksInside) {
  const std::uint64_t seed = test_seed("semaphore");
  std::mt19937_64 rng(seed);
  Engine engine(GetParam().options);
  const int permits = 1 + static_cast<int>(rng() % 4);
  const int tasks = 40 + static_cast<int>(rng() % 60) / kScale;
  Semaphore sem(permits);
  ConcurrencyProbe probe;
  Var total = engine.new_variable();
  std::uint64_t sum = 0;  // mutated by ops writing `total` only
  std::vector<int> steps(tasks);
  for (auto& s : steps) s = 1 + static_cast<int>(rng() % 3);
  auto work = [&](int i) -> Task<void> {
    SemaphorePermit p = co_await sem.permit();
    probe.enter();
    for (int k = 0; k < steps[i]; ++k) {
      co_await push(engine, reads(), writes(total), [&sum, i, k] { sum = mix(sum, static_cast<std::uint64_t>(i * 8 + k)) ; });
    }
    probe.leave();
  };
  auto all = [&]() -> Task<void> {
    AsyncScope scope;
    for (int i = 0; i < tasks; ++i) scope.spawn(work(i));
    co_await scope.join();
  };
  run_bounded(all());
  bounded_wait(engine, total);
  EXPECT_LE(probe.max(), permits) << "seed " << seed;
  EXPECT_GE(probe.max(), 1);
  EXPECT_EQ(sem.available(), permits);
  std::uint64_t ops = 0;
  for (int s : steps) ops += static_cast<std::uint64_t>(s);
  EXPECT_EQ(engine.var_version(total), ops);
}

INSTANTIATE_TEST_SUITE_P(All, SemaphoreEngines, ::testing::ValuesIn(all_engine_configs()), config_name);

// Stress for ThreadSanitizer: releases from plain threads race with
// acquires, cancellations and grants.
TEST(Semaphore, StressReleasesFromThreadsAndCancellations) {
  const int rounds = 2000 / kScale;
  Semaphore sem(0);
  std::atomic<int> granted{0}, cancelled{0};
  {
    AsyncScope scope;
    std::vector<std::stop_source> stops(rounds);
    auto waiter = [&](std::stop_token st) -> Task<void> {
      try {
        co_await sem.acquire(st);
        granted.fetch_add(1);
      } catch (const CancelledError&) {
        cancelled.fetch_add(1);
      }
    };
    for (int i = 0; i < rounds; ++i) scope.spawn(waiter(stops[i].get_token()));
    std::thread canceller([&] {
      for (int i = 0; i < rounds; i += 2) stops[i].request_stop();
    });
    std::thread releaser([&] {
      for (int i = 0; i < rounds; ++i) sem.release();
    });
    canceller.join();
    releaser.join();
    scope.sync_join();
  }
  EXPECT_EQ(granted.load() + cancelled.load(), rounds);
  EXPECT_EQ(sem.available(), rounds - granted.load());  // every permit not taken is still there
}

}  // namespace
}  // namespace ordo::test

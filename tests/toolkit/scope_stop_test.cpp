// AsyncScope's stop source (issue 32, item 7): request_stop reaches every
// task spawned with the scope's token, wherever it waits.
#include <chrono>
#include <stop_token>

#include "ordo/channel.hpp"
#include "ordo/semaphore.hpp"
#include "ordo/timer.hpp"
#include "toolkit/toolkit_test_util.hpp"

namespace ordo::test {
namespace {

using namespace std::chrono_literals;

TEST(ScopeStop, ReachesPushesSemaphoresChannelsAndSleeps) {
  Engine engine(Options{.kind = EngineKind::pooled, .cpu_workers = 2});
  HeldVar blocker(engine);
  const Var held = blocker.var;
  Semaphore sem(0);
  Channel<int> ch(1);
  std::atomic<int> cancelled{0};
  AsyncScope scope;
  auto on_push = [&](std::stop_token st) -> Task<void> {
    try {
      co_await push(engine, reads(held), writes(), [] {}, st);
    } catch (const CancelledError&) {
      cancelled.fetch_add(1);
    }
  };
  auto on_sem = [&](std::stop_token st) -> Task<void> {
    try {
      co_await sem.acquire(st);
    } catch (const CancelledError&) {
      cancelled.fetch_add(1);
    }
  };
  auto on_channel = [&](std::stop_token st) -> Task<void> {
    try {
      (void)co_await ch.receive(st);
    } catch (const CancelledError&) {
      cancelled.fetch_add(1);
    }
  };
  auto on_sleep = [&](std::stop_token st) -> Task<void> {
    try {
      co_await sleep_for(engine, 1h, st);
    } catch (const CancelledError&) {
      cancelled.fetch_add(1);
    }
  };
  scope.spawn(on_push);
  scope.spawn(on_sem);
  scope.spawn(on_channel);
  scope.spawn(on_sleep);
  EXPECT_EQ(cancelled.load(), 0);
  EXPECT_EQ(scope.active(), 4U);
  EXPECT_TRUE(scope.request_stop());
  EXPECT_FALSE(scope.request_stop());
  EXPECT_EQ(cancelled.load(), 4) << "each waiter is resumed by the stop, at once";
  scope.sync_join();
  // Spawned after the stop: a stopped token, cancelled at its first wait.
  scope.spawn(on_sem);
  scope.sync_join();
  EXPECT_EQ(cancelled.load(), 5);
  blocker.release();
  engine.wait_for_all();
}

}  // namespace
}  // namespace ordo::test

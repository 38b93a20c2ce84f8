// tests/core/idle_task_test.cpp - the worker pool's side of detail::IdleTask,
// with a task that waits on a condition variable instead of an io_uring ring.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <latch>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/test_util.hpp"
#include "ordo/detail/extension.hpp"
#include "ordo/ordo.hpp"

namespace ordo {
namespace {

using namespace std::chrono_literals;
using detail::EngineExtension;

/// The keep a FakeTask grants: go_on() says yes until `until_ns` (steady
/// clock) and at most `limit` times, counting how often it was asked. One
/// per thread, as the pool expects: it outlives the task that granted it.
class FakeKeep final : public detail::IdleKeep {
 public:
  std::int64_t until_ns = 0;
  std::int64_t limit = -1;  ///< -1: no limit
  std::int64_t ops = 0;     ///< yes answers
  std::int64_t asks = 0;    ///< answers

  bool go_on() noexcept override {
    ++asks;
    const bool yes = now_ns() <= until_ns && (limit < 0 || ops < limit);
    if (yes) ++ops;
    return yes;
  }
  static std::int64_t now_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};
thread_local FakeKeep t_fake_keep;

/// Wanted while `wanted_flag` is set; its wait() ends on interrupt() only;
/// its run() calls `on_run` once if set, and grants a keep of `keep_ns` as
/// read before that (none if 0) and at most `keep_limit` ops. Counts its calls, and
/// any made after the test marked it detached.
class FakeTask final : public detail::IdleTask {
 public:
  std::atomic<bool> wanted_flag{true};
  std::atomic<std::int64_t> keep_ns{0};
  std::atomic<std::int64_t> keep_limit{-1};
  std::function<void()> on_run;  ///< set before attaching
  std::atomic<int> waits{0}, interrupts{0}, kept_calls{0};
  mutable std::atomic<int> calls_after_detach{0};
  std::atomic<std::int64_t> kept_ops{0}, kept_asks{0};
  std::atomic<bool> detached{false};

  [[nodiscard]] bool wanted() const noexcept override {
    note_call();
    return wanted_flag.load();
  }
  void wait() noexcept override {
    note_call();
    std::unique_lock lock(m_);
    waits.fetch_add(1);
    waiting_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return interrupted_ != seen_; });
    seen_ = interrupted_;
    waiting_ = false;
  }
  detail::IdleKeep* run() noexcept override {
    note_call();
    const std::int64_t ns = keep_ns.load();
    if (on_run) std::exchange(on_run, nullptr)();
    if (ns == 0) return nullptr;
    t_fake_keep = FakeKeep{};
    t_fake_keep.until_ns = FakeKeep::now_ns() + ns;
    t_fake_keep.limit = keep_limit.load();
    return &t_fake_keep;
  }
  void interrupt() noexcept override {
    note_call();
    interrupts.fetch_add(1);
    std::lock_guard lock(m_);
    ++interrupted_;
    cv_.notify_all();
  }
  void kept(detail::IdleKeep& keep) noexcept override {
    note_call();
    EXPECT_EQ(&keep, &t_fake_keep) << "kept() on another thread than the keeping worker's";
    kept_ops.fetch_add(t_fake_keep.ops);
    kept_asks.fetch_add(t_fake_keep.asks);
    std::lock_guard lock(m_);
    kept_calls.fetch_add(1);
    cv_.notify_all();
  }
  /// Waits (bounded) until a worker is inside wait().
  bool wait_for_waiter(std::chrono::seconds limit = 60s) {
    std::unique_lock lock(m_);
    return cv_.wait_for(lock, limit, [&] { return waiting_; });
  }
  /// Waits (bounded) until kept() was called.
  bool wait_for_kept(std::chrono::seconds limit = 60s) {
    std::unique_lock lock(m_);
    return cv_.wait_for(lock, limit, [&] { return kept_calls.load() > 0; });
  }

 private:
  void note_call() const noexcept {
    if (detached.load()) calls_after_detach.fetch_add(1);
  }
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::uint64_t interrupted_ = 0, seen_ = 0;
  bool waiting_ = false;
};

/// Attaches `task`, wanted from the start: as a task that becomes wanted
/// must, it calls a worker in (one asleep already would not look again).
bool attach(Engine& engine, FakeTask& task) {
  if (!EngineExtension::attach_idle_task(engine, &task)) return false;
  EngineExtension::want_idle_task_runner(engine);
  return true;
}

// The one worker waits in the task; an op pushed from another thread must
// interrupt that wait (no other worker sleeps), every time.
TEST(IdleTask, TheOnlyIdleWorkerWaitsInTheTaskAndIsInterruptedForQueuedOps) {
  Engine engine{Options{.kind = EngineKind::pooled, .cpu_workers = 1}};
  FakeTask task;
  ASSERT_TRUE(attach(engine, task));
  Var v = engine.new_variable();
  int ran = 0;
  constexpr int kOps = 50;
  for (int i = 0; i < kOps; ++i) {
    ASSERT_TRUE(task.wait_for_waiter()) << "the idle worker never waited in the task";
    engine.push_sync([&ran] { ++ran; }, Context::cpu(), {}, {v});
    engine.wait_for_var(v);
  }
  EXPECT_EQ(ran, kOps);
  EXPECT_GE(task.interrupts.load(), kOps);
  EngineExtension::detach_idle_task(engine, &task);
  task.detached = true;
}

// An unwanted task is not waited in: the idle worker sleeps on its futex.
TEST(IdleTask, AnUnwantedTaskIsNotWaitedIn) {
  Engine engine{Options{.kind = EngineKind::pooled, .cpu_workers = 2}};
  FakeTask task;
  task.wanted_flag = false;
  ASSERT_TRUE(attach(engine, task));
  ASSERT_FALSE(EngineExtension::attach_idle_task(engine, &task)) << "one task per engine";
  Var v = engine.new_variable();
  for (int i = 0; i < 20; ++i) engine.push_sync([] {}, Context::cpu(), {}, {v});
  engine.wait_for_all();
  EngineExtension::detach_idle_task(engine, &task);
  EXPECT_EQ(task.waits.load(), 0);
}

// A worker that ran the task keeps the queued ops to itself when run()
// allows it, and kept() hears how many it ran once it runs out of work.
TEST(IdleTask, AKeepIsReportedToTheTask) {
  Engine engine{Options{.kind = EngineKind::pooled, .cpu_workers = 1}};
  FakeTask task;
  task.keep_ns = 1'000'000'000;
  ASSERT_TRUE(attach(engine, task));
  ASSERT_TRUE(task.wait_for_waiter());
  Var v = engine.new_variable();
  engine.push_sync([] {}, Context::cpu(), {}, {v});  // interrupts the wait: run(), then a keep
  engine.wait_for_var(v);
  EXPECT_TRUE(task.wait_for_kept());
  EXPECT_GE(task.kept_ops.load(), 1);
  EngineExtension::detach_idle_task(engine, &task);
  task.detached = true;
}

// The keep's end is the task's decision: the worker asks go_on() before
// each op it runs while keeping, stops keeping at the first no, tells the
// task once (kept()), and still runs every op.
TEST(IdleTask, AKeepEndsWhenTheTaskSaysSo) {
  Engine engine{Options{.kind = EngineKind::pooled, .cpu_workers = 1}};
  FakeTask task;
  task.keep_ns = 1'000'000'000;
  constexpr std::int64_t kLimit = 3;
  constexpr int kOps = 10;
  task.keep_limit = kLimit;
  std::atomic<int> ran{0};
  // Made ready by the run itself, as a delivery from the ring makes them:
  // on the runner's own deque, more than the keep allows.
  task.on_run = [&] {
    task.keep_ns = 0;  // this run's keep only
    for (int i = 0; i < kOps; ++i) engine.push_sync([&ran] { ran.fetch_add(1); }, Context::cpu(), {}, {});
  };
  ASSERT_TRUE(attach(engine, task));
  ASSERT_TRUE(task.wait_for_waiter());
  engine.push_sync([&ran] { ran.fetch_add(1); }, Context::cpu(), {}, {});  // interrupts the wait: run()
  engine.wait_for_all();
  ASSERT_TRUE(task.wait_for_kept());
  EXPECT_EQ(ran.load(), kOps + 1);
  EXPECT_EQ(task.kept_calls.load(), 1);
  EXPECT_EQ(task.kept_ops.load(), kLimit);
  EXPECT_EQ(task.kept_asks.load(), kLimit + 1) << "go_on() asked after it said no, or not before each op";
  EngineExtension::detach_idle_task(engine, &task);
  task.detached = true;
}

// Detaching while pushes wake workers (and interrupt the task's waiter):
// detach returns, and no call reaches the task after it did.
TEST(IdleTask, NoCallReachesADetachedTask) {
  Engine engine{Options{.kind = EngineKind::pooled, .cpu_workers = 2}};
  std::atomic<bool> done{false};
  std::atomic<std::int64_t> ran{0};
  // The rounds start once the pusher has pushed: they can end within a few
  // ms, before a late-starting thread pushed anything.
  std::latch pushing(1);
  std::thread pusher([&] {
    engine.push_sync([&ran] { ran.fetch_add(1); }, Context::cpu(), {}, {});
    pushing.count_down();
    while (!done.load()) {
      engine.push_sync([&ran] { ran.fetch_add(1); }, Context::cpu(), {}, {});
      if (ran.load() % 64 == 0) std::this_thread::yield();
    }
  });
  pushing.wait();
  constexpr int kRounds = 200 / test::kScale;
  std::vector<std::unique_ptr<FakeTask>> tasks;  // alive to the end: a late call is counted, not a use after free
  for (int i = 0; i < kRounds; ++i) {
    FakeTask& task = *tasks.emplace_back(std::make_unique<FakeTask>());
    task.keep_ns = (i % 2) * 100'000;
    ASSERT_TRUE(attach(engine, task));
    if (i % 4 == 0) (void)task.wait_for_waiter(1s);
    EngineExtension::detach_idle_task(engine, &task);
    task.detached = true;
  }
  done = true;
  pusher.join();
  engine.wait_for_all();
  EXPECT_GT(ran.load(), 0);
  for (const auto& task : tasks) EXPECT_EQ(task->calls_after_detach.load(), 0);
}

}  // namespace
}  // namespace ordo

// Task<T>, sync_wait, when_all and AsyncScope on their own (no engine).
#include <array>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include <variant>

#include "coro_test_util.hpp"

namespace ordo::test {
namespace {

Task<int> value(int x) { co_return x; }
Task<void> nothing() { co_return; }
Task<std::unique_ptr<int>> boxed(int x) { co_return std::make_unique<int>(x); }
Task<int> thrower(std::string what) {
  throw Boom(what);
  co_return 0;
}

TEST(Task, ReturnsValuesVoidAndMoveOnlyResults) {
  EXPECT_EQ(run_bounded(value(42)), 42);
  EXPECT_NO_THROW(run_bounded(nothing()));
  std::unique_ptr<int> p = run_bounded(boxed(7));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p, 7);
  EXPECT_EQ(sync_wait(value(5)), 5);  // the plain blocking form
}

TEST(Task, NestedAwaitsLvalueAndRvalue) {
  auto outer = []() -> Task<int> {
    Task<int> a = value(1);
    const int x = co_await a;                 // lvalue
    const int y = co_await value(2);          // rvalue
    std::unique_ptr<int> z = co_await boxed(3);
    co_await nothing();
    co_return x + y + *z;
  };
  EXPECT_EQ(run_bounded(outer()), 6);
}

TEST(Task, IsLazy) {
  int runs = 0;
  auto t = [](int* r) -> Task<void> {
    ++*r;
    co_return;
  }(&runs);
  EXPECT_EQ(runs, 0) << "a task must not start before it is awaited";
  EXPECT_FALSE(t.done());
  run_bounded(std::move(t));
  EXPECT_EQ(runs, 1);
}

TEST(Task, ExceptionsPropagateToTheAwaiterWithTheirType) {
  auto mid = []() -> Task<int> { co_return 1 + co_await thrower("deep"); };
  auto top = [&]() -> Task<int> { co_return 1 + co_await mid(); };
  try {
    (void)run_bounded(top());
    ADD_FAILURE() << "no exception";
  } catch (const Boom& e) {
    EXPECT_STREQ(e.what(), "deep");
  }
  EXPECT_THROW(sync_wait(thrower("x")), Boom);
  // Caught inside a coroutine, the coroutine goes on.
  auto catcher = []() -> Task<int> {
    try {
      co_await thrower("caught");
    } catch (const Boom&) {
      co_return 1;
    }
    co_return 0;
  };
  EXPECT_EQ(run_bounded(catcher()), 1);
}

Task<int> chain(int n) {
  if (n == 0) co_return 0;
  co_return 1 + co_await chain(n - 1);
}

TEST(Task, MillionDeepChainRunsInBoundedStack) {
  // Task awaiting Task awaiting ... a million deep, all completing
  // synchronously: without the trampoline this overflows the stack at -O0,
  // under ASan and under TSan.
  EXPECT_EQ(run_bounded(chain(1'000'000)), 1'000'000);
}

TEST(Task, LoopAwaitingMillionReadyTasks) {
  auto loop = []() -> Task<long> {
    long sum = 0;
    for (int i = 0; i < 1'000'000; ++i) sum += co_await value(i & 7);
    co_return sum;
  };
  long expected = 0;
  for (int i = 0; i < 1'000'000; ++i) expected += i & 7;
  EXPECT_EQ(run_bounded(loop()), expected);
}

Task<int> throwing_chain(int n) {
  if (n == 0) throw Boom("bottom");
  co_return 1 + co_await throwing_chain(n - 1);
}

TEST(Task, ExceptionThroughDeepChain) {
  EXPECT_THROW(run_bounded(throwing_chain(20'000)), Boom);
}

TEST(Task, ContinuesOnTheThreadThatResumesIt) {
  ThreadResumer resumer;
  const auto main_id = std::this_thread::get_id();
  auto t = [&]() -> Task<bool> {
    co_await resumer.hop();
    const bool moved = std::this_thread::get_id() != main_id;
    co_await resumer.hop();
    co_return moved && co_await value(1) == 1;
  };
  EXPECT_TRUE(run_bounded(t()));
}

TEST(Task, SyncWaitInsideACoroutineThrows) {
  auto t = []() -> Task<bool> {
    try {
      (void)sync_wait(value(1));
    } catch (const Error& e) {
      co_return e.code() == Errc::wait_inside_op;
    }
    co_return false;
  };
  EXPECT_TRUE(run_bounded(t()));
}

TEST(Task, FramesAreRecycled) {
  if (!ordo::detail::kFrameCacheEnabled) GTEST_SKIP() << "frame cache is off under ASan (by design)";
  auto loop = []() -> Task<int> {
    int sum = 0;
    for (int i = 0; i < 10'000; ++i) sum += co_await value(1);
    co_return sum;
  };
  (void)sync_wait(loop());  // warm this thread's lists
  const auto before = ordo::detail::frame_cache_stats();
  EXPECT_EQ(sync_wait(loop()), 10'000);
  const auto after = ordo::detail::frame_cache_stats();
  const auto hits = after.hits - before.hits;
  const auto misses = after.misses - before.misses;
  EXPECT_GE(hits, 10'000U) << "every child frame should come from the free list";
  EXPECT_LE(misses, 4U) << "hot-path frames went to malloc";
}

// ------------------------------------------------------------------ when_all

TEST(WhenAll, TupleInArgumentOrder) {
  auto t = []() -> Task<int> {
    auto [a, v, b, c] = co_await when_all(value(1), nothing(), boxed(2), value(3));
    static_assert(std::is_same_v<decltype(v), std::monostate>);
    co_return a * 100 + *b * 10 + c;
  };
  EXPECT_EQ(run_bounded(t()), 123);
  auto empty = []() -> Task<std::size_t> { co_return std::tuple_size_v<decltype(co_await when_all())>; };
  EXPECT_EQ(run_bounded(empty()), 0U);
}

TEST(WhenAll, StartsInArgumentOrderAndYieldsInArgumentOrder) {
  std::array<Event, 3> events;
  std::vector<int> started;
  auto child = [&](int i) -> Task<int> {
    started.push_back(i);  // before the first suspension: runs on the awaiting thread, in order
    co_await events[static_cast<std::size_t>(i)];
    co_return i * 10;
  };
  auto parent = [&]() -> Task<std::tuple<int, int, int>> { co_return co_await when_all(child(0), child(1), child(2)); };
  ThreadResumer resumer;
  auto setter = [&]() -> Task<void> {
    co_await resumer.hop();
    for (int i = 2; i >= 0; --i) events[static_cast<std::size_t>(i)].set();  // finish in reverse order
  };
  AsyncScope scope;
  auto all = [&]() -> Task<std::tuple<int, int, int>> {
    auto r = co_await parent();
    co_return r;
  };
  auto driver = [&]() -> Task<std::tuple<int, int, int>> {
    auto [r, unused] = co_await when_all(all(), setter());
    (void)unused;
    co_return r;
  };
  auto r = run_bounded(driver());
  EXPECT_EQ(started, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(r, std::make_tuple(0, 10, 20));
}

TEST(WhenAll, RethrowsTheFirstFailureAfterAllFinish) {
  Event late;
  std::atomic<int> finished{0};
  auto ok = [&](int v) -> Task<int> {
    finished.fetch_add(1);
    co_return v;
  };
  auto bad = [&](const char* what) -> Task<int> {
    finished.fetch_add(1);
    throw Boom(what);
    co_return 0;
  };
  auto slow = [&]() -> Task<int> {
    co_await late;
    finished.fetch_add(1);
    co_return 3;
  };
  ThreadResumer resumer;
  auto release_late = [&]() -> Task<void> {
    co_await resumer.hop();
    late.set();
  };
  auto t = [&]() -> Task<std::string> {
    std::string what;
    try {
      (void)co_await when_all(ok(0), bad("first"), bad("second"), slow());
    } catch (const Boom& e) {
      what = e.what();
    }
    co_return what + ":" + std::to_string(finished.load());
  };
  auto driver = [&]() -> Task<std::string> {
    auto [s, unused] = co_await when_all(t(), release_late());
    (void)unused;
    co_return s;
  };
  EXPECT_EQ(run_bounded(driver()), "first:4");
}

TEST(WhenAll, VectorsOfTasks) {
  auto t = []() -> Task<long> {
    std::vector<Task<int>> tasks;
    for (int i = 0; i < 500; ++i) tasks.push_back(value(i));
    std::vector<int> rs = co_await when_all(std::move(tasks));
    long sum = 0;
    for (std::size_t i = 0; i < rs.size(); ++i) sum += (rs[i] == static_cast<int>(i)) ? rs[i] : -1'000'000;
    std::vector<Task<void>> voids;
    for (int i = 0; i < 10; ++i) voids.push_back(nothing());
    co_await when_all(std::move(voids));
    co_await when_all(std::vector<Task<void>>{});
    co_return sum;
  };
  EXPECT_EQ(run_bounded(t()), 499L * 500 / 2);
}

// Regression (issue 31, item 11): when_all of a vector of Task<void> yielded
// void where docs/coroutines.md says a vector; it yields one std::monostate
// per task, as the tuple form does for each Task<void>.
TEST(WhenAll, VectorOfVoidTasksYieldsAVectorOfMonostate) {
  static_assert(std::is_same_v<decltype(when_all(std::declval<std::vector<Task<void>>>())),
                               Task<std::vector<std::monostate>>>);
  static_assert(std::is_same_v<decltype(when_all(std::declval<std::vector<Task<int>>>())), Task<std::vector<int>>>);
  auto t = []() -> Task<std::size_t> {
    std::vector<Task<void>> voids;
    for (int i = 0; i < 7; ++i) voids.push_back(nothing());
    const std::vector<std::monostate> done = co_await when_all(std::move(voids));
    const std::vector<std::monostate> none = co_await when_all(std::vector<Task<void>>{});
    co_return done.size() * 10 + none.size();
  };
  EXPECT_EQ(run_bounded(t()), 70U);
}

TEST(WhenAll, ChildrenFinishingOnManyThreadsAtOnce) {
  for (int round = 0; round < 50 / kScale; ++round) {
    ThreadResumer resumer;
    auto child = [&](int i) -> Task<int> {
      co_await resumer.hop();
      co_return i;
    };
    auto t = [&]() -> Task<int> {
      std::vector<Task<int>> ts;
      for (int i = 0; i < 8; ++i) ts.push_back(child(i));
      int sum = 0;
      for (int v : co_await when_all(std::move(ts))) sum += v;
      co_return sum;
    };
    ASSERT_EQ(run_bounded(t()), 28);
  }
}

// ------------------------------------------------------------------ AsyncScope

TEST(AsyncScope, SpawnRunsEagerlyAndSyncJoinWaits) {
  AsyncScope scope;
  std::array<Event, 3> events;
  int before = 0;
  std::atomic<int> after{0};
  auto task = [&](Event* ev) -> Task<void> {
    ++before;
    co_await *ev;
    after.fetch_add(1);
  };
  for (auto& ev : events) scope.spawn(task(&ev));
  EXPECT_EQ(before, 3) << "spawn starts the task at once, up to its first suspension";
  EXPECT_EQ(after.load(), 0);
  EXPECT_EQ(scope.active(), 3U);
  {
    ThreadResumer resumer;
    auto setter = [&]() -> Task<void> {
      co_await resumer.hop();
      for (auto& ev : events) ev.set();
    };
    scope.spawn(setter());
    scope.sync_join();
  }
  EXPECT_EQ(after.load(), 3);
  EXPECT_EQ(scope.active(), 0U);
}

TEST(AsyncScope, JoinFromACoroutineAndRejoin) {
  AsyncScope scope;
  ThreadResumer resumer;
  std::atomic<int> done{0};
  auto worker = [&]() -> Task<void> {
    co_await resumer.hop();
    done.fetch_add(1);
  };
  auto spawner = [&]() -> Task<void> {
    for (int i = 0; i < 10; ++i) scope.spawn(worker());
    co_await scope.join();
    EXPECT_EQ(done.load(), 10);
    for (int i = 0; i < 5; ++i) scope.spawn(worker());
    co_await scope.join();
  };
  run_bounded(spawner());
  EXPECT_EQ(done.load(), 15);
}

TEST(AsyncScope, SpawnedTasksMaySpawnMore) {
  AsyncScope scope;
  ThreadResumer resumer;
  std::atomic<int> done{0};
  auto leaf = [&]() -> Task<void> {
    co_await resumer.hop();
    done.fetch_add(1);
  };
  auto parent = [&]() -> Task<void> {
    co_await resumer.hop();
    for (int i = 0; i < 4; ++i) scope.spawn(leaf());
    done.fetch_add(1);
  };
  for (int i = 0; i < 4; ++i) scope.spawn(parent());
  scope.sync_join();
  EXPECT_EQ(done.load(), 20);
}

TEST(AsyncScope, JoinRethrowsTheFirstEscapedException) {
  AsyncScope scope;
  scope.spawn(thrower("spawned"));
  scope.spawn(nothing());
  EXPECT_THROW(scope.sync_join(), Boom);
  EXPECT_NO_THROW(scope.sync_join()) << "an exception is rethrown once";
}

#if !defined(__SANITIZE_THREAD__)
TEST(AsyncScopeDeathTest, DestroyedWithRunningTasksTerminates) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Event never;
        auto scope = std::make_unique<AsyncScope>();
        scope->spawn([](Event* e) -> Task<void> { co_await *e; }(&never));
        scope.reset();
      },
      "AsyncScope destroyed with 1 task\\(s\\) still running");
}
#endif

}  // namespace
}  // namespace ordo::test

// Bounded concurrency: when_all(tasks, limit) and for_each(range, limit, fn).
#include <list>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "ordo/for_each.hpp"
#include "toolkit/toolkit_test_util.hpp"

namespace ordo::test {
namespace {

class ForEachEngines : public ::testing::TestWithParam<EngineConfig> {};

// The pipeline's shape: every element is "read" (an op on its own buffer),
// "counted" (an op reading it) and merged into one histogram variable.
// Randomized sizes and limit; compared with a serial run.
TEST_P(ForEachEngines, PipelineMatchesSerialAndRespectsTheLimit) {
  const std::uint64_t seed = test_seed("for_each");
  std::mt19937_64 rng(seed);
  Engine engine(GetParam().options);
  const std::size_t n = 20 + rng() % (200 / kScale);
  const std::size_t limit = 1 + rng() % 6;
  std::vector<std::vector<int>> inputs(n);
  for (auto& in : inputs) {
    in.resize(1 + rng() % 64);
    for (int& x : in) x = static_cast<int>(rng() % 16);
  }
  std::vector<long> serial(16, 0);
  for (const auto& in : inputs) {
    for (int x : in) serial[x] += 1;
  }
  std::vector<long> hist(16, 0);
  Var hist_var = engine.new_variable();
  ConcurrencyProbe probe;
  std::vector<std::size_t> indices(n);
  std::iota(indices.begin(), indices.end(), 0);
  auto stage = [&](std::size_t i) -> Task<void> {
    probe.enter();
    Var buf = engine.new_variable();
    std::vector<int> copy;
    co_await push(engine, reads(), writes(buf), [&] { copy = inputs[i]; });
    std::vector<long> local = co_await push(engine, reads(buf), writes(), [&] {
      std::vector<long> h(16, 0);
      for (int x : copy) h[x] += 1;
      return h;
    });
    co_await push(engine, reads(), writes(hist_var), [&] {
      for (int b = 0; b < 16; ++b) hist[b] += local[b];
    });
    engine.delete_variable(buf);
    probe.leave();
  };
  run_bounded(for_each(indices, limit, stage));
  bounded_wait(engine, hist_var);
  EXPECT_EQ(hist, serial) << "seed " << seed;
  EXPECT_LE(probe.max(), static_cast<int>(limit)) << "seed " << seed;
}

INSTANTIATE_TEST_SUITE_P(All, ForEachEngines, ::testing::ValuesIn(all_engine_configs()), config_name);

TEST(WhenAllBounded, ResultsInOrderAtMostLimitRunning) {
  ThreadResumer resumer;
  ConcurrencyProbe probe;
  auto child = [&](int i) -> Task<int> {
    probe.enter();
    co_await resumer.hop();
    probe.leave();
    co_return i * i;
  };
  std::vector<Task<int>> tasks;
  for (int i = 0; i < 30; ++i) tasks.push_back(child(i));
  std::vector<int> out = run_bounded(when_all(std::move(tasks), 3));
  ASSERT_EQ(out.size(), 30U);
  for (int i = 0; i < 30; ++i) EXPECT_EQ(out[i], i * i);
  EXPECT_LE(probe.max(), 3);
  // Void tasks give monostates; an empty vector finishes at once.
  std::vector<Task<void>> none;
  EXPECT_TRUE(sync_wait(when_all(std::move(none), 2)).empty());
  EXPECT_THROW((void)when_all(std::vector<Task<int>>{}, 0), Error);
}

TEST(WhenAllBounded, FailureStopsNewStartsAndRethrowsTheLowestIndex) {
  std::atomic<int> started{0};
  auto child = [&](int i) -> Task<int> {
    started.fetch_add(1);
    if (i == 2 || i == 3) throw Boom("child " + std::to_string(i));
    co_return i;
  };
  std::vector<Task<int>> tasks;
  for (int i = 0; i < 10; ++i) tasks.push_back(child(i));
  try {
    (void)sync_wait(when_all(std::move(tasks), 2));
    FAIL() << "no exception";
  } catch (const Boom& e) {
    EXPECT_STREQ(e.what(), "child 2");
  }
  // Children finish synchronously: lane 0 runs 0, 1 ... then fails at 2; lane 1 takes 3 (fails) at most.
  EXPECT_LE(started.load(), 4);
}

TEST(ForEach, InputRangesRvaluesAndFailures) {
  // A list (not random access), taken by rvalue: the task owns it.
  std::atomic<int> sum{0};
  auto add = [&](int x) -> Task<void> {
    sum.fetch_add(x);
    co_return;
  };
  sync_wait(for_each(std::list<int>{1, 2, 3, 4, 5}, 2, add));
  EXPECT_EQ(sum.load(), 15);
  // A view of prvalues.
  sum = 0;
  sync_wait(for_each(std::views::iota(0, 100), 7, add));
  EXPECT_EQ(sum.load(), 4950);
  // A failing element: later elements are not started; the failure is rethrown.
  std::vector<int> seen;
  std::mutex m;
  auto fail_at_5 = [&](int x) -> Task<void> {
    {
      std::lock_guard lock(m);
      seen.push_back(x);
    }
    if (x == 5) throw Boom("five");
    co_return;
  };
  EXPECT_THROW(sync_wait(for_each(std::views::iota(0, 100), 1, fail_at_5)), Boom);
  EXPECT_EQ(seen.size(), 6U);
  EXPECT_THROW((void)for_each(std::vector<int>{1}, 0, add), Error);
}

}  // namespace
}  // namespace ordo::test

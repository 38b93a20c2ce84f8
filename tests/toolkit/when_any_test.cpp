// ordo::when_any: the first to finish wins, the others are stopped through
// their tokens and joined before it returns.
#include <stop_token>
#include <string>
#include <variant>
#include <vector>

#include "ordo/semaphore.hpp"
#include "ordo/when_any.hpp"
#include "toolkit/toolkit_test_util.hpp"

namespace ordo::test {
namespace {

TEST(WhenAny, FirstFinisherWinsLosersAreCancelledAndJoined) {
  Engine engine(Options{.kind = EngineKind::pooled, .cpu_workers = 2});
  HeldVar blocker(engine);
  const Var held = blocker.var;
  std::atomic<bool> loser_finished{false};
  auto loser = [&](std::stop_token st) -> Task<int> {
    try {
      co_await push(engine, reads(held), writes(), [] {}, st);  // waits for the blocker: cancelled instead
    } catch (const CancelledError&) {
      loser_finished = true;
      throw;
    }
    co_return -1;
  };
  auto winner = [&]() -> Task<std::string> {
    co_await push(engine, reads(), writes(), [] {});
    co_return "fast";
  };
  std::stop_source stop;
  auto r = run_bounded(when_any(stop, loser(stop.get_token()), winner()));
  EXPECT_EQ(r.index(), 1U);
  EXPECT_EQ(std::get<1>(r), "fast");
  EXPECT_TRUE(loser_finished.load()) << "the loser must be joined before when_any returns";
  EXPECT_TRUE(stop.stop_requested());
  blocker.release();
  engine.wait_for_all();
}

TEST(WhenAny, TheWinnersExceptionIsRethrownLosersAreDropped) {
  Semaphore never(0);
  std::stop_source stop;
  auto waits = [&](std::stop_token st) -> Task<void> { co_await never.acquire(st); };
  auto throws = [&]() -> Task<int> {
    throw Boom("first");
    co_return 0;
  };
  EXPECT_THROW(run_bounded(when_any(stop, waits(stop.get_token()), throws())), Boom);
  // The vector form: the index of the winner and its value.
  std::stop_source stop2;
  auto value = [&](int v, std::stop_token st) -> Task<int> {
    if (v != 2) co_await never.acquire(st);
    co_return v;
  };
  std::vector<Task<int>> tasks;
  for (int i = 0; i < 4; ++i) tasks.push_back(value(i, stop2.get_token()));
  auto [index, v] = run_bounded(when_any(stop2, std::move(tasks)));
  EXPECT_EQ(index, 2U);
  EXPECT_EQ(v, 2);
  EXPECT_EQ(never.available(), 0);
  std::stop_source stop3;
  EXPECT_THROW((void)when_any(stop3, std::vector<Task<int>>{}), Error);
}

// Randomized: n racers each finish after a random number of hops through
// the engine, observing the token between hops; exactly one wins, every
// racer has finished when when_any returns, and the winner is one that
// was not stopped.
TEST(WhenAny, RandomizedRacesJoinEveryLoser) {
  const std::uint64_t seed = test_seed("when_any");
  std::mt19937_64 rng(seed);
  Engine engine(Options{.kind = EngineKind::pooled, .cpu_workers = 2});
  Var v = engine.new_variable();
  for (int round = 0; round < 50 / kScale; ++round) {
    const int n = 2 + static_cast<int>(rng() % 5);
    std::vector<int> hops(n);
    for (int& h : hops) h = static_cast<int>(rng() % 6);
    std::atomic<int> finished{0};
    auto racer = [&](int i, std::stop_token st) -> Task<int> {
      struct Count {
        std::atomic<int>* f;
        ~Count() { f->fetch_add(1); }
      } count{&finished};
      for (int k = 0; k < hops[i]; ++k) co_await push(engine, reads(v), writes(), [] {}, st);
      co_return i;
    };
    std::stop_source stop;
    std::vector<Task<int>> tasks;
    for (int i = 0; i < n; ++i) tasks.push_back(racer(i, stop.get_token()));
    auto [index, value] = run_bounded(when_any(stop, std::move(tasks)));
    EXPECT_EQ(static_cast<int>(index), value) << "seed " << seed;
    EXPECT_EQ(finished.load(), n) << "seed " << seed << ": a loser was not joined";
  }
  engine.wait_for_all();
}

}  // namespace
}  // namespace ordo::test

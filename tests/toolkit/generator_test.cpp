// ordo::AsyncGenerator: values in order, awaits inside the body, exceptions,
// early destruction.
#include <memory>
#include <string>
#include <vector>

#include "ordo/generator.hpp"
#include "ordo/schedule.hpp"
#include "toolkit/toolkit_test_util.hpp"

namespace ordo::test {
namespace {

AsyncGenerator<int> count_to(int n) {
  for (int i = 0; i < n; ++i) co_yield i;
}

TEST(AsyncGenerator, YieldsInOrderThenEnds) {
  auto consume = []() -> Task<std::vector<int>> {
    std::vector<int> out;
    auto gen = count_to(5);
    while (std::optional<int> x = co_await gen.next()) out.push_back(*x);
    EXPECT_EQ(co_await gen.next(), std::nullopt) << "stays at the end";
    co_return out;
  };
  EXPECT_EQ(sync_wait(consume()), (std::vector<int>{0, 1, 2, 3, 4}));
  // A long synchronous sequence runs in bounded stack.
  auto long_run = []() -> Task<long> {
    long sum = 0;
    auto gen = count_to(200000);
    while (auto x = co_await gen.next()) sum += *x;
    co_return sum;
  };
  EXPECT_EQ(sync_wait(long_run()), 200000L * 199999 / 2);
}

TEST(AsyncGenerator, ExceptionsReachTheConsumerAndEarlyDestructionRunsDestructors) {
  auto failing = []() -> AsyncGenerator<std::string> {
    co_yield "a";
    throw Boom("in the body");
  };
  auto consume = [&]() -> Task<void> {
    auto gen = failing();
    EXPECT_EQ(co_await gen.next(), std::optional<std::string>("a"));
    EXPECT_THROW((void)co_await gen.next(), Boom);
    EXPECT_EQ(co_await gen.next(), std::nullopt);
  };
  sync_wait(consume());
  auto alive = std::make_shared<int>(0);
  std::weak_ptr<int> watch = alive;
  auto holding = [](std::shared_ptr<int> p) -> AsyncGenerator<int> {
    for (;;) co_yield *p;
  };
  auto take_one = [&]() -> Task<void> {
    auto gen = holding(std::move(alive));
    EXPECT_EQ(co_await gen.next(), std::optional<int>(0));
  };  // gen destroyed between values: the body's locals go
  sync_wait(take_one());
  EXPECT_TRUE(watch.expired());
}

class GeneratorEngines : public ::testing::TestWithParam<EngineConfig> {};

// Randomized: the body reads records through engine ops (resuming on
// workers) and hops with yield(); the consumer sees the serial sequence.
TEST_P(GeneratorEngines, AwaitsInsideTheBodyKeepTheOrder) {
  const std::uint64_t seed = test_seed("generator");
  std::mt19937_64 rng(seed);
  Engine engine(GetParam().options);
  Var file = engine.new_variable();
  std::vector<std::uint64_t> records(100 + rng() % 200);
  for (auto& r : records) r = rng();
  auto reader = [&]() -> AsyncGenerator<std::uint64_t> {
    for (std::size_t i = 0; i < records.size(); ++i) {
      std::uint64_t r = co_await push(engine, reads(file), writes(), [&, i] { return records[i]; });
      if (r % 7 == 0) co_await yield(engine);
      co_yield r;
    }
  };
  auto consume = [&]() -> Task<std::vector<std::uint64_t>> {
    std::vector<std::uint64_t> out;
    auto gen = reader();
    while (auto r = co_await gen.next()) out.push_back(*r);
    co_return out;
  };
  EXPECT_EQ(run_bounded(consume()), records) << "seed " << seed;
  engine.wait_for_all();
}

INSTANTIATE_TEST_SUITE_P(All, GeneratorEngines, ::testing::ValuesIn(all_engine_configs()), config_name);

}  // namespace
}  // namespace ordo::test

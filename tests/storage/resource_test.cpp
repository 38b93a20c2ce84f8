// tests/storage/resource_test.cpp - ordo::TempSpace and ordo::RandomStream(s)
// (ordo/resource.hpp): arenas ordered by their variables, growth and the cap,
// random draws bit-exact with a serial run on every engine and worker count.
#include <atomic>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/test_util.hpp"
#include "ordo/ordo.hpp"
#include "ordo/resource.hpp"

namespace ordo::test {
namespace {

TEST(TempSpace, ArenasAreHandedOutRoundRobinEachWithItsVariable) {
  Engine engine(Options{.cpu_workers = 2});
  TempSpace temp(engine, {.arenas = 3});
  EXPECT_EQ(temp.size(), 3U);
  TempArena& a = temp.next();
  TempArena& b = temp.next();
  TempArena& c = temp.next();
  TempArena& d = temp.next();
  EXPECT_NE(&a, &b);
  EXPECT_NE(&b, &c);
  EXPECT_EQ(&a, &d);
  EXPECT_NE(a.var(), b.var());
  EXPECT_EQ(&temp.arena(4), &b);
  EXPECT_EQ(temp.reserved_bytes(), 0U);
}

class TempSpaceEngines : public ::testing::TestWithParam<EngineConfig> {};

TEST_P(TempSpaceEngines, OpsSharingAnArenaNeverOverlapAndOthersRunInParallel) {
  const std::uint64_t seed = test_seed("arenas");
  std::mt19937_64 rng(seed);
  Engine engine(GetParam().options);
  TempSpace temp(engine, {.arenas = 4});
  std::vector<std::atomic<int>> users(4);
  std::atomic<int> overlaps{0}, bad{0};
  const int ops = 400 / kScale;
  for (int i = 0; i < ops; ++i) {
    const std::size_t k = rng() % 4;
    TempArena& arena = temp.arena(k);
    const std::size_t n = 1 + rng() % 5000;
    engine.push_sync(
        [&, k, n, i] {
          if (users[k].fetch_add(1) != 0) overlaps.fetch_add(1);
          std::span<std::uint32_t> s = arena.get_as<std::uint32_t>(n);
          for (std::uint32_t& x : s) x = static_cast<std::uint32_t>(i);
          volatile int sink = 0;
          for (int j = 0; j < 500; ++j) sink = sink + j;
          for (std::uint32_t x : s) bad += x != static_cast<std::uint32_t>(i);
          users[k].fetch_sub(1);
        },
        Context::cpu(), {}, {arena.var()});
  }
  engine.wait_for_all();
  EXPECT_EQ(overlaps.load(), 0) << "seed=" << seed;
  EXPECT_EQ(bad.load(), 0) << "seed=" << seed;
  EXPECT_GT(temp.reserved_bytes(), 0U);
}

INSTANTIATE_TEST_SUITE_P(Engines, TempSpaceEngines, ::testing::ValuesIn(all_engine_configs()), config_name);

TEST(TempSpace, GrowsOnDemandAndNeverShrinks) {
  Engine engine(Options{.cpu_workers = 1});
  TempSpace temp(engine, {.arenas = 1});
  TempArena& a = temp.next();
  std::vector<std::size_t> caps;
  for (std::size_t want : {1000U, 100U, 10000U, 5000U, 10000U}) {
    engine.push_sync(
        [&, want] {
          std::span<std::byte> s = a.get(want);
          EXPECT_EQ(s.size(), want);
          EXPECT_EQ(reinterpret_cast<std::uintptr_t>(s.data()) % 4096, 0U);
          caps.push_back(a.capacity());
        },
        Context::cpu(), {}, {a.var()});
  }
  engine.wait_for_all();
  EXPECT_EQ(caps, (std::vector<std::size_t>{4096, 4096, 12288, 12288, 12288}));
}

TEST(TempSpace, TheCapFailsTheOpWithAClearError) {
  Engine engine(Options{.cpu_workers = 1});
  TempSpace temp(engine, {.arenas = 2, .cap_bytes = 8192});
  TempArena& a = temp.next();
  engine.push_sync([&] { (void)a.get(8192); }, Context::cpu(), {}, {a.var()});  // at the cap: fine
  engine.push_sync([&] { (void)a.get(9000); }, Context::cpu(), {}, {a.var()});
  try {
    engine.wait_for_var(a.var());
    FAIL() << "expected CapacityError";
  } catch (const CapacityError& e) {
    EXPECT_EQ(e.requested(), 9000U);
    EXPECT_EQ(e.cap(), 8192U);
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    const std::string what = e.what();
    EXPECT_NE(what.find("9000"), std::string::npos) << what;
    EXPECT_NE(what.find("8192"), std::string::npos) << what;
  }
  // Observed and cleared: the arena serves again, at its old size.
  std::size_t cap = 0;
  engine.push_sync([&] { cap = a.get(100).size() == 100 ? a.capacity() : 0; }, Context::cpu(), {}, {a.var()});
  engine.wait_for_all();
  EXPECT_EQ(cap, 8192U);
}

TEST(TempSpace, ArenasOutliveTheTempSpaceUntilTheirOpsFinish) {
  Engine engine(Options{.cpu_workers = 2});
  Gate gate;
  std::atomic<bool> ok{false};
  {
    TempSpace temp(engine, {.arenas = 1});
    TempArena& a = temp.next();
    engine.push_sync(
        [&gate, &ok, &a] {
          EXPECT_TRUE(gate.wait());
          std::span<std::byte> s = a.get(64);
          s[63] = std::byte{1};
          ok = true;
        },
        Context::cpu(), {}, {a.var()});
  }  // ~TempSpace while the op waits: the arena stays until it is done
  gate.open();
  engine.wait_for_all();
  EXPECT_TRUE(ok.load());
}

/// A run of ops drawing from one stream: op i draws 1 + (i % 7) numbers and
/// stores their hash. Other ops, on other variables, run around them.
std::vector<std::uint64_t> draw_run(Engine& engine, std::uint64_t seed, int ops) {
  RandomStream rng(engine, seed);
  std::vector<std::uint64_t> out(static_cast<std::size_t>(ops));
  std::vector<Var> slots;
  for (int i = 0; i < ops; ++i) slots.push_back(engine.new_variable());
  for (int i = 0; i < ops; ++i) {
    engine.push_sync(
        [&rng, &out, i] {
          std::uint64_t h = 0;
          for (int k = 0; k <= i % 7; ++k) h = mix(h, rng.next());
          h = mix(h, static_cast<std::uint64_t>(rng.uniform() * 1e9));
          out[static_cast<std::size_t>(i)] = h;
        },
        Context::cpu(), {}, {rng.var(), slots[static_cast<std::size_t>(i)]});
    engine.push_sync([] { busy_for(std::chrono::microseconds(5)); }, Context::cpu(), {slots[static_cast<std::size_t>(i)]},
                     {});
  }
  engine.wait_for_all();
  for (Var v : slots) engine.delete_variable(v);
  return out;
}

std::vector<std::uint64_t> draw_serial(std::uint64_t seed, int ops) {
  std::mt19937_64 g(seed);
  std::vector<std::uint64_t> out;
  for (int i = 0; i < ops; ++i) {
    std::uint64_t h = 0;
    for (int k = 0; k <= i % 7; ++k) h = mix(h, g());
    h = mix(h, static_cast<std::uint64_t>(static_cast<double>(g() >> 11) * 0x1.0p-53 * 1e9));
    out.push_back(h);
  }
  return out;
}

class RandomEngines : public ::testing::TestWithParam<EngineConfig> {};

TEST_P(RandomEngines, DrawsAreBitExactWithASerialRun) {
  const std::uint64_t seed = test_seed("random");
  const int ops = 500 / kScale;
  Engine engine(GetParam().options);
  EXPECT_EQ(draw_run(engine, seed, ops), draw_serial(seed, ops)) << "seed=" << seed;
}

TEST_P(RandomEngines, ParallelStreamsAreSeededSeedPlusIndexAndReproducible) {
  const std::uint64_t seed = test_seed("streams");
  constexpr std::size_t kStreams = 4;
  const int ops = 400 / kScale;
  Engine engine(GetParam().options);
  std::vector<std::uint64_t> out(static_cast<std::size_t>(ops));
  {
    RandomStreams streams(engine, seed, kStreams);
    ASSERT_EQ(streams.size(), kStreams);
    for (std::size_t s = 0; s < kStreams; ++s) EXPECT_EQ(streams[s].seed(), seed + s);
    for (int i = 0; i < ops; ++i) {
      RandomStream& rs = streams[static_cast<std::size_t>(i)];  // by the op's index: deterministic
      engine.push_sync([&rs, &out, i] { out[static_cast<std::size_t>(i)] = rs.next() ^ rs.next(); }, Context::cpu(),
                       {}, {rs.var()});
    }
  }  // destroyed with ops pending: each stream lives until its last op
  engine.wait_for_all();
  std::vector<std::mt19937_64> gens;
  for (std::size_t s = 0; s < kStreams; ++s) gens.emplace_back(seed + s);
  for (int i = 0; i < ops; ++i) {
    auto& g = gens[static_cast<std::size_t>(i) % kStreams];
    const std::uint64_t a = g();
    ASSERT_EQ(out[static_cast<std::size_t>(i)], a ^ g()) << "op " << i << " seed=" << seed;
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, RandomEngines, ::testing::ValuesIn(all_engine_configs()), config_name);

}  // namespace
}  // namespace ordo::test

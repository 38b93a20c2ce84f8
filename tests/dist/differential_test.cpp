// tests/dist/differential_test.cpp - random dependency traces (W4: random
// reads and writes; W5: a wavefront) pushed over distributed variables and
// compared bit-for-bit with a serial loop of the same trace; printed seeds
// (ORDO_DIST_SEED=<n> replays one). Also shutdown with transfers in flight.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dist_test_util.hpp"

namespace ordo::dist::test {
namespace {

struct Op {
  std::vector<std::uint32_t> reads, writes;
  int rank = -1;  // explicit placement, or -1: owner computes
};

struct Trace {
  std::uint32_t vars = 0;
  std::vector<Op> ops;
};

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() { return fmix(s_ += 0x9e3779b97f4a7c15ULL); }
  std::uint32_t below(std::uint32_t n) { return static_cast<std::uint32_t>((next() >> 32) * n >> 32); }

 private:
  std::uint64_t s_;
};

/// W4: 0-3 reads and 1-2 writes of distinct variables per op; some ops
/// (`placed` percent) name a random rank, so values also move for writes.
Trace w4(std::uint64_t seed, std::uint32_t vars, std::size_t ops, int ranks, std::uint32_t placed) {
  Rng rng(seed);
  Trace t;
  t.vars = vars;
  for (std::size_t i = 0; i < ops; ++i) {
    Op op;
    const std::uint32_t nr = rng.below(4), nw = 1 + rng.below(2);
    std::vector<std::uint32_t> picked;
    while (picked.size() < nr + nw) {
      const std::uint32_t v = rng.below(vars);
      if (std::find(picked.begin(), picked.end(), v) == picked.end()) picked.push_back(v);
    }
    op.reads.assign(picked.begin(), picked.begin() + nr);
    op.writes.assign(picked.begin() + nr, picked.end());
    if (rng.below(100) < placed) op.rank = static_cast<int>(rng.below(static_cast<std::uint32_t>(ranks)));
    t.ops.push_back(std::move(op));
  }
  return t;
}

/// W5: op (i,j) reads (i-1,j) and (i,j-1), writes (i,j).
Trace w5(std::uint32_t side) {
  Trace t;
  t.vars = side * side;
  for (std::uint32_t i = 0; i < side; ++i) {
    for (std::uint32_t j = 0; j < side; ++j) {
      Op op;
      if (i > 0) op.reads.push_back((i - 1) * side + j);
      if (j > 0) op.reads.push_back(i * side + j - 1);
      op.writes.push_back(i * side + j);
      t.ops.push_back(std::move(op));
    }
  }
  return t;
}

void run_op(const Op& op, std::size_t i, std::uint64_t* slots) {
  std::uint64_t h = mix(0x6f72646f2d6f7073ULL, i);
  for (std::uint32_t r : op.reads) h = mix(h, slots[r]);
  for (std::uint32_t w : op.writes) slots[w] = mix(slots[w], h);
}

std::vector<std::uint64_t> initial(std::uint32_t vars) {
  std::vector<std::uint64_t> s(vars);
  for (std::uint32_t v = 0; v < vars; ++v) s[v] = fmix(0x6f72646f2d766172ULL + v);
  return s;
}

/// Owner of variable v: blocks of rows for W5 (a tiled wavefront), scattered for W4.
using OwnerFn = int (*)(std::uint32_t v, std::uint32_t vars, int ranks);
int scattered(std::uint32_t v, std::uint32_t, int ranks) { return static_cast<int>(fmix(v) % std::uint64_t(ranks)); }
int blocks(std::uint32_t v, std::uint32_t vars, int ranks) {
  return static_cast<int>(std::uint64_t(v) * std::uint64_t(ranks) / vars);
}

/// Pushes `t` over a Dist (every rank), optionally destroying the Dist
/// without waiting (shutdown drains), and counts, summed over the ranks,
/// the owned slots that differ from the serial loop.
std::uint64_t mismatches(const Trace& t, OwnerFn owner, ordo::EngineKind kind, bool cache, bool drain_only) {
  Engine engine(engine_options(kind));
  std::vector<std::uint64_t> slots = initial(t.vars);
  int ranks = 0, me = 0;
  {
    Dist d(engine, {.cache = cache});
    ranks = d.size();
    me = d.rank();
    std::vector<DistVar> v;
    for (std::uint32_t i = 0; i < t.vars; ++i) v.push_back(d.register_value(slots[i], owner(i, t.vars, ranks)));
    std::vector<DistVar> rs, ws;
    for (std::size_t i = 0; i < t.ops.size(); ++i) {
      const Op& op = t.ops[i];
      rs.clear();
      ws.clear();
      for (std::uint32_t r : op.reads) rs.push_back(v[r]);
      for (std::uint32_t w : op.writes) ws.push_back(v[w]);
      d.push([&op, i, s = slots.data()] { run_op(op, i, s); }, rs, ws, {}, op.rank);
    }
    if (!drain_only) d.wait_for_all();
  }  // drain_only: the destructor drains whatever is still moving
  engine.wait_for_all();
  std::vector<std::uint64_t> serial = initial(t.vars);
  for (std::size_t i = 0; i < t.ops.size(); ++i) run_op(t.ops[i], i, serial.data());
  std::uint64_t bad = 0;
  for (std::uint32_t i = 0; i < t.vars; ++i) {
    if (owner(i, t.vars, ranks) == me && slots[i] != serial[i]) ++bad;
  }
  Dist check(engine);  // a second Dist in the same process: the sum over ranks
  return sum_over_ranks(check, bad);
}

std::uint64_t shared_seed() {
  Engine engine(engine_options());
  Dist d(engine);
  std::uint64_t seed = 0;
  if (d.rank() == 0) {
    if (const char* s = std::getenv("ORDO_DIST_SEED")) {
      seed = std::strtoull(s, nullptr, 0);
    } else {
      seed = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    }
    std::printf("ordo::dist differential: seed %llu on %d ranks (replay: ORDO_DIST_SEED=%llu)\n",
                static_cast<unsigned long long>(seed), d.size(), static_cast<unsigned long long>(seed));
    std::fflush(stdout);
  }
  return sum_over_ranks(d, seed);
}

TEST(DistDifferential, W4RandomTraceMatchesSerial) {
  const std::uint64_t seed = shared_seed();
  const Trace t = w4(seed, 200, 3000 / kScale, Mpi::world_size(), 20);
  for (auto kind : {ordo::EngineKind::per_device, ordo::EngineKind::pooled, ordo::EngineKind::naive}) {
    for (bool cache : {true, false}) {
      EXPECT_EQ(mismatches(t, scattered, kind, cache, false), 0u)
          << "seed " << seed << " engine " << to_string(kind) << " cache " << cache;
    }
  }
}

TEST(DistDifferential, W5WavefrontMatchesSerial) {
  const Trace t = w5(40 / (kScale > 1 ? 2 : 1));
  for (auto kind : {ordo::EngineKind::per_device, ordo::EngineKind::naive}) {
    EXPECT_EQ(mismatches(t, blocks, kind, true, false), 0u) << to_string(kind);
  }
}

TEST(DistShutdown, DrainsTransfersInFlight) {
  const std::uint64_t seed = shared_seed();
  const Trace t = w4(seed, 100, 2000 / kScale, Mpi::world_size(), 30);
  EXPECT_EQ(mismatches(t, scattered, ordo::EngineKind::per_device, true, true), 0u) << "seed " << seed;
  EXPECT_EQ(mismatches(w5(30), blocks, ordo::EngineKind::per_device, true, true), 0u);
}

}  // namespace
}  // namespace ordo::dist::test

// tests/core/differential_trace.hpp - the random dependency traces of the
// differential tests (tests/core/differential_test.cpp), shared with the
// tests that replay them another way (tests/graph/).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace ordo::test {

enum class Kind : std::uint8_t { sync, async_inline, async_thread, prioritized, oper };

struct OpSpec {
  std::vector<int> reads;   // may hold duplicates and overlap writes
  std::vector<int> writes;  // may hold duplicates
  Kind kind = Kind::sync;
  int priority = 0;
  int spin = 0;  // busy iterations, to shake the schedule
};

struct Trace {
  int vars = 0;
  std::vector<OpSpec> ops;
  std::vector<int> operator_of;  // per op: index of a pre-built operator, or -1
};

inline Trace make_trace(std::uint64_t seed, int vars, int ops) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); };
  Trace t;
  t.vars = vars;
  t.ops.resize(static_cast<std::size_t>(ops));
  for (auto& op : t.ops) {
    const int r = pick(20);  // 0-19 reads
    const int w = 1 + pick(3);  // 1-3 writes
    for (int i = 0; i < r; ++i) op.reads.push_back(pick(vars));
    for (int i = 0; i < w; ++i) op.writes.push_back(pick(vars));
    const int k = pick(100);
    op.kind = k < 75 ? Kind::sync : k < 85 ? Kind::async_inline : k < 90 ? Kind::async_thread
                     : k < 95 ? Kind::prioritized : Kind::sync;
    op.priority = pick(5);
    op.spin = pick(4) == 0 ? pick(2000) : 0;
  }
  return t;
}

}  // namespace ordo::test

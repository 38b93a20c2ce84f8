// tests/graph/foreign_pushers.hpp - the two threads the graph equivalence
// tests run beside a replayed (or automatically captured) trace: they push
// conflicting ops on the trace's variables and check that each sees a value
// the serial run had.
#pragma once

#include <atomic>
#include <cstdint>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "ordo/engine.hpp"

namespace ordo::test {

/// Every value each variable takes in a serial run: fed the values after
/// each op (observe), it keeps what a conflicting op pushed between two of
/// the trace's ops may see.
class SerialHistory {
 public:
  explicit SerialHistory(std::size_t vars) : seen_(vars, std::set<std::uint64_t>{0}) {}
  void observe(const std::vector<int>& writes, const std::vector<std::uint64_t>& vals) {
    for (int w : writes) seen_[static_cast<std::size_t>(w)].insert(vals[static_cast<std::size_t>(w)]);
  }
  [[nodiscard]] bool had(std::size_t var, std::uint64_t value) const { return seen_[var].count(value) != 0; }

 private:
  std::vector<std::set<std::uint64_t>> seen_;
};

/// Two threads pushing, until stop(), ops that each hold a write on a random
/// shared variable, check that its value is one the serial run had (ordered
/// between two of the trace's ops, never inside one), and hide it while they
/// run (an op of the trace running at the same time would fold the hidden
/// value in: the result differs).
class ForeignPushers {
 public:
  ForeignPushers(Engine& engine, const std::vector<Var>& vars, std::vector<std::uint64_t>& vals,
                 const SerialHistory& history, std::uint64_t seed)
      : engine_(engine), vars_(vars), vals_(vals), history_(history) {
    a_ = std::thread([this, seed] { loop(seed ^ 0xA5A5); });
    b_ = std::thread([this, seed] { loop(seed ^ 0x5A5A); });
  }
  ~ForeignPushers() { stop(); }
  ForeignPushers(const ForeignPushers&) = delete;
  ForeignPushers& operator=(const ForeignPushers&) = delete;

  void stop() {
    stop_.store(true);
    if (a_.joinable()) a_.join();
    if (b_.joinable()) b_.join();
  }
  /// Conflicting ops that saw a value the serial run never had.
  [[nodiscard]] int bad() const { return bad_.load(); }

 private:
  void loop(std::uint64_t s) {
    std::mt19937_64 rng(s);
    const std::size_t n = vars_.size();
    while (!stop_.load(std::memory_order_relaxed)) {
      const auto w = static_cast<std::size_t>(rng() % n);
      const auto r = static_cast<std::size_t>(rng() % n);
      const std::uint64_t key = rng() | 1;
      engine_.push_sync(
          [this, w, key] {
            if (!history_.had(w, vals_[w])) bad_.fetch_add(1, std::memory_order_relaxed);
            vals_[w] ^= key;
            volatile int sink = 0;
            for (int k = 0; k < 200; ++k) sink = sink + k;
            vals_[w] ^= key;
          },
          Context::cpu(), vars_[r], vars_[w]);
      std::this_thread::yield();
    }
  }

  Engine& engine_;
  const std::vector<Var>& vars_;
  std::vector<std::uint64_t>& vals_;
  const SerialHistory& history_;
  std::atomic<bool> stop_{false};
  std::atomic<int> bad_{0};
  std::thread a_, b_;
};

}  // namespace ordo::test

// tests/toolkit/toolkit_test_util.hpp - helpers shared by the toolkit tests.
#pragma once

#include <algorithm>
#include <atomic>
#include <random>

#include "coro/coro_test_util.hpp"

namespace ordo::test {

/// Counts tasks inside a region and remembers the most seen at once.
class ConcurrencyProbe {
 public:
  void enter() {
    const int now = inside_.fetch_add(1, std::memory_order_acq_rel) + 1;
    int seen = max_.load(std::memory_order_relaxed);
    while (now > seen && !max_.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
    }
  }
  void leave() { inside_.fetch_sub(1, std::memory_order_acq_rel); }
  [[nodiscard]] int max() const { return max_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int> inside_{0};
  std::atomic<int> max_{0};
};

/// A variable held by a running async op until release(): ops that touch
/// it wait (a push to cancel while it waits). The constructor returns once
/// the op runs.
class HeldVar {
 public:
  explicit HeldVar(Engine& engine) : var(engine.new_variable()) {
    Gate running;
    engine.push_async(
        [&](RunContext, OnComplete done) {
          done_ = std::move(done);
          running.open();
        },
        Context::cpu(), {}, {var});
    EXPECT_TRUE(running.wait()) << "the holding op never ran";
  }
  void release() { done_(); }

  const Var var;

 private:
  OnComplete done_;
};

}  // namespace ordo::test

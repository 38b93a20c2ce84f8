// The worker pool's sleep/wake handshake, driven through its interleavings:
// a push lands just after an idle worker counted itself asleep (before its
// last look at the deques), just after that look found nothing (before it
// waits), or with random pauses at every point of the handshake. A lost
// wake-up leaves the pushed op unrun: each one must run within a bounded
// time, or the test fails naming the interleaving, iteration and seed.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "ordo/detail/pool_hooks.hpp"
#include "test_util.hpp"

namespace ordo::test {
namespace {

using namespace std::chrono_literals;
using detail::PoolPoint;

enum class Force { after_count, after_look, random_pauses };

const char* force_name(Force f) {
  switch (f) {
    case Force::after_count: return "a push between the worker counting itself asleep and its last look";
    case Force::after_look: return "a push between the worker's last look and its wait";
    case Force::random_pauses: return "random pauses at every point";
  }
  return "?";
}

/// What the hook and the test thread share. Iteration i's op, when it runs,
/// arms the stop of iteration i + 1 (so that it is armed before the worker
/// can go idle again): the first worker of the pool under test to reach
/// `point` after that stops there until the test thread has pushed.
struct Script {
  std::mutex m;
  std::condition_variable cv;
  const void* pool = nullptr;  ///< the pool under test (learned from the first push)
  bool learning = false;       ///< the next op_published on the test thread names it
  std::thread::id pusher;
  PoolPoint point = PoolPoint::sleeper_counted;
  bool stops = false;   ///< forced interleavings (not random_pauses)
  int next_stop = -1;   ///< the iteration whose stop is armed
  int stopped_at = -1;  ///< the iteration whose stop a worker reached
  int pushed_for = -1;  ///< the iteration whose push (and wake-up, if any) is done
  // random_pauses: a pause of up to this many spins at every point, from a seeded generator.
  std::atomic<bool> random{false};
  std::atomic<std::uint64_t> rng{0};
  std::atomic<int> looked{0};  ///< random_pauses: last looks that found nothing (a worker about to wait)

  void arm(int iteration) {
    std::lock_guard lock(m);
    if (stops) next_stop = iteration;
  }
};

void hook(PoolPoint point, const void* pool, void* arg) {
  auto& s = *static_cast<Script*>(arg);
  if (point == PoolPoint::op_published && std::this_thread::get_id() == s.pusher) {
    std::lock_guard lock(s.m);
    if (s.learning) {
      s.pool = pool;
      s.learning = false;
    }
  }
  if (s.random.load(std::memory_order_relaxed)) {
    if (point == PoolPoint::sleeper_looked && pool == s.pool) s.looked.fetch_add(1);
    // splitmix64 over a shared counter: each call its own pause (a yield,
    // or up to 2047 spins), of a kind reproducible from the seed.
    const std::uint64_t r = mix(s.rng.fetch_add(1, std::memory_order_relaxed), 0);
    if ((r >> 20) % 8 == 0) {
      std::this_thread::yield();
    } else {
      for (std::uint64_t i = 0, n = r % 2048; i < n; ++i) std::atomic_signal_fence(std::memory_order_seq_cst);
    }
    return;
  }
  std::unique_lock lock(s.m);
  if (pool != s.pool || point != s.point || s.next_stop <= s.stopped_at) return;
  const int iteration = s.stopped_at = s.next_stop;
  s.cv.notify_all();
  // Bounded: a test that fails elsewhere must not hang here.
  s.cv.wait_for(lock, 10s, [&] { return s.pushed_for >= iteration; });
}

struct WakeCase {
  EngineKind kind;
  unsigned workers;
  Force force;
};

std::string wake_name(const ::testing::TestParamInfo<WakeCase>& info) {
  const WakeCase& c = info.param;
  const char* force = c.force == Force::after_count  ? "after_count"
                      : c.force == Force::after_look ? "after_look"
                                                     : "random_pauses";
  return std::string(c.kind == EngineKind::pooled ? "pooled" : "per_device") + "_" + std::to_string(c.workers) +
         "_" + force;
}

void PrintTo(const WakeCase& c, std::ostream* os) {
  *os << wake_name(::testing::TestParamInfo<WakeCase>(c, 0));
}

class WakeHandshake : public ::testing::TestWithParam<WakeCase> {
 protected:
  void TearDown() override { detail::set_pool_hook(nullptr, nullptr); }
};

TEST_P(WakeHandshake, EveryPushedOpRunsWhateverTheInterleaving) {
  const WakeCase& c = GetParam();
  const std::uint64_t seed = test_seed("wake_handshake");
  Script script;
  script.pusher = std::this_thread::get_id();
  script.rng = seed;
  std::atomic<int> ran{0};
  {
    Engine engine(Options{.kind = c.kind, .cpu_workers = c.workers});
    detail::set_pool_hook(&hook, &script);
    {
      std::lock_guard lock(script.m);
      script.learning = true;
    }
    const int iterations = c.force == Force::random_pauses ? 2000 : 300;
    script.stops = c.force != Force::random_pauses;
    script.point = c.force == Force::after_count ? PoolPoint::sleeper_counted : PoolPoint::sleeper_looked;
    // Op i arms the stop of iteration i + 1 (the warm-up op, -1, that of 0).
    auto op = [&](int i) {
      return [&, i] {
        if (i + 1 < iterations) script.arm(i + 1);
        ran.fetch_add(1);
      };
    };
    Var v = engine.new_variable();
    engine.push_sync(op(-1), Context::cpu(), {}, {v});
    engine.wait_for_all();
    ASSERT_NE(script.pool, nullptr) << "the push named no pool";
    script.random = c.force == Force::random_pauses;
    for (int i = 0; i < iterations; ++i) {
      const int before = ran.load();
      if (script.stops) {
        // A worker with nothing to do spins a while, then goes to sleep: it
        // stops at the point on its way.
        std::unique_lock lock(script.m);
        ASSERT_TRUE(script.cv.wait_for(lock, 10s, [&] { return script.stopped_at >= i; }))
            << "iteration " << i << ": no worker went to sleep within 10 s";
      }
      engine.push_sync(op(i), Context::cpu(), {}, {v});
      if (script.stops) {
        std::lock_guard lock(script.m);
        script.pushed_for = i;
        script.cv.notify_all();
      }
      // The op must run without another push to wake anyone; a lost
      // wake-up leaves it queued beside a sleeping worker.
      const auto limit = std::chrono::steady_clock::now() + 5s;
      while (ran.load() == before && std::chrono::steady_clock::now() < limit) std::this_thread::yield();
      ASSERT_EQ(ran.load(), before + 1) << "lost wake-up: the op pushed at iteration " << i << " (" << force_name(c.force)
                                        << ", seed " << seed << ") did not run within 5 s";
      if (c.force == Force::random_pauses && i % 16 == 0) {
        // Now and then wait for a worker to reach its wait, so that pushes
        // meet every stage of going to sleep, not only spinning workers.
        const int looked = script.looked.load();
        const auto until = std::chrono::steady_clock::now() + 10s;
        while (script.looked.load() == looked && std::chrono::steady_clock::now() < until) std::this_thread::yield();
      }
    }
    detail::set_pool_hook(nullptr, nullptr);
  }
}

INSTANTIATE_TEST_SUITE_P(Pools, WakeHandshake,
                         ::testing::Values(WakeCase{EngineKind::pooled, 1, Force::after_count},
                                           WakeCase{EngineKind::pooled, 1, Force::after_look},
                                           WakeCase{EngineKind::pooled, 1, Force::random_pauses},
                                           WakeCase{EngineKind::per_device, 2, Force::after_count},
                                           WakeCase{EngineKind::per_device, 2, Force::after_look},
                                           WakeCase{EngineKind::per_device, 4, Force::random_pauses}),
                         wake_name);

}  // namespace
}  // namespace ordo::test

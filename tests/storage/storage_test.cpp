// tests/storage/storage_test.cpp - ordo::BufferPool (ordo/storage.hpp): size
// classes, recycling in dependency order (randomized, with canaries), the
// limit's waiters (coroutines and threads), errors, statistics.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/test_util.hpp"
#include "ordo/coro.hpp"
#include "ordo/ordo.hpp"
#include "ordo/storage.hpp"

namespace ordo::test {
namespace {

constexpr std::size_t kKiB = 1024;

TEST(SizeClasses, PowersOfTwoUpToTheCutoffThenPages) {
  const SizeClasses c{.page = 4096, .pow2_cutoff = 64 * kKiB};
  EXPECT_EQ(c.round(0), 4096U);
  EXPECT_EQ(c.round(1), 4096U);
  EXPECT_EQ(c.round(4096), 4096U);
  EXPECT_EQ(c.round(4097), 8192U);
  EXPECT_EQ(c.round(9000), 16384U);   // 3 pages -> 4 pages
  EXPECT_EQ(c.round(64 * kKiB), 64 * kKiB);
  EXPECT_EQ(c.round(64 * kKiB + 1), 64 * kKiB + 4096);  // over the cutoff: page multiples
  EXPECT_EQ(c.round(100 * kKiB), 100 * kKiB);
  const SizeClasses pages{.page = 4096, .pow2_cutoff = 0};
  EXPECT_EQ(pages.round(3 * 4096 - 5), 3 * 4096U);
}

TEST(BufferPool, BuffersArePageAlignedAndCarryAVariable) {
  Engine engine(Options{.cpu_workers = 2});
  BufferPool pool(engine);
  Buffer a = pool.acquire(100).wait();
  Buffer b = pool.try_acquire(5000);
  ASSERT_TRUE(a);
  ASSERT_TRUE(b);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data()) % 4096, 0U);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % 4096, 0U);
  EXPECT_EQ(a.size(), 100U);
  EXPECT_EQ(a.capacity(), 4096U);
  EXPECT_EQ(b.capacity(), 8192U);
  EXPECT_FALSE(a.var().empty());
  EXPECT_NE(a.var(), b.var());
  engine.push_sync([p = a.data()] { std::memset(p, 1, 100); }, Context::cpu(), {}, {a.var()});
  const BufferPoolStats s = pool.stats();
  EXPECT_EQ(s.in_use_bytes, 4096U + 8192U);
  EXPECT_EQ(s.buffers_in_use, 2U);
  EXPECT_EQ(s.misses, 2U);
  a.release();
  b.release();
  EXPECT_FALSE(a);
  engine.wait_for_all();
  const BufferPoolStats after = pool.stats();
  EXPECT_EQ(after.in_use_bytes, 0U);
  EXPECT_EQ(after.cached_bytes, 4096U + 8192U);
  EXPECT_EQ(after.peak_in_use_bytes, 4096U + 8192U);
}

TEST(BufferPool, ReleasedBlocksAreReusedAndTheOldVariableIsRejected) {
  Engine engine(Options{.cpu_workers = 2});
  BufferPool pool(engine);
  Buffer a = pool.acquire(3000).wait();
  void* const block = a.data();
  const Var old = a.var();
  a.release();
  engine.wait_for_all();
  Buffer b = pool.acquire(4000).wait();  // same class: the same block
  EXPECT_EQ(b.data(), block);
  EXPECT_NE(b.var(), old);
  try {
    engine.push_sync([] {}, Context::cpu(), {}, {old});
    FAIL() << "a push on a released buffer's variable must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::deleted_var);
  }
  const BufferPoolStats s = pool.stats();
  EXPECT_EQ(s.hits, 1U);
  EXPECT_EQ(s.misses, 1U);
  EXPECT_DOUBLE_EQ(s.hit_rate(), 0.5);
}

TEST(BufferPool, ReleaseWaitsForEveryPendingOp) {
  // A deterministic case of the randomized test below: an op held open on a
  // buffer keeps its block out of the pool until it completes.
  Engine engine(Options{.cpu_workers = 2});
  BufferPool pool(engine, {.limit_bytes = 4096});
  Buffer a = pool.acquire(4096).wait();
  void* const block = a.data();
  std::mutex m;
  OnComplete held;
  Counter started;
  engine.push_async(
      [&](RunContext, OnComplete done) {
        {
          std::lock_guard lock(m);
          held = done;
        }
        started.arrive();
      },
      Context::cpu(), {a.var()}, {});
  a.release();
  ASSERT_TRUE(started.wait_for(1));
  engine.push_sync([] {}, Context::cpu(), {}, {engine.new_variable()});  // unrelated work goes on
  EXPECT_FALSE(pool.try_acquire(10)) << "handed out while an op on it was still running";
  EXPECT_EQ(pool.stats().in_use_bytes, 4096U);
  {
    std::lock_guard lock(m);
    held();
  }
  Buffer b = pool.acquire(10).wait();  // now the release runs and the block comes back
  EXPECT_EQ(b.data(), block);
}

/// The randomized check: buffers of three size classes under a tight limit,
/// each written (canary) by the acquirer the moment it gets it, then by a
/// writer op, then checked by reader ops (some held open by the test for a
/// while) that spin for random times. A block handed out while any op on
/// its previous handout was pending would have its canary overwritten
/// under that op: the op sees it (and TSan sees the race).
void canary_run(const Options& options, std::uint64_t seed, int rounds) {
  Engine engine(options);
  BufferPool pool(engine, {.classes = {.page = 4096, .pow2_cutoff = 64 * kKiB}, .limit_bytes = 6 * 16 * kKiB});
  std::mt19937_64 rng(seed);
  std::atomic<int> bad{0};
  const std::size_t sizes[] = {1000, 5000, 16 * kKiB};

  struct Held {
    OnComplete done;
    const std::uint64_t* words;
    std::size_t n;
    std::uint64_t want;
  };
  std::mutex m;
  std::condition_variable arrived;
  std::deque<Held> held;  // guarded by m
  int held_out = 0;       // held ops pushed and not completed (main thread only)
  auto complete_oldest = [&] {
    Held h;
    {
      std::unique_lock lock(m);
      ASSERT_TRUE(arrived.wait_for(lock, std::chrono::seconds(60), [&] { return !held.empty(); }));
      h = held.front();
      held.pop_front();
    }
    for (std::size_t i = 0; i < h.n; ++i) bad += h.words[i] != h.want;
    h.done();
    --held_out;
  };
  auto check = [&bad](const std::uint64_t* w, std::size_t n, std::uint64_t want, int spin) {
    volatile std::uint64_t sink = 0;
    for (int i = 0; i < spin; ++i) sink = sink + static_cast<std::uint64_t>(i);
    for (std::size_t i = 0; i < n; ++i) bad += w[i] != want;
  };

  for (int r = 0; r < rounds; ++r) {
    const std::size_t size = sizes[rng() % 3];
    Buffer b = pool.acquire(size).wait();
    auto* words = b.as<std::uint64_t>();
    const std::size_t n = b.capacity() / sizeof(std::uint64_t);  // the whole block
    const std::uint64_t canary = mix(seed, static_cast<std::uint64_t>(r));
    for (std::size_t i = 0; i < n; ++i) words[i] = canary;  // ours now: nothing may touch it
    const std::uint64_t second = ~canary;
    engine.push_sync(
        [words, n, canary, second, &bad, spin = static_cast<int>(rng() % 2000)] {
          volatile std::uint64_t sink = 0;
          for (int i = 0; i < spin; ++i) sink = sink + static_cast<std::uint64_t>(i);
          for (std::size_t i = 0; i < n; ++i) {
            bad += words[i] != canary;
            words[i] = second;
          }
        },
        Context::cpu(), {}, {b.var()}, {.name = "canary writer"});
    const int readers = static_cast<int>(rng() % 3);
    for (int k = 0; k < readers; ++k) {
      engine.push_sync([=, &check] { check(words, n, second, static_cast<int>(mix(canary, k) % 4000)); },
                       Context::cpu(), {b.var()}, {}, {.name = "canary reader"});
    }
    if (held_out < 2 && rng() % 4 == 0) {  // at most 2 (32 KiB) held: the limit always leaves room
      ++held_out;
      engine.push_async(
          [&, words, n, second](RunContext, OnComplete done) {
            std::lock_guard lock(m);
            held.push_back(Held{done, words, n, second});
            arrived.notify_all();
          },
          Context::cpu(), {b.var()}, {}, {.name = "held reader"});
    }
    b.release();
    if (held_out == 2 && rng() % 3 == 0) complete_oldest();
  }
  while (held_out > 0) complete_oldest();
  engine.wait_for_all();
  const BufferPoolStats s = pool.stats();
  EXPECT_EQ(bad.load(), 0) << "a block was handed out while an op on it was pending; seed=" << seed;
  EXPECT_LE(s.peak_reserved_bytes, 6 * 16 * kKiB) << "seed=" << seed;
  EXPECT_EQ(s.in_use_bytes, 0U);
  EXPECT_GT(s.hits, 0U) << "seed=" << seed;
}

class BufferPoolRandom : public ::testing::TestWithParam<EngineConfig> {};

TEST_P(BufferPoolRandom, NeverHandsOutABufferWithPendingOps) {
  const std::uint64_t seed = test_seed("canary");
  canary_run(GetParam().options, seed, 600 / kScale);
}

INSTANTIATE_TEST_SUITE_P(Engines, BufferPoolRandom, ::testing::ValuesIn(all_engine_configs()), config_name);

Task<void> acquire_fill_release(Engine& engine, BufferPool& pool, std::atomic<int>& holding, std::atomic<int>& most,
                                std::atomic<int>& finished, int id) {
  Buffer b = co_await pool.acquire(16 * kKiB);
  const int now = holding.fetch_add(1) + 1;
  int seen = most.load();
  while (now > seen && !most.compare_exchange_weak(seen, now)) {
  }
  co_await engine.push(reads(), writes(b.var()), [p = b.data(), id] { std::memset(p, id & 0xff, 16 * kKiB); });
  holding.fetch_sub(1);
  b.release();  // returns behind the fill (already done here)
  finished.fetch_add(1);
}

TEST(BufferPool, LimitSuspendsCoroutinesAndResumesThemWithoutDeadlock) {
  Engine engine(Options{.cpu_workers = 2});
  BufferPool pool(engine, {.limit_bytes = 4 * 16 * kKiB});
  std::atomic<int> holding{0}, most{0}, finished{0};
  std::vector<Buffer> first;
  for (int i = 0; i < 4; ++i) first.push_back(pool.acquire(16 * kKiB).wait());  // the pool is full
  constexpr int kTasks = 64;
  {
    AsyncScope scope;
    for (int i = 0; i < kTasks; ++i) scope.spawn(acquire_fill_release(engine, pool, holding, most, finished, i));
    EXPECT_EQ(finished.load(), 0);
    EXPECT_EQ(pool.stats().waits, static_cast<std::uint64_t>(kTasks)) << "every acquirer waits at the limit";
    first.clear();  // four releases start the cascade
    scope.sync_join();
  }
  engine.wait_for_all();
  EXPECT_EQ(finished.load(), kTasks);
  EXPECT_LE(most.load(), 4);
  const BufferPoolStats s = pool.stats();
  EXPECT_EQ(s.peak_reserved_bytes, 4 * 16 * kKiB);
  EXPECT_EQ(s.misses, 4U);
  EXPECT_EQ(s.acquires, 4U + kTasks);
}

TEST(BufferPool, LimitBlocksThreadsAndResumesThem) {
  Engine engine(Options{.cpu_workers = 2});
  BufferPool pool(engine, {.limit_bytes = 2 * 4096});
  Buffer a = pool.acquire(4096).wait();
  Buffer b = pool.acquire(4096).wait();
  std::atomic<int> got{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      Buffer mine = pool.acquire(4096).wait();
      engine.push_sync([p = mine.data()] { p[0] = std::byte{1}; }, Context::cpu(), {}, {mine.var()});
      got.fetch_add(1);
    });  // `mine` released at the end of the thread
  }
  a.release();
  b.release();
  for (auto& t : threads) t.join();
  EXPECT_EQ(got.load(), 4);
  engine.wait_for_all();
  EXPECT_LE(pool.stats().peak_reserved_bytes, 2 * 4096U);
}

TEST(BufferPool, FreesCachedBlocksOfOtherSizesToFitUnderTheLimit) {
  Engine engine(Options{.cpu_workers = 1});
  BufferPool pool(engine, {.limit_bytes = 64 * kKiB});
  for (std::size_t size : {4096U, 8192U, 16384U, 32768U}) pool.acquire(size).wait().release();
  engine.wait_for_all();
  EXPECT_EQ(pool.stats().cached_bytes, 60 * kKiB);
  Buffer big = pool.acquire(64 * kKiB).wait();  // fits only once every cached block is freed
  const BufferPoolStats s = pool.stats();
  EXPECT_EQ(s.cached_bytes, 0U);
  EXPECT_EQ(s.reserved_bytes, 64 * kKiB);
  EXPECT_EQ(s.trimmed, 4U);
}

TEST(BufferPool, ErrorsAreClear) {
  Engine engine(Options{.cpu_workers = 1});
  BufferPool pool(engine, {.limit_bytes = 8192});
  try {
    (void)pool.acquire(10000);
    FAIL() << "a block over the limit can never be served";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("16384"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("8192"), std::string::npos) << e.what();
  }
  EXPECT_THROW(BufferPool(engine, {.classes = {.page = 1000}}), Error);
  BufferPool unlimited(engine);
  EXPECT_THROW((void)unlimited.acquire(SIZE_MAX), Error);
  EXPECT_THROW((void)unlimited.try_acquire(SIZE_MAX - 10), Error);
  // A blocking acquire inside an op, with the pool full, would wait for a
  // release that may need this worker: it throws instead.
  Buffer all = pool.acquire(8192).wait();
  engine.push_sync([&] { (void)pool.acquire(4096).wait(); }, Context::cpu(), {}, {all.var()});
  try {
    engine.wait_for_var(all.var());
    FAIL() << "expected wait_inside_op";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::wait_inside_op);
  }
}

Task<void> wait_forever(BufferPool& pool, std::atomic<int>& code) {
  try {
    Buffer b = co_await pool.acquire(4096);
    code = 1;
  } catch (const Error& e) {
    code = e.code() == Errc::cancelled ? 2 : 3;
  }
}

TEST(BufferPool, DestroyingThePoolCancelsWaitersAndOutstandingBuffersStillReturn) {
  Engine engine(Options{.cpu_workers = 2});
  std::atomic<int> code{0};
  Buffer kept;
  {
    AsyncScope scope;
    auto pool = std::make_unique<BufferPool>(engine, BufferPoolOptions{.limit_bytes = 4096});
    kept = pool->acquire(4096).wait();
    scope.spawn(wait_forever(*pool, code));
    EXPECT_EQ(pool->stats().waits, 1U);
    pool.reset();
    scope.sync_join();
  }
  EXPECT_EQ(code.load(), 2);
  engine.push_sync([p = kept.data()] { p[0] = std::byte{7}; }, Context::cpu(), {}, {kept.var()});
  kept.release();  // after the pool: the block goes back to the allocator (ASan checks the leak)
  engine.wait_for_all();
}

TEST(BufferPool, SteadyLoopKeepsMemoryFlat) {
  Engine engine(Options{.cpu_workers = 2});
  BufferPool pool(engine, {.limit_bytes = 8 * 64 * kKiB});
  Var sum = engine.new_variable();
  std::uint64_t total = 0;
  std::size_t reserved_after_warmup = 0;
  for (int i = 0; i < 2000 / kScale; ++i) {
    Buffer b = pool.acquire(64 * kKiB).wait();
    engine.push_sync([p = b.data(), i] { std::memset(p, i & 0xff, 64 * kKiB); }, Context::cpu(), {}, {b.var()});
    engine.push_sync([p = b.data(), &total] { total += static_cast<std::uint64_t>(p[100]); }, Context::cpu(),
                     {b.var()}, {sum});
    b.release();
    if (i == 100) reserved_after_warmup = pool.stats().reserved_bytes;
  }
  engine.wait_for_all();
  const BufferPoolStats s = pool.stats();
  EXPECT_LE(s.peak_reserved_bytes, 8 * 64 * kKiB);
  EXPECT_LE(s.reserved_bytes, 8 * 64 * kKiB);
  EXPECT_GE(reserved_after_warmup, 64 * kKiB);
  EXPECT_GT(s.hit_rate(), 0.9);
  EXPECT_EQ(pool.trim(), s.cached_bytes);
  EXPECT_EQ(pool.stats().reserved_bytes, 0U);
}

// Engine::stats() sums the engine's pools while they live: one miss then
// one hit (the block came back to its bucket) is a hit rate of one half.
TEST(BufferPool, EngineStatsSumsThePools) {
  Engine engine(Options{.cpu_workers = 2});
  {
    BufferPool pool(engine);
    BufferPool other(engine);
    pool.try_acquire(100).release();
    engine.wait_for_all();  // the release op has run: the block is cached
    Buffer again = pool.try_acquire(100);
    const EngineStats s = engine.stats();
    EXPECT_EQ(s.buffers.pools, 2U);
    EXPECT_EQ(s.buffers.acquires, 2U);
    EXPECT_EQ(s.buffers.hits, 1U);
    EXPECT_EQ(s.buffers.misses, 1U);
    EXPECT_DOUBLE_EQ(s.buffers.hit_rate(), 0.5);
    EXPECT_EQ(s.buffers.in_use_bytes, 4096U);
  }
  EXPECT_EQ(engine.stats().buffers.pools, 0U);
}

}  // namespace
}  // namespace ordo::test

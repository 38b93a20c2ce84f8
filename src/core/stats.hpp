// src/core/stats.hpp - the engine's side of Engine::stats(): per-thread
// completion counters and the layers' stats sources. Internal.
//
// Completions are counted where the engine already does its in-flight
// bookkeeping (a worker's batch, a call's end, a foreign thread's
// completion, an op run inside its push), each thread into a counter of its
// own (a load and a store, no read-modify-write), summed by the snapshot.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "ordo/detail/stats_source.hpp"
#include "ordo/stats.hpp"

namespace ordo::detail {

/// The counter this thread used last, and the hub it belongs to.
struct StatsCache {
  std::uint64_t hub = 0;
  std::atomic<std::uint64_t>* counter = nullptr;
};
// constinit: reached without a TLS init call, as ThreadState is.
extern constinit thread_local StatsCache t_stats_cache;

class StatsHub {
 public:
  StatsHub();
  StatsHub(const StatsHub&) = delete;
  StatsHub& operator=(const StatsHub&) = delete;

  /// `n` ops finished on this thread (noexcept: a thread whose counter
  /// cannot be allocated counts into a shared one).
  void count_completed(std::uint64_t n) noexcept {
    const StatsCache& c = t_stats_cache;
    if (c.hub == uid_) [[likely]] {
      // Only this thread writes it: a load and a store; the snapshot's relaxed
      // loads see some recent value, which is all a live counter promises.
      c.counter->store(c.counter->load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
      return;
    }
    count_first(n);
  }
  /// Every thread's count, summed.
  [[nodiscard]] std::uint64_t completed() const;

  void add_source(const StatsSource* s);
  void remove_source(const StatsSource* s) noexcept;
  /// Asks every source to add its counters to `stats`.
  void collect(EngineStats& stats) const;
  /// When the engine was created (TimerService::now_ns()).
  [[nodiscard]] std::int64_t created_ns() const noexcept { return created_ns_; }

 private:
  struct alignas(64) Counter {
    std::atomic<std::uint64_t> n{0};
  };
  /// This thread's first count for this hub (or the cache held another's).
  void count_first(std::uint64_t n) noexcept;

  std::int64_t created_ns_;
  std::uint64_t uid_;  ///< process-unique: keys the thread_local one-entry cache
  /// Two locks: a completion that counts for the first time on its thread
  /// must not wait for a snapshot calling into a source (which may hold
  /// the source's own lock, and that holder may complete an op).
  mutable std::mutex counters_mutex_;
  std::vector<std::unique_ptr<Counter>> counters_;  ///< guarded by counters_mutex_; one per thread that counted
  /// For a thread whose own counter could not be allocated (out of memory):
  /// shared, so read-modify-writes (never cached).
  Counter shared_;
  mutable std::mutex sources_mutex_;
  std::vector<const StatsSource*> sources_;  ///< guarded by sources_mutex_
};

}  // namespace ordo::detail

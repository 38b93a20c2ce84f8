// src/core/stats.cpp - Engine::stats(): the snapshot assembled from the
// engine's counts, its pools and the layers' sources (ordo/stats.hpp).
#include "stats.hpp"

#include <algorithm>

#include "ordo/detail/extension.hpp"
#include "ordo/detail/timer_service.hpp"
#include "ordo/engine.hpp"
#include "engine_core.hpp"
#include "worker_pool.hpp"

namespace ordo {
namespace detail {

constinit thread_local StatsCache t_stats_cache;

namespace {
std::atomic<std::uint64_t> g_hub_uid{0};
}

StatsHub::StatsHub()
    : created_ns_(TimerService::now_ns()), uid_(g_hub_uid.fetch_add(1, std::memory_order_relaxed) + 1) {}

void StatsHub::count_first(std::uint64_t n) noexcept {
  std::atomic<std::uint64_t>* counter = nullptr;
  try {
    auto c = std::make_unique<Counter>();
    counter = &c->n;
    const std::lock_guard lock(counters_mutex_);
    counters_.push_back(std::move(c));
  } catch (...) {
    // Out of memory: this count goes to the shared counter, and the next
    // one tries again.
    shared_.n.fetch_add(n, std::memory_order_relaxed);
    return;
  }
  counter->store(n, std::memory_order_relaxed);
  t_stats_cache = StatsCache{uid_, counter};
}

std::uint64_t StatsHub::completed() const {
  std::uint64_t total = shared_.n.load(std::memory_order_relaxed);
  const std::lock_guard lock(counters_mutex_);
  for (const auto& c : counters_) total += c->n.load(std::memory_order_relaxed);
  return total;
}

void StatsHub::add_source(const StatsSource* s) {
  const std::lock_guard lock(sources_mutex_);
  sources_.push_back(s);
}

void StatsHub::remove_source(const StatsSource* s) noexcept {
  const std::lock_guard lock(sources_mutex_);
  sources_.erase(std::remove(sources_.begin(), sources_.end(), s), sources_.end());
}

void StatsHub::collect(EngineStats& stats) const {
  const std::lock_guard lock(sources_mutex_);
  for (const StatsSource* s : sources_) s->add_to(stats);
}

PoolStats WorkerPool::stats(std::int64_t now) const {
  PoolStats p;
  p.name = name_;
  p.workers = static_cast<unsigned>(n_threads_);
  p.ready = queued();
  const int idle = sleepers_.load(std::memory_order_relaxed) + spinning_.load(std::memory_order_relaxed);
  p.running = static_cast<unsigned>(std::clamp(n_threads_ - idle, 0, n_threads_));
  for (int i = 0; i < n_threads_; ++i) {
    const IdleClock& c = idle_[i];
    std::int64_t idle_ns = c.idle_ns.load(std::memory_order_relaxed);
    // An idle period still going on counts up to now.
    if (const std::int64_t since = c.since.load(std::memory_order_relaxed); since != 0 && since < now) {
      idle_ns += now - since;
    }
    p.idle_ns += idle_ns;
  }
  const std::int64_t alive = std::max<std::int64_t>(0, now - started_ns_) * n_threads_;
  p.busy_ns = std::max<std::int64_t>(0, alive - p.idle_ns);
  return p;
}

void EngineExtension::add_stats_source(Engine& engine, const StatsSource* source) {
  engine.core_->stats_hub().add_source(source);
}

void EngineExtension::remove_stats_source(Engine& engine, const StatsSource* source) noexcept {
  engine.core_->stats_hub().remove_source(source);
}

}  // namespace detail

EngineStats Engine::stats() const {
  detail::EngineCore& core = *core_;
  EngineStats s;
  // in_flight_ first: a completion is counted before it leaves the in-flight
  // count (subtract_finished), so no op is missed between the two reads.
  s.ops_in_flight = core.in_flight();
  s.ops_completed = core.stats_hub().completed();
  s.ops_pushed = s.ops_completed + s.ops_in_flight;
  s.ops_failed = core.errors_raised();
  const std::int64_t now = detail::TimerService::now_ns();
  s.uptime_ns = now - core.stats_hub().created_ns();
  for (const detail::WorkerPool* p : core.pools()) s.pools.push_back(p->stats(now));
  core.stats_hub().collect(s);
  return s;
}

}  // namespace ordo

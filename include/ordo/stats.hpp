// ordo/stats.hpp - live counters of a running engine: Engine::stats().
//
//   ordo::EngineStats s = engine.stats();   // any thread, any time; the engine keeps running
//   std::cout << s.ops_completed << " done, " << s.ops_in_flight << " in flight\n";
//   for (const auto& p : s.pools) std::cout << p.name << ": " << p.ready << " ready\n";
//
// Always on (no option): the counts come from what the engine keeps anyway
// and from per-thread counters summed by the snapshot, so pushing an op pays
// nothing for them. See docs/profiler.md#live-counters.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ordo {

/// One worker pool of the engine (cpu, cpu_priority, io, gpu0.compute, ...).
struct PoolStats {
  std::string name;              ///< as in the profiler's track names ("cpu", "io", ...)
  unsigned workers = 0;          ///< threads of the pool
  std::uint64_t ready = 0;       ///< ops queued for its workers, not started yet
  unsigned running = 0;          ///< workers neither asleep nor looking for work (running an op)
  std::int64_t idle_ns = 0;      ///< summed over its workers: time spent looking for work or asleep
  std::int64_t busy_ns = 0;      ///< summed over its workers: the rest of their life (op bodies and bookkeeping)
};

/// ordo::io requests of one kind ("read", "write", "openat", "timer", ...),
/// over every io::Reactor of the engine.
struct IoKindStats {
  std::string kind;
  std::uint64_t submitted = 0;   ///< since the reactors were created
  std::uint64_t in_flight = 0;   ///< submitted, not delivered yet
};

/// The BufferPools (ordo/storage.hpp) of the engine, summed.
struct BufferPoolTotals {
  unsigned pools = 0;
  std::uint64_t acquires = 0;
  std::uint64_t hits = 0;        ///< served from a bucket, without allocation
  std::uint64_t misses = 0;
  std::uint64_t in_use_bytes = 0;
  std::uint64_t cached_bytes = 0;
  [[nodiscard]] double hit_rate() const noexcept {
    return acquires == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(acquires);
  }
};

/// A snapshot of Engine::stats(). Its counts are read one after another
/// while the engine runs, not at one instant: each is exact for some moment
/// during the call, and ops_pushed may run ahead of the others by the ops
/// finished during the call.
struct EngineStats {
  std::uint64_t ops_pushed = 0;     ///< ops, waits and posts the engine accepted (a push that threw is not counted)
  std::uint64_t ops_completed = 0;  ///< of those, finished (ok, failed or skipped)
  std::uint64_t ops_in_flight = 0;  ///< pushed, not finished (Engine::in_flight(); a worker publishes its
                                    ///< finished ops in batches, so up to 64 per worker may still count here)
  std::uint64_t ops_failed = 0;     ///< errors raised: op bodies that threw or completed with an exception
  std::int64_t uptime_ns = 0;       ///< since the engine was constructed
  std::vector<PoolStats> pools;     ///< the pools started so far (none for the naive engine)
  std::vector<IoKindStats> io;      ///< kinds with at least one request submitted; empty without ordo::io
  std::string io_backend;           ///< "io_uring", "threads", several joined by ',', or "" (no reactor)
  BufferPoolTotals buffers;
};

}  // namespace ordo

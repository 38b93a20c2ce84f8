// ordo/detail/idle_ring.hpp - a completion ring that an idle CPU worker waits
// in instead of sleeping (ordo::io's io_uring backend). Internal; not for
// user code.
#pragma once

#include <atomic>
#include <cstdint>

namespace ordo {
class Engine;
}

namespace ordo::detail {

/// A completion queue that one idle CPU worker of an engine at a time waits
/// on instead of its futex. A request's completion then wakes the worker
/// that will deliver it and run what it made ready (a coroutine's
/// resumption), rather than a reaper thread that hands it to a worker: one
/// wake-up per completion instead of two or three.
///
/// The engine wakes a worker waiting here through `word` (it changes the
/// value and futex-wakes the word), so the ring must also end its wait
/// on such a wake-up (io_uring: a FUTEX_WAIT request on the word).
class IdleRing {
 public:
  /// Waits until completions are ready for deliver(), or `word` no longer
  /// holds `value`, or spuriously. Delivers nothing. Called by the one worker
  /// that holds the ring; deliver() always follows.
  virtual void wait(std::atomic<std::uint32_t>& word, std::uint32_t value) noexcept = 0;
  /// Completions are waiting (a hint, any thread): a spinning worker stops
  /// spinning and waits in the ring, which then returns at once.
  [[nodiscard]] virtual bool ready() const noexcept = 0;
  /// Requests are in flight, past their submit call, or completions are
  /// waiting (a hint, any thread). An idle worker waits in the ring only
  /// then (at once, without spinning first), and sleeps on its futex
  /// otherwise: a request that the kernel completes during its submit (a
  /// read from the page cache) needs no waiter, and its CQE would wake one.
  /// A submit that leaves requests in flight with nobody in the ring calls
  /// EngineExtension::want_idle_ring_waiter().
  [[nodiscard]] virtual bool pending() const noexcept = 0;
  /// Delivers the completions that are ready, on the calling worker, and
  /// gives the ring up (a reaper thread takes over while no worker waits).
  virtual void deliver() noexcept = 0;

 protected:
  ~IdleRing() = default;
};

}  // namespace ordo::detail

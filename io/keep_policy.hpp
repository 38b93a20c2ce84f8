// io/keep_policy.hpp - how long a worker that delivered completions from the
// ring keeps what they made ready to itself (detail::IdleTask::run).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace ordo::io::detail {

/// After a delivery from the ring, the delivering worker runs what it made
/// ready by itself for up to kKeepNs rather than waking a sleeper for it:
/// mostly coroutines resumed by their I/O, which run a microsecond or two and
/// submit their next request. The kernel runs those requests' task_work in
/// the submitting thread, which is then the ring's waiter, not another core
/// to be interrupted (figures: docs/io.md, "Example and figures", the run
/// at de926c7). Work whose ops lately averaged over kKeepOpNs spreads
/// over the workers at once; one delivery in kProbe is kept anyway, so that
/// the average follows the ops. Misjudged, it idles a second core for up to
/// kKeepNs; the reaper's watchdog tick covers requests submitted meanwhile.
///
/// @par Thread safety
/// grant() by the ring's runner only (one thread at a time); kept() from
/// any thread.
class KeepPolicy {
 public:
  static constexpr std::int64_t kKeepNs = 500'000;
  static constexpr std::int64_t kKeepOpNs = 20'000;
  static constexpr std::uint32_t kProbe = 16;
  static_assert((kProbe & (kProbe - 1)) == 0, "kProbe is used as a mask: a power of two");

  /// After a delivery: how long (ns) the worker may keep what it made ready.
  [[nodiscard]] std::int64_t grant() noexcept {
    if (op_ns_.load(std::memory_order_relaxed) < kKeepOpNs || (++probe_ & (kProbe - 1)) == 0) return kKeepNs;
    return 0;
  }

  /// A keep ended: `ops` ops ran in `ns`.
  void kept(std::int64_t ops, std::int64_t ns) noexcept {
    if (ops <= 0) return;
    // Clamped: one keep stretched by a preemption moves the average by half
    // the bound at most.
    const std::int64_t per_op = std::min(ns / ops, 2 * kKeepOpNs);
    const std::int64_t avg = op_ns_.load(std::memory_order_relaxed);
    // Racy updates may lose a sample: a hint.
    op_ns_.store(avg < 0 ? per_op : avg + (per_op - avg) / 4, std::memory_order_relaxed);
  }

 private:
  /// Moving average (ns) of the ops that workers ran while keeping; -1: none measured yet.
  std::atomic<std::int64_t> op_ns_{-1};
  std::uint32_t probe_ = 0;  ///< deliveries whose keep the average refused (grant() only)
};

}  // namespace ordo::io::detail

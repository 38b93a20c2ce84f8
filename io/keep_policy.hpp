// io/keep_policy.hpp - how long a worker that delivered completions from the
// ring keeps what they made ready to itself (detail::IdleTask::run).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace ordo::io::detail {

/// A worker that waited in the ring and delivered what completed there
/// keeps the ops that made ready to itself for a while, instead of waking a
/// sleeper for them and a second one to wait in the ring: mostly coroutines
/// resumed by their I/O, which run for a microsecond or two and submit their
/// next request. The kernel runs a completion's task_work in the thread that
/// submitted the request, so requests submitted by the worker that then
/// waits in the ring cost one wake-up per batch of completions; spread over
/// two workers, cross-core wake-ups of the ring's waiter besides (the
/// interrupt counts and IOPS it saves: docs/io.md, session 13).
///
/// The keep ends when the worker runs out of work, or at the first op
/// boundary after kKeepNs (what is still queued then goes to a sleeper), and
/// is not started while kept ops have lately averaged over kKeepOpNs (one
/// delivery in kProbe is kept anyway, to follow the average): work made ready
/// in bulk then spreads over the workers at once. Where it misjudges, a
/// second core idles for up to kKeepNs per delivery. Meanwhile the requests
/// the keeping worker submits have no waiter in the ring; the reaper's
/// watchdog tick covers a keep that ends in a long op.
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

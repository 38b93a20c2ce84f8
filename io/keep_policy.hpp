// io/keep_policy.hpp - how long a worker that delivered completions from the
// ring keeps what they made ready to itself (detail::IdleKeep), and when it
// hands the rest back to the pool. Every decision of the keep lives here.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "ordo/detail/idle_task.hpp"

namespace ordo::io::detail {

/// One worker's keep of what a delivery made ready (KeepPolicy::grant):
/// thread-local, so that it outlives the backend that granted it (the pool
/// may ask go_on() with no task attached).
class RingKeep final : public ordo::detail::IdleKeep {
 public:
  /// Ends the keep past its time; counts the op otherwise.
  bool go_on() noexcept override {
    if (now_ns() - since_ > for_ns_) return false;
    ++ops_;
    return true;
  }

  static std::int64_t now_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

 private:
  friend class KeepPolicy;
  std::int64_t since_ = 0;   ///< when it started
  std::int64_t for_ns_ = 0;  ///< how long it may last
  std::int64_t ops_ = 0;     ///< ops run since
};

/// After a delivery from the ring, the delivering worker runs what it made
/// ready by itself for up to kKeepNs rather than waking a sleeper for it:
/// mostly coroutines resumed by their I/O, which run briefly and submit
/// their next request. The kernel runs those requests' task_work in the
/// submitting thread, which is then the ring's waiter, not another core to
/// be interrupted (docs/io.md, "Inside the backends"). Work whose ops lately
/// averaged over kKeepOpNs spreads over the workers at once; one delivery
/// in kProbe is kept anyway, so that the average follows the ops. Misjudged,
/// it idles a second core for up to kKeepNs; the reaper's watchdog tick
/// covers requests submitted meanwhile.
///
/// @par Thread safety
/// grant() by the ring's runner only (one thread at a time); kept() by the
/// worker whose keep ended, on its own thread (any number at once).
class KeepPolicy {
 public:
  static constexpr std::int64_t kKeepNs = 500'000;
  static constexpr std::int64_t kKeepOpNs = 20'000;
  static constexpr std::uint32_t kProbe = 16;
  static_assert((kProbe & (kProbe - 1)) == 0, "kProbe is used as a mask: a power of two");

  /// After a delivery, on the delivering worker: its keep of what that made
  /// ready, or null (the ops go to sleepers at once).
  [[nodiscard]] ordo::detail::IdleKeep* grant() noexcept {
    if (op_ns_.load(std::memory_order_relaxed) >= kKeepOpNs && (++probe_ & (kProbe - 1)) != 0) return nullptr;
    RingKeep& keep = t_keep_;
    keep.since_ = RingKeep::now_ns();
    keep.for_ns_ = kKeepNs;
    keep.ops_ = 0;
    return &keep;
  }

  /// A keep that grant() returned has ended: its op time feeds the average.
  void kept(ordo::detail::IdleKeep& ended) noexcept {
    const auto& keep = static_cast<const RingKeep&>(ended);
    if (keep.ops_ <= 0) return;
    // Clamped: one keep stretched by a preemption moves the average by half
    // the bound at most.
    const std::int64_t per_op = std::min((RingKeep::now_ns() - keep.since_) / keep.ops_, 2 * kKeepOpNs);
    const std::int64_t avg = op_ns_.load(std::memory_order_relaxed);
    // Racy updates may lose a sample: a hint.
    op_ns_.store(avg < 0 ? per_op : avg + (per_op - avg) / 4, std::memory_order_relaxed);
  }

 private:
  static inline thread_local RingKeep t_keep_;  ///< the calling worker's keep (grant() overwrites it)
  /// Moving average (ns) of the ops that workers ran while keeping; -1: none measured yet.
  std::atomic<std::int64_t> op_ns_{-1};
  std::uint32_t probe_ = 0;  ///< deliveries whose keep the average refused (grant() only)
};

}  // namespace ordo::io::detail

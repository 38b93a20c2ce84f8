// ordo/fence.hpp - the engine's one hook for layers whose ops are "done" for
// the engine before their work has finished (GPU streams: an op is complete
// when its kernels are enqueued). Advanced: ordo::gpu::Runtime uses it; an
// application never needs it directly.
//
// Every variable has a fence slot (one pointer) where such a layer records
// the unfinished work on it (the gpu layer: its CUDA events); the engine only
// tests a slot for null. A ready op whose slots are set goes to the installed
// FenceGate instead of running, until that work has finished. Without a gate
// the engine pays one relaxed load and a branch per dispatch. How held ops,
// wait_for_var and wait_for_all meet the gate: class FenceGate below, and
// docs/gpu.md, "The design question".
#pragma once

#include <atomic>
#include <cstddef>
#include <exception>

#include "ordo/context.hpp"

namespace ordo {

namespace detail {
struct OpRecord;
class ProfilerCore;
}  // namespace detail

/// A variable's fence slot: null, or owned by the installed FenceGate.
/// The gate writes it; the engine reads it (acquire) only to test for null.
/// The engine guarantees a happens-before from an op's completion to the
/// dispatch of every op that conflicts with it, so a slot written by an op
/// before it completes is seen by its successors. A gate that clears a slot
/// once the work behind it finished must store null with release: an op
/// that then finds it null runs at once, on a thread that never talked to
/// the gate, and sees the work's writes only through that pair.
using FenceSlot = std::atomic<void*>;

/// An op the engine handed to a FenceGate instead of running it.
/// A cheap handle; copy it freely, release it exactly once.
class HeldOp {
 public:
  HeldOp() noexcept = default;
  /// Number of (normalised) variables of the op.
  [[nodiscard]] std::size_t size() const noexcept;
  /// Fence slot of the i-th variable.
  [[nodiscard]] FenceSlot& slot(std::size_t i) const noexcept;
  /// Whether the op mutates the i-th variable.
  [[nodiscard]] bool writes(std::size_t i) const noexcept;
  /// The op is Engine::delete_variable's (its only variable is being deleted).
  [[nodiscard]] bool deletes() const noexcept;
  [[nodiscard]] Context context() const noexcept;
  [[nodiscard]] const char* name() const noexcept;
  /// Dispatches the op now, as a completion would (on a worker of its
  /// context; bookkeeping only on the calling thread). With `error`, the op
  /// fails with it instead of running (it is skipped, unless always_run, and
  /// its mutated variables carry the error; a wait_for_var rethrows it).
  void release(std::exception_ptr error = nullptr) const;
  [[nodiscard]] bool empty() const noexcept { return op_ == nullptr; }

 private:
  friend class detail_fence_access;
  friend class detail::ProfilerCore;  // names the op in the trace (detail::profile_fence_release)
  explicit HeldOp(detail::OpRecord* op) noexcept : op_(op) {}
  detail::OpRecord* op_ = nullptr;
};

/// Installed on an engine by Engine::set_fence_gate.
///
/// When an op becomes ready (all its accesses granted) and a gate is
/// installed, the engine looks at the op's slots unless the op carries the
/// fence-exempt trait (detail::kFenceExempt, set through
/// detail::EngineExtension: the layer's own ops, which order themselves after
/// the fences, e.g. by cudaStreamWaitEvent). If one is non-null it hands the
/// op to FenceGate::hold instead of running it; the gate either declines
/// (returns false: the op runs now) or keeps the HeldOp and calls release()
/// once the work behind the fences has finished. Held ops still count as in
/// flight (wait_for_all waits for them). wait_for_var waits are held the same
/// way, so "finished" is what every CPU consumer observes. wait_for_all also
/// asks the gate to wait for the unfinished work behind all fences and to
/// hand over a failure of it that no consumer observed (wait_idle, take_error).
///
/// @par Thread safety
/// hold() is called from any thread that dispatches (pushers, workers,
/// completing threads), concurrently; it must only do bookkeeping and must
/// not call back into the engine (release a held op later, from elsewhere).
class FenceGate {
 public:
  /// Returns true to keep the op (release it later), false to let it run now.
  virtual bool hold(HeldOp op) noexcept = 0;

  /// Called by Engine::wait_for_all, with a gate installed, once no op is in
  /// flight: blocks until the work behind the fences set so far (the gpu
  /// layer: everything enqueued on its streams) has finished. Any thread,
  /// concurrently; never from inside an op of the engine. Default: nothing.
  virtual void wait_idle() {}
  /// Called by Engine::wait_for_all after wait_idle() when it has no error of
  /// its own to rethrow: a failure of that work that nobody has been given yet
  /// (no held op was released with it, no wait rethrew it), now claimed so it
  /// is reported once; null if none. Default: null.
  [[nodiscard]] virtual std::exception_ptr take_error() noexcept { return nullptr; }

 protected:
  FenceGate() = default;
  ~FenceGate() = default;
  FenceGate(const FenceGate&) = default;
  FenceGate& operator=(const FenceGate&) = default;
};

/// Engine-internal constructor access (src/core/engine_core.cpp).
class detail_fence_access {
 public:
  static HeldOp make(detail::OpRecord* op) noexcept { return HeldOp(op); }
};

}  // namespace ordo

// ordo/detail/idle_task.hpp - work that an idle CPU worker does instead of
// sleeping (ordo::io's io_uring ring). Internal; not for user code.
#pragma once

#include <cstdint>

namespace ordo::detail {

/// What one idle CPU worker of an engine at a time runs instead of sleeping
/// on its futex, in the spirit of Asio's scheduler_task. ordo::io's io_uring
/// backend is one: the worker waits for completions in the ring and delivers
/// them itself, then runs what they made ready (io/uring_backend.cpp).
/// Attached with EngineExtension::attach_idle_task(). A task that becomes
/// wanted while no worker runs it calls EngineExtension::want_idle_task_runner()
/// after the stores that make wanted() true: the pool fences there and
/// before its own look at wanted(), so no worker falls asleep missing it.
///
/// @par Thread safety
/// wait() and run() are called by the runner: the one worker that holds the
/// task, and run() only after wait(). wanted(), interrupt() and kept() may be
/// called from any thread, at the same time as those.
class IdleTask {
 public:
  /// There is, or soon will be, work for the task: an idle worker runs it
  /// rather than sleeps (a hint).
  [[nodiscard]] virtual bool wanted() const noexcept = 0;
  /// Blocks until there is work to run(), or interrupt() is called, or spuriously.
  virtual void wait() noexcept = 0;
  /// Does the work that is there, without blocking. Returns how long (ns)
  /// the worker may then run what that made ready by itself, waking no
  /// sleeper for it (a keep; 0: not at all).
  virtual std::int64_t run() noexcept = 0;
  /// Makes the wait() in progress return soon, or the next one at once if none is.
  virtual void interrupt() noexcept = 0;
  /// A keep that run() allowed has ended: the worker ran `ops` ops in `ns`
  /// (what the next run() allows may depend on it).
  virtual void kept(std::int64_t ops, std::int64_t ns) noexcept = 0;

 protected:
  ~IdleTask() = default;
};

}  // namespace ordo::detail

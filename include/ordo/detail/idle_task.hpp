// ordo/detail/idle_task.hpp - the entry of a worker pool that an idle CPU
// worker runs instead of sleeping (ordo::io's io_uring ring), and the keep it
// may hand its worker. Internal; not for user code.
#pragma once

namespace ordo::detail {

/// What a worker may do after running an IdleTask: run the ops that the run
/// made ready by itself, waking no sleeper for them, while go_on() says so.
/// How long, and when it ends, is the task's to decide; the pool only asks.
/// The object belongs to the worker's thread (a thread_local of the task's
/// code), not to the task, so it outlives a task detached meanwhile.
class IdleKeep {
 public:
  /// Asked by the keeping worker, on its own thread, before each op it takes:
  /// true, the op is part of the keep; false, the keep is over and the worker
  /// hands what is queued to sleepers as usual.
  virtual bool go_on() noexcept = 0;

 protected:
  ~IdleKeep() = default;
};

/// What one idle CPU worker of an engine at a time runs instead of sleeping
/// on its futex, as Asio's scheduler runs its reactor task. ordo::io's
/// io_uring backend is one: the worker waits for completions in the ring and
/// delivers them itself, then runs what they made ready (io/uring_backend.cpp).
/// Attached with EngineExtension::attach_idle_task(). A task that becomes
/// wanted while no worker runs it calls EngineExtension::want_idle_task_runner()
/// after the stores that make wanted() true: the pool's read-modify-writes
/// there and before its own look at wanted() order the two (WorkerPool::sleep).
///
/// @par Thread safety
/// wait() and run() are called by the runner: the one worker that holds the
/// task, and run() only after wait(). kept() by a worker whose keep ended,
/// with the task still attached. wanted() and interrupt() from any thread,
/// at the same time as those.
class IdleTask {
 public:
  /// There is, or soon will be, work for the task: an idle worker runs it
  /// rather than sleeps (a hint).
  [[nodiscard]] virtual bool wanted() const noexcept = 0;
  /// Blocks until there is work to run(), or interrupt() is called, or spuriously.
  virtual void wait() noexcept = 0;
  /// Does the work that is there, without blocking. Returns the calling
  /// worker's keep for what that made ready, or null: no keep.
  virtual IdleKeep* run() noexcept = 0;
  /// Makes the wait() in progress return soon, or the next one at once if none is.
  virtual void interrupt() noexcept = 0;
  /// The keep that run() returned to the calling worker has ended: it ran
  /// out of work, or go_on() said no.
  virtual void kept(IdleKeep& keep) noexcept = 0;

 protected:
  ~IdleTask() = default;
};

}  // namespace ordo::detail

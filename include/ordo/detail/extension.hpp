// ordo/detail/extension.hpp - the one interface through which ordo's layers
// (ordo::io, the coroutines, the gpu layer) extend the engine. Internal; not
// for user code.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "ordo/detail/idle_task.hpp"
#include "ordo/detail/profile_hooks.hpp"
#include "ordo/detail/stats_source.hpp"
#include "ordo/detail/timer_service.hpp"
#include "ordo/engine.hpp"

namespace ordo::detail {

/// A layer object that uses an engine from threads of its own (ordo::io's
/// Reactor: its reaper completes ops and posts to the engine, it serves the
/// engine's timers and idle workers). Registered with EngineExtension::watch,
/// it is told when the engine's destructor begins, before the drain, so that
/// it can stop using the engine while the engine still runs what it hands
/// over; it must not touch the engine after engine_closing() returned.
class EngineWatcher {
 public:
  /// Called once, on the thread destroying the engine, before the engine
  /// drains; the watcher was unregistered just before. Must return only once
  /// the watcher's threads no longer call into the engine.
  virtual void engine_closing() noexcept = 0;

 protected:
  ~EngineWatcher() = default;
};

/// A layer describes what its ops are (OpTraits), never who it is: the core
/// names none of its clients. The Engine befriends this struct.
struct EngineExtension {
  /// push_sync / push_async (told apart by fn's signature) of an op with
  /// `traits` (OpTraits bits) on top of what attrs says. ordo::io's
  /// launchers: kRunsOnPusher | kNoUserCode; a coroutine lease's grant:
  /// kRunsOnPusher; the gpu layer's stream ops: kFenceExempt.
  /// `pushed`, if given, receives the op (for queued_behind).
  template <class F>
  static void push(Engine& engine, F&& fn, Context ctx, VarSpan reads, VarSpan writes, const OpAttrs& attrs,
                   std::uint8_t traits, PushedOp* pushed = nullptr) {
    static_assert(is_sync_fn_v<std::decay_t<F>> || is_async_fn_v<std::decay_t<F>>,
                  "an op body is void(RunContext), void() or void(RunContext, OnComplete)");
    if (GraphRecorder* rec = t_recorder; rec != nullptr && rec->engine() == &engine) [[unlikely]] {
      GraphRecorder::refuse_layer_push(traits);
    }
    OpRecord* op = op_alloc();
    OpGuard guard(op);
    op->fn.emplace(std::forward<F>(fn));
    // Read while the record is still ours: its completion changes it.
    if (pushed != nullptr) *pushed = PushedOp{op, op->gen.load(std::memory_order_relaxed)};
    engine.submit(guard, ctx, reads, writes, attrs, traits);
  }

  /// Engine::new_operator whose every push carries `traits` (the gpu layer's
  /// operators: kFenceExempt).
  template <class F>
  [[nodiscard]] static Operator new_operator(Engine& engine, F&& fn, VarSpan reads, VarSpan writes,
                                             const OpAttrs& attrs, std::uint8_t traits) {
    OperatorRecord* rec = engine.alloc_operator();
    try {
      Engine::operator_fn(rec).emplace(std::forward<F>(fn));
    } catch (...) {
      engine.free_operator(rec);
      throw;
    }
    return engine.init_operator(rec, reads, writes, attrs, traits);
  }

  /// A coroutine lease granted inside its push, with no body: where the
  /// engine would run the lease's push at once (not on a CompletionThread,
  /// but with the naive engine) and all of its variables are free now (no
  /// profiler or fence gate on, at most DirectRun::kMaxAccess variables, a
  /// CPU context), grants the accesses and returns the started op (its
  /// OnComplete releases them) and this thread's worker index (-1: not a
  /// worker of `engine`); null where the usual push must be made. The
  /// coroutine then goes on where it is: it runs no other op.
  /// `traits`: those the lease's push would carry (its placement).
  static OpRecord* grant_now(Engine& engine, Context ctx, VarSpan reads, VarSpan writes, const OpAttrs& attrs,
                             std::uint8_t traits, int& worker) {
    if (GraphRecorder* rec = t_recorder; rec != nullptr && rec->engine() == &engine) [[unlikely]] {
      GraphRecorder::refuse_layer_push(kRunsOnPusher);
    }
    return engine.grant_lease_now(ctx, reads, writes, attrs, traits, worker);
  }

  /// Whether OpAttrs::inline_ok decides where an op pushed on this thread now
  /// would run (the engine's placement decision): on this thread with it, on
  /// a worker without it. False where it runs here either way (the naive
  /// engine) or never (a completion thread). ordo::asio's inline mode asks it.
  static bool inline_ok_decides(const Engine& engine, Context ctx, const OpAttrs& attrs) noexcept;
  /// Whether an inline_ok op pushed ready from a thread serving an
  /// io_context runs right there: the engine's placement decision, told
  /// the body's measured cost and the io_context's pending work.
  static bool inline_at_io(const Engine& engine, Context ctx, const OpAttrs& attrs, const IoSite& site) noexcept;

  /// The engine's core, for the parts of the library built beside it
  /// (src/graph: a replay pushes its recorded, normalised accesses).
  [[nodiscard]] static EngineCore* core(Engine& engine) noexcept { return engine.core_.get(); }

  /// A reference to a pre-built operator for one push, as
  /// Engine::push(Operator) takes it (released by EngineCore::release_operator);
  /// throws Errc::deleted_operator if `gen` is no longer its generation.
  static void retain_operator(Engine& engine, OperatorRecord* rec, std::uint64_t gen);

  /// The engine's timer service (ordo/timer.hpp; ordo::io's io_uring
  /// Reactor attaches to it as its delegate), made by the first call (its
  /// thread starts with the first timer that lands on it). Lives until the
  /// engine's destructor, which destroys it before draining.
  static TimerService& timers(Engine& engine);

  /// From now on one idle CPU worker of `engine` at a time may run `task`
  /// (detail::IdleTask) instead of sleeping. False where none can: the
  /// naive engine, or another task already attached.
  static bool attach_idle_task(Engine& engine, IdleTask* task) noexcept;
  /// Undoes attach_idle_task(): interrupts the worker waiting in `task`, if
  /// any, and returns once no thread is inside a call to it.
  static void detach_idle_task(Engine& engine, IdleTask* task) noexcept;
  /// The attached task has become wanted() and no worker runs it: brings an
  /// idle worker there. On one of the engine's CPU workers this only leaves
  /// a note: that worker runs the task itself when it runs out of work, and
  /// wakes a sleeper for it if it takes another op first. Elsewhere it wakes
  /// a sleeping worker, if any (none idle: the first to run out of work
  /// finds the task wanted).
  static void want_idle_task_runner(Engine& engine) noexcept;

  /// The engine's profiler (ordo/detail/profile_hooks.hpp), null when
  /// profiling is off. Fixed for the engine's life.
  static ProfilerCore* profiler(Engine& engine) noexcept;

  /// Engine::stats() asks `source` for its counters until it is removed
  /// (remove_stats_source returns once no call to it is running).
  static void add_stats_source(Engine& engine, const StatsSource* source);
  static void remove_stats_source(Engine& engine, const StatsSource* source) noexcept;

  /// Tells `w` when `engine`'s destructor begins (EngineWatcher). Throws
  /// std::bad_alloc; ordo::Error{Errc::shutting_down} once the destructor
  /// has begun.
  static void watch(Engine& engine, EngineWatcher* w);
  /// Undoes watch() (a watcher destroyed before its engine): true if `w` was
  /// still registered; false once the engine's destructor has taken it (it
  /// is told, or was: the engine is gone for `w`). A watcher destroyed
  /// while its engine's destructor runs is the program's race.
  static bool unwatch(Engine& engine, EngineWatcher* w) noexcept;

  /// The id of a variable on which `awaited` waits, queued behind the
  /// access `lease` holds on it; -1 if there is none. `lease` must be held
  /// (granted, not completed) by the caller, which is how a coroutine learns
  /// that an op it would await queues behind its own lease: it would wait
  /// for ever (src/core/lease_probe.cpp).
  [[nodiscard]] static std::int64_t queued_behind(const OnComplete& lease, const PushedOp& awaited) noexcept;
};

}  // namespace ordo::detail

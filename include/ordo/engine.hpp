// ordo/engine.hpp - the dependency engine.
//
// THE ORDERING RULE. Every op declares the variables it reads and the
// variables it mutates. Two ops that touch a common variable, at least one of
// them mutating it, run in push order; everything else may run concurrently.
//
// "Push order" is well defined even with several pushing threads: a push
// appends to all of its variables' queues atomically (the variables are locked
// in one global order), so for any two conflicting ops every variable they
// share sees them in the same order.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <stop_token>
#include <type_traits>
#include <utility>

#include "ordo/context.hpp"
#include "ordo/detail/graph_capture.hpp"
#include "ordo/detail/op_record.hpp"
#include "ordo/error.hpp"
#include "ordo/fence.hpp"
#include "ordo/on_complete.hpp"
#include "ordo/options.hpp"
#include "ordo/profiler.hpp"
#include "ordo/stats.hpp"
#include "ordo/var.hpp"

namespace ordo {

namespace detail {
class EngineCore;
struct EngineExtension;
struct OperatorRecord;
class TimerService;
struct EngineWatchers;
struct ReadsTag;
struct WritesTag;
}  // namespace detail
template <class Tag>
class VarList;  // ordo::Reads / ordo::Writes, from <ordo/coro.hpp>
class LeaseAwaitable;  // from <ordo/coro.hpp>
template <class R>
class OpAwaitable;  // from <ordo/coro.hpp>
class Graph;  // from <ordo/graph.hpp>

namespace detail {
/// The function form of a coroutine push takes fn callable as R(RunContext) or R().
template <class F>
concept coro_fn = std::is_invocable_v<std::decay_t<F>&, const RunContext&> || std::is_invocable_v<std::decay_t<F>&>;
}  // namespace detail

/// A pre-built operator: body, variable lists and attributes prepared once by
/// Engine::new_operator, then pushed many times without copying either.
/// A cheap handle (two words); a handle to a deleted operator is detected.
class Operator {
 public:
  constexpr Operator() noexcept = default;
  [[nodiscard]] constexpr bool empty() const noexcept { return rec_ == nullptr; }

 private:
  friend class Engine;
  friend class detail::AutoRecorder;  // pushes an iteration's operator pushes again (ordo::AutoCapture)
  constexpr Operator(detail::OperatorRecord* r, std::uint64_t gen) noexcept : rec_(r), gen_(gen) {}
  detail::OperatorRecord* rec_ = nullptr;
  std::uint64_t gen_ = 0;
};

/// The dependency engine. See the ordering rule at the top of this header.
///
/// Op bodies are `void(RunContext)` (or `void()`) for push_sync: finished when
/// they return; `void(RunContext, OnComplete)` for push_async: finished when
/// the OnComplete is called, from any thread.
///
/// Errors. An exception thrown by an op body (or passed to OnComplete) is
/// stored. Ops whose reads or writes carry an error are skipped (unless
/// OpAttrs::always_run) and pass it on to the variables they mutate. A
/// skipped op's body is never called, only destroyed: this is guaranteed (the
/// coroutine layer relies on it to tell a skip from a run).
/// wait_for_var(v) rethrows v's error and clears it from v; wait_for_all()
/// rethrows the first error no waiter has observed yet (an op with no
/// outputs included) and clears the errors of all variables. An error never
/// observed is reported through Options::on_unobserved_error when the engine
/// is destroyed. Observed: handed to a waiter, one of these waits or a
/// layer's (an awaiting coroutine, an Asio handler); docs/guide.md, "Errors
/// and exceptions", states the rule. Misuse throws ordo::Error from the call.
///
/// Where op bodies run. Every push is asynchronous: the pooled and
/// per-device engines run op bodies on their own threads only, never inside
/// a push*, delete_variable, post or wait_for_var, nor while max_in_flight
/// holds a pusher back; an op may wait for anything its pusher does after
/// the push. wait_for_all may run queued ops on its caller, which waits for
/// all of them anyway. One exception, chosen per op: OpAttrs::inline_ok lets
/// a pusher run that op in place if it is ready when pushed. The naive
/// engine runs every op inline, in push order: that is its purpose.
///
/// Blocking waits inside an op. wait_for_var / wait_for_all called from inside
/// an op body of the same engine throw ordo::Error{Errc::wait_inside_op}
/// instead of deadlocking: push a dependent op (or, in a coroutine, co_await)
/// instead.
///
/// Shutdown. The destructor first stops the layers that serve the engine
/// from threads of their own (an ordo::io::Reactor still alive shuts down:
/// its requests are cancelled and delivered), then drains: every op already
/// pushed runs (or is skipped because of an error), including ops pushed by
/// those ops; then the workers are joined. From the drain on, a push, post or
/// delete_variable from any other thread (an io_context thread still serving
/// requests) throws ordo::Error{Errc::shutting_down} naming the op: it is
/// refused, never queued to an engine that will not run it. Async ops whose
/// completion has not come after Options::shutdown_timeout are reported and
/// abandoned (the engine's state is kept alive so a late completion is
/// harmless). The destructor never throws.
///
/// @par Thread safety
/// Every member function may be called from any thread, concurrently, except
/// the destructor. Calls made by the ops it is draining are fine; calls from
/// other threads while it runs are refused as above (one that began before
/// the destructor and is still inside the push when the drain ends is the
/// program's race: join such threads, or stop their io_context, first).
class Engine {
 public:
  explicit Engine(Options options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Creates a variable. Cheap (a pooled record).
  [[nodiscard]] Var new_variable();

  /// Schedules deletion of `var`: `fn` runs after every op already pushed on
  /// var (as an op mutating it, FnProperty::delete_var), then the variable is
  /// recycled. From this call on, pushing `var` throws Errc::deleted_var.
  template <class F>
  void delete_variable(F&& fn, Context ctx, Var var) {
    detail::OpRecord* op = detail::op_alloc();
    detail::OpGuard guard(op);
    op->fn.emplace(std::forward<F>(fn));
    if (op->fn.is_async()) {
      throw Error(Errc::invalid_argument, "delete_variable: the deleter must be a sync function");
    }
    submit_delete(guard, ctx, var);
  }
  void delete_variable(Var var);

  /// Pushes an op whose body is finished when it returns.
  template <class F>
  void push_sync(F&& fn, Context ctx, VarSpan reads, VarSpan writes, OpAttrs attrs = {}) {
    static_assert(detail::is_sync_fn_v<std::decay_t<F>>,
                  "push_sync needs a body callable as void(RunContext) or void()");
    if (detail::GraphRecorder* rec = detail::t_recorder; rec != nullptr) [[unlikely]] {
      if (rec->engine() == this) {
        capture_push(*rec, "push_sync", std::forward<F>(fn), ctx, reads, writes, attrs);
        return;
      }
    }
    using D = std::decay_t<F>;
    if constexpr (std::is_lvalue_reference_v<F> || std::is_const_v<std::remove_reference_t<F>>) {
      if constexpr (std::is_move_constructible_v<D>) {
        // The body is the caller's: run a copy, as a queued push does. Made
        // here, before anything is pushed, so that a copy that throws fails
        // the push, never the op.
        push_sync(D(fn), ctx, reads, writes, attrs);
        return;
      }
    } else if (attrs.inline_ok) {
      // The direct path (detail::DirectRun): a short op that may run on its
      // pusher and whose variables are free runs here, called in place,
      // with no op record.
      detail::DirectRun run;
      const detail::Direct d = begin_direct(run, ctx, reads, writes, attrs);
      if (d == detail::Direct::granted) {
        try {
          detail::call_sync(fn, RunContext{ctx, nullptr, -1});
        } catch (...) {
          fail_direct(run, std::current_exception());
          return;
        }
        end_direct(run);
        return;
      }
      if (d == detail::Direct::normalized) {
        detail::OpRecord* op = detail::op_alloc();
        detail::OpGuard guard(op);
        op->fn.emplace(std::forward<F>(fn));
        submit_normalized(guard, ctx, run, attrs);
        return;
      }
    }
    detail::OpRecord* op = detail::op_alloc();
    detail::OpGuard guard(op);
    op->fn.emplace(std::forward<F>(fn));
    submit(guard, ctx, reads, writes, attrs);
  }

  /// Pushes an op that is finished when the OnComplete it receives is called.
  template <class F>
  void push_async(F&& fn, Context ctx, VarSpan reads, VarSpan writes, OpAttrs attrs = {}) {
    static_assert(detail::is_async_fn_v<std::decay_t<F>>,
                  "push_async needs a body callable as void(RunContext, OnComplete)");
    if (detail::GraphRecorder* rec = detail::t_recorder; rec != nullptr) [[unlikely]] {
      if (rec->engine() == this) {
        capture_push(*rec, "push_async", std::forward<F>(fn), ctx, reads, writes, attrs);
        return;
      }
    }
    detail::OpRecord* op = detail::op_alloc();
    detail::OpGuard guard(op);
    op->fn.emplace(std::forward<F>(fn));
    submit(guard, ctx, reads, writes, attrs);
  }

  /// Prepares an operator (sync or async body, told apart by its signature).
  /// The lists are normalised once; each push then only appends to the queues.
  /// The body may run concurrently with itself if pushes do not conflict.
  template <class F>
  [[nodiscard]] Operator new_operator(F&& fn, VarSpan reads, VarSpan writes, OpAttrs attrs = {}) {
    detail::OperatorRecord* rec = alloc_operator();
    try {
      operator_fn(rec).emplace(std::forward<F>(fn));
    } catch (...) {
      free_operator(rec);
      throw;
    }
    return init_operator(rec, reads, writes, attrs);
  }

  /// Runs `fn` (`void(RunContext)` or `void()`) on a worker of `ctx`, routed
  /// by attrs.prop like an op, with no variables: nothing orders it against
  /// other work. Unlike a push it never runs on the calling thread (not even
  /// with the naive engine, whose posts run on a helper thread unless posted
  /// from inside one of its ops, where they run after that op) and never
  /// blocks the caller (max_in_flight does not hold it back), so a reactor or
  /// an executor can hand work to the engine from any thread. Counted by
  /// in_flight() and waited for by wait_for_all() and the destructor; an
  /// exception it throws is stored like that of an op with no outputs.
  template <class F>
  void post(F&& fn, Context ctx = Context::cpu(), OpAttrs attrs = {}) {
    static_assert(detail::is_sync_fn_v<std::decay_t<F>>, "post needs a body callable as void(RunContext) or void()");
    detail::refuse_in_capture(this, "post");
    detail::OpRecord* op = detail::op_alloc();
    detail::OpGuard guard(op);
    op->fn.emplace(std::forward<F>(fn));
    submit_post(guard, ctx, attrs);
  }

  /// Pushes a pre-built operator. `priority` overrides the operator's.
  void push(Operator op, Context ctx, int priority);
  void push(Operator op, Context ctx);

  /// Coroutine forms (include <ordo/coro.hpp>, which defines them; see
  /// there): the member spelling of ordo::push(engine, ...) and
  /// ordo::wait_for(engine, var). Each overload forwards to the free one
  /// with the same parameters. They are spelled out, not forwarded as a
  /// pack, so that a braced OpAttrs converts here too:
  ///   ordo::Lease lease = co_await engine.push(ordo::reads(a), ordo::writes(b));
  ///   co_await engine.push(ordo::reads(), ordo::writes(b), ordo::Context::cpu(), {.name = "fill"});
  ///   co_await engine.push(ordo::reads(), ordo::writes(b), {.name = "fill"});   // the CPU context
  ///   int n = co_await engine.push(ordo::reads(a), ordo::writes(), [&] { return f(); });
  ///   co_await engine.wait_for(v);
  [[nodiscard]] LeaseAwaitable push(const VarList<detail::ReadsTag>& reads, const VarList<detail::WritesTag>& writes,
                                    Context ctx = Context::cpu(), OpAttrs attrs = {},
                                    const std::stop_token& stop = {});
  [[nodiscard]] LeaseAwaitable push(const VarList<detail::ReadsTag>& reads, const VarList<detail::WritesTag>& writes,
                                    const std::stop_token& stop);
  [[nodiscard]] LeaseAwaitable push(const VarList<detail::ReadsTag>& reads, const VarList<detail::WritesTag>& writes,
                                    OpAttrs attrs, const std::stop_token& stop = {});
  template <detail::coro_fn F>
  [[nodiscard]] auto push(const VarList<detail::ReadsTag>& reads, const VarList<detail::WritesTag>& writes, F&& fn,
                          Context ctx = Context::cpu(), OpAttrs attrs = {}, const std::stop_token& stop = {});
  template <detail::coro_fn F>
  [[nodiscard]] auto push(const VarList<detail::ReadsTag>& reads, const VarList<detail::WritesTag>& writes, F&& fn,
                          const std::stop_token& stop);
  template <detail::coro_fn F>
  [[nodiscard]] auto push(const VarList<detail::ReadsTag>& reads, const VarList<detail::WritesTag>& writes, F&& fn,
                          OpAttrs attrs, const std::stop_token& stop = {});
  [[nodiscard]] OpAwaitable<void> wait_for(Var var, const std::stop_token& stop = {});

  /// Captured graphs (include <ordo/graph.hpp>, which defines the
  /// templates; docs/graphs.md): `fn` runs on the calling thread and the
  /// pushes it makes on this engine are recorded, not run; replay() runs
  /// the recorded sequence again, as if each push were made at that point
  /// (one push holds the graph's variables; its ops wait in the replay).
  /// `arg`: a value the bodies of that replay read with ordo::replay_arg<T>().
  template <class F>
  [[nodiscard]] Graph capture(F&& fn);
  void replay(const Graph& graph);
  template <class T>
  void replay(const Graph& graph, T&& arg);

  /// Deletes an operator: pushes already made still run, later pushes throw
  /// Errc::deleted_operator; the record is freed when the last push finishes.
  void delete_operator(Operator op);

  /// Blocks until every write pushed on `var` before this call has finished
  /// (MXNet semantics: earlier reads may still be running). Rethrows the
  /// variable's error, if any, and clears it from the variable.
  void wait_for_var(Var var);

  /// Blocks until no op is in flight. Rethrows the first error no waiter has
  /// observed yet and clears every variable's error; further unobserved
  /// errors are rethrown by the following calls, one each. With a FenceGate
  /// installed (the gpu layer), also waits for the work behind the fences
  /// (kernels enqueued by GPU ops) and, when it has no op error to rethrow,
  /// rethrows a failure of that work no consumer observed (ordo/fence.hpp).
  void wait_for_all();

  /// Number of writes (including failed and skipped ones) finished on `var`.
  [[nodiscard]] std::uint64_t var_version(Var var) const;

  /// Ops pushed and not yet finished.
  [[nodiscard]] std::size_t in_flight() const noexcept;
  /// Live counters (ordo/stats.hpp): ops pushed, completed, failed; each
  /// pool's ready ops, running and idle workers; io requests in flight per
  /// kind; the buffer pools' hit rate. Any thread, while the engine runs.
  [[nodiscard]] EngineStats stats() const;
  /// Errors stored and not yet observed by any waiter.
  [[nodiscard]] std::size_t pending_errors() const;
  [[nodiscard]] const Options& options() const noexcept;
  [[nodiscard]] EngineKind kind() const noexcept { return options().kind; }
  /// The engine's profiler (ordo/profiler.hpp): a handle whose members throw
  /// unless Options::profile.enabled was set.
  [[nodiscard]] Profiler profiler() const noexcept;

  /// Advanced (ordo/fence.hpp): installs `gate` (null removes it). The gpu
  /// layer does this; install before pushing ops that set fences, remove
  /// only once no op can be dispatched with a fenced variable.
  void set_fence_gate(FenceGate* gate) noexcept;
  /// Advanced (ordo/fence.hpp): the fence slot of `var` (stable for the
  /// variable's life). Throws like a push for an empty, foreign or deleted var.
  [[nodiscard]] FenceSlot& fence_slot(Var var) const;

  /// True while the calling thread runs an op body (of any engine).
  [[nodiscard]] static bool inside_op() noexcept;
  /// True when the calling thread is one of this engine's workers for normal
  /// ops of the CPU context `ctx`, where a post to `ctx` could run (false for
  /// GPU contexts, with the naive engine, and on a CompletionThread). Lets a
  /// layer that would post a continuation to `ctx` run it right here instead
  /// when the work it waited for has already finished (ordo::io does).
  [[nodiscard]] bool on_worker_of(Context ctx) const noexcept;

  /// Inside the destructor of a skipped op's body (a skipped body is
  /// destroyed, never called): the error that made the engine skip it. Null
  /// anywhere else. Lets a body that owns a continuation (a coroutine) hand
  /// it the original exception.
  [[nodiscard]] static std::exception_ptr skip_reason() noexcept;

 private:
  friend struct detail::EngineExtension;  // the layers' one way in: ordo/detail/extension.hpp
  /// `traits`: detail::OpTraits beyond what attrs says (a layer's, through EngineExtension).
  void submit(detail::OpGuard& op, Context ctx, VarSpan reads, VarSpan writes, const OpAttrs& attrs,
              std::uint8_t traits = 0);
  void submit_normalized(detail::OpGuard& op, Context ctx, const detail::DirectRun& run, const OpAttrs& attrs);
  /// The direct path (detail::DirectRun; defined in src/core/engine_core.cpp).
  detail::Direct begin_direct(detail::DirectRun& run, Context ctx, VarSpan reads, VarSpan writes,
                              const OpAttrs& attrs);
  /// Both push(Operator) overloads; `priority` null: the operator's own
  /// (read once the handle is known to be live).
  void push_operator(Operator handle, Context ctx, const int* priority);
  detail::Direct begin_direct(detail::DirectRun& run, Context ctx, detail::OperatorRecord* rec,
                              std::uint64_t gen);  // a pre-built operator's, with no reference taken
  void end_direct(detail::DirectRun& run) noexcept;
  void fail_direct(detail::DirectRun& run, std::exception_ptr error) noexcept;
  /// A lease granted inside the push, with no body (detail::EngineExtension::grant_now):
  /// the started op, or null where the usual push must be made; `worker`:
  /// this thread's worker index (-1: not a worker of this engine).
  detail::OpRecord* grant_lease_now(Context ctx, VarSpan reads, VarSpan writes, const OpAttrs& attrs,
                                    std::uint8_t traits, int& worker);
  void submit_delete(detail::OpGuard& op, Context ctx, Var var);
  /// A push made inside this engine's capture on this thread: recorded.
  template <class F>
  void capture_push(detail::GraphRecorder& rec, const char* call, F&& fn, Context ctx, VarSpan reads,
                    VarSpan writes, const OpAttrs& attrs) {
    rec.begin_fn().emplace(std::forward<F>(fn));
    rec.commit_fn(call, ctx, reads, writes, attrs);
  }
  void submit_post(detail::OpGuard& op, Context ctx, const OpAttrs& attrs);
  detail::OperatorRecord* alloc_operator();
  void free_operator(detail::OperatorRecord* rec) noexcept;
  static detail::OpFn& operator_fn(detail::OperatorRecord* rec) noexcept;
  Operator init_operator(detail::OperatorRecord* rec, VarSpan reads, VarSpan writes, const OpAttrs& attrs,
                         std::uint8_t traits = 0);

  /// Refuses a push from a thread that runs none of this engine's ops
  /// (the destructor has begun; closing_ is set): throws Errc::shutting_down.
  [[gnu::cold]] void refuse_if_foreign(const char* op_name) const;
  /// Every push's check of closing_ (one relaxed load, beside core_).
  void check_open(const char* op_name) const {
    if (closing_.load(std::memory_order_relaxed)) [[unlikely]] refuse_if_foreign(op_name);
  }

  std::unique_ptr<detail::EngineCore> core_;
  /// False until the destructor begins its drain; then true for good.
  /// Written by the destructor (seq_cst), read relaxed by every push: a
  /// push that reads false before the store is counted in flight before
  /// it returns and so drained (the window is the push's own few
  /// instructions, see the class comment).
  std::atomic<bool> closing_{false};
  /// Layers told at the start of the destructor (EngineExtension::watch):
  /// made by the constructor, guarded by its own mutex.
  std::unique_ptr<detail::EngineWatchers> watchers_;
  /// The engine's timers (detail::EngineExtension::timers), made by the first
  /// use (a CAS from null); destroyed first by the destructor, which fires
  /// what is still armed before the engine drains.
  std::atomic<detail::TimerService*> timers_{nullptr};
};

/// Marks the calling thread, for the scope's lifetime, as a completion
/// thread: a reactor's reaper or an event watcher that completes ops
/// (OnComplete) and posts work but must never run user code itself. Work such
/// a thread makes ready always goes to an engine's workers, with every engine
/// kind: a skipped op (whose destruction may resume a coroutine) and, with the
/// naive engine, every dependant (run on the naive engine's helper thread).
/// Other threads that are not workers get the same treatment from the pooled
/// and per-device engines; the naive engine runs dependants on them inline.
/// One exception: ops that run no user code (ordo::io's push_read/push_write
/// launchers, whose bodies only submit a request) start on a completion
/// thread where they become ready (pooled, per-device engines).
///
/// @par Thread safety
/// Affects the calling thread only; scopes nest.
class CompletionThread {
 public:
  CompletionThread() noexcept;
  ~CompletionThread();
  CompletionThread(const CompletionThread&) = delete;
  CompletionThread& operator=(const CompletionThread&) = delete;
  /// True inside a CompletionThread scope on the calling thread.
  [[nodiscard]] static bool active() noexcept;

 private:
  bool outer_;
};

}  // namespace ordo

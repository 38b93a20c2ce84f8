// ordo/coro.hpp - engine ops from coroutines: co_await a push.
//
//   ordo::Lease lease = co_await ordo::push(engine, ordo::reads(a), ordo::writes(b));
//   out = f(in);  // access form: the op runs until the lease is released or destroyed
//   int n = co_await ordo::push(engine, ordo::reads(a), ordo::writes(), [&] { return count(in); });
//   co_await ordo::wait_for(engine, v);  // the writes pushed on v so far, no thread blocked
//
// Also spelled engine.push(...) / engine.wait_for(v). Built on push_async +
// OnComplete, and on detail::EngineExtension for a lease granted inside its
// push. A push registers its op when called, not when awaited. Join every
// coroutine before the engine is destroyed (an AsyncScope declared after it);
// never await, while holding a lease, an op that conflicts with it. The
// contract (errors, cancellation, where coroutines resume): docs/coroutines.md.
#pragma once

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <stop_token>
#include <string>
#include <type_traits>
#include <utility>

#include "ordo/detail/coro_ops.hpp"
#include "ordo/detail/coro_runtime.hpp"
#include "ordo/detail/coro_varlist.hpp"
#include "ordo/detail/extension.hpp"
#include "ordo/engine.hpp"
#include "ordo/task.hpp"

namespace ordo {

/// Thrown into a coroutine whose co_await'ed op was dropped without a known
/// reason (the engine abandoned it at shutdown). A push skipped because of an
/// error throws that original exception instead. code() is Errc::cancelled.
///
/// @par Thread safety
/// An immutable exception object.
class SkippedError : public Error {
 public:
  explicit SkippedError(const std::string& what) : Error(Errc::cancelled, what) {}
};

/// Thrown into a coroutine whose co_await'ed push was cancelled through its
/// std::stop_token before the op was granted. code() is Errc::cancelled;
/// what() names the op if it has a name (OpAttrs::name). The op itself still
/// completes in push order, as a no-op (see ordo::push).
///
/// @par Thread safety
/// An immutable exception object.
class CancelledError : public Error {
 public:
  explicit CancelledError(const std::string& what) : Error(Errc::cancelled, what) {}
};

/// Where a coroutine continues after `co_await push(...).resume_on(ex)`: any
/// object with `ex.post(task)`, where task is a copyable `void()` callable
/// (it converts to std::function<void()> or to a move-only function). post
/// must run the task exactly once, on a thread of its choosing, and must not
/// block waiting for the engine; it may throw (the coroutine is then resumed
/// inline instead). A task that is destroyed without being run leaks its
/// coroutine (it never resumes).
template <class E>
concept Executor = requires(E& ex, detail::ResumeTask task) { ex.post(task); };

namespace detail {
inline void OpState::cancel() noexcept {
  if (!cancellable || settled.exchange(true, std::memory_order_acq_rel)) return;  // the grant (or skip) won
  try {
    error = std::make_exception_ptr(CancelledError(
        std::string("ordo: ") + (name != nullptr ? std::string("op '") + name + "'" : std::string("an op")) +
        " awaited by a coroutine was cancelled before it was granted (its stop_token was stopped)"));
  } catch (...) {
    error = std::current_exception();
  }
  publish();
}

inline void OpState::skipped() noexcept {
  if (!claim()) return;  // cancelled first: the coroutine already has its outcome
  // The engine names the error that skipped the op: the awaiter gets the
  // original exception. SkippedError remains for a body destroyed without a
  // reason (the engine abandoned at shutdown).
  error_ref = ErrorRef::skipping();
  error = error_ref.exception();
  if (error) {
    publish();
    return;
  }
  try {
    error = std::make_exception_ptr(SkippedError(
        std::string("ordo: ") + (name != nullptr ? std::string("op '") + name + "'" : std::string("an op")) +
        " awaited by a coroutine was skipped: one of its variables carries an error (the original exception "
        "stays on the variables: Engine::wait_for_var / wait_for_all rethrow it)"));
  } catch (...) {
    error = std::current_exception();
  }
  publish();
}
}  // namespace detail

class LeaseAwaitable;

namespace detail {
/// The id of a variable on which the op of `st` queues behind a lease that
/// the task `p` holds (it would wait for ever), or -1. Costs one test of an
/// empty vector where the task holds no lease.
inline std::int64_t blocked_by_own_lease(const PromiseBase& p, const OpState* st, bool consumed) noexcept {
  if (p.leases().empty() || st == nullptr || consumed || st->pushed.op == nullptr ||
      st->word.load(std::memory_order_acquire) == kOpReady) {
    return -1;
  }
  for (const OnComplete& lease : p.leases()) {
    if (const std::int64_t var = EngineExtension::queued_behind(lease, st->pushed); var >= 0) return var;
  }
  return -1;
}
}  // namespace detail

/// The granted accesses of an op pushed by the access form of ordo::push.
/// While a Lease is held, the op is running: conflicting ops wait. The op
/// completes (accesses released, dependants dispatched) by exactly one of:
///  - release(): success;
///  - fail(e): the engine stores e on the variables the op mutates;
///  - the destructor: success normally; during exception unwinding, failure
///    with that exception (inside an ordo::Task, the lease is parked and
///    failed by the task's unhandled_exception(), where the exception is
///    known; if the task catches it, or outside a Task, or for a lease moved
///    after co_await, with an ordo::Error{Errc::cancelled} instead).
/// Move-only. A lease must not outlive the coroutine that awaited it without
/// being moved (a moved lease no longer refers to that coroutine).
///
/// @par Thread safety
/// Not thread-safe: one owner at a time (moving it to another thread is
/// fine). Completing it is thread-safe with respect to the engine.
class Lease {
 public:
  Lease() noexcept = default;
  Lease(Lease&& o) noexcept
      : done_(o.done_), rc_(o.rc_), uncaught_(o.uncaught_), held_(std::exchange(o.held_, false)) {
    if (held_) o.forget();
  }
  Lease& operator=(Lease&& o) noexcept {
    if (this != &o) {
      finish_in_destructor();
      if (o.held_) o.forget();
      done_ = o.done_;
      rc_ = o.rc_;
      owner_ = nullptr;  // moved: the owning coroutine is not known any more
      uncaught_ = o.uncaught_;
      held_ = std::exchange(o.held_, false);
    }
    return *this;
  }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease() { finish_in_destructor(); }

  /// Completes the op successfully. Throws ordo::Error if not held.
  void release() {
    check_held("release");
    held_ = false;
    forget();
    done_();
  }
  /// Completes the op with `error` (stored on the variables it mutates).
  void fail(std::exception_ptr error) {
    check_held("fail");
    held_ = false;
    forget();
    done_(std::move(error));
  }
  [[nodiscard]] bool held() const noexcept { return held_; }
  explicit operator bool() const noexcept { return held_; }
  /// What the worker that granted the op handed it (context, worker index).
  [[nodiscard]] const RunContext& run_context() const noexcept { return rc_; }

 private:
  friend class LeaseAwaitable;
  Lease(OnComplete done, const RunContext& rc, detail::PromiseBase* owner) noexcept
      : done_(done), rc_(rc), owner_(owner), uncaught_(std::uncaught_exceptions()), held_(true) {
    if (owner_ != nullptr) owner_->lease_held(done_);
  }
  /// No longer held by (or no longer known to) the owning task.
  void forget() noexcept {
    if (owner_ != nullptr) owner_->lease_ended(done_);
    owner_ = nullptr;
  }

  void check_held(const char* what) const {
    if (!held_) throw Error(Errc::invalid_argument, std::string("Lease::") + what + " on a lease not held");
  }
  void finish_in_destructor() noexcept {
    if (!held_) return;
    held_ = false;
    detail::PromiseBase* owner = owner_;
    forget();
    try {
      if (std::uncaught_exceptions() <= uncaught_) {
        done_();
      } else if (owner != nullptr) {
        owner->park(done_);
      } else {
        done_(std::make_exception_ptr(
            Error(Errc::cancelled, "lease destroyed during exception unwinding outside an ordo::Task")));
      }
    } catch (...) {  // a destructor never throws
    }
  }

  OnComplete done_{};
  RunContext rc_{};
  detail::PromiseBase* owner_ = nullptr;
  int uncaught_ = 0;
  bool held_ = false;
};

/// Returned by the access form of ordo::push: `co_await` yields the Lease.
/// Destroyed without being awaited, it releases the op (now if already
/// granted, else as soon as it is).
///
/// @par Thread safety
/// Not thread-safe: one coroutine owns and awaits it. The op body that grants
/// it runs on a worker concurrently; that race is settled by one atomic word.
class [[nodiscard]] LeaseAwaitable : public detail::OpAwaitBase {
 public:
  LeaseAwaitable(LeaseAwaitable&& o) noexcept
      : OpAwaitBase(std::move(o)),
        owner_(o.owner_),
        now_(std::exchange(o.now_, false)),
        now_done_(o.now_done_),
        now_rc_(o.now_rc_),
        now_post_(o.now_post_),
        now_executor_(o.now_executor_) {}
  ~LeaseAwaitable() {
    if (now_) {
      if (!consumed_) {
        try {
          now_done_();  // granted at push, never awaited: release now
        } catch (...) {
        }
      }
      return;
    }
    if (abandon() && !st_->error) {
      try {
        st_->done();  // granted, never awaited: release now
      } catch (...) {
      }
    }
    drop();
  }
  /// `co_await aw` (lvalue or rvalue): the awaiter refers to this object.
  struct Awaiter {
    LeaseAwaitable* self;
    bool await_ready() const noexcept {
      if (self->now_) return self->consumed_ || self->now_post_ == nullptr;
      return self->ready();
    }
    bool await_suspend(std::coroutine_handle<> h) const noexcept {
      if (self->now_) {  // granted at push, resume_on: continue on the executor
        self->now_post_(self->now_executor_, h);
        return true;
      }
      return self->suspend(h);
    }
    Lease await_resume() const {
      if (self->now_) {
        if (self->consumed_) throw Error(Errc::invalid_argument, "an ordo::push awaitable was awaited twice");
        self->consumed_ = true;
        return Lease(self->now_done_, self->now_rc_, self->owner_);
      }
      detail::OpState& s = self->consume();
      return Lease(s.done, s.rc, self->owner_);
    }
  };
  Awaiter operator co_await() & noexcept { return Awaiter{this}; }
  Awaiter operator co_await() && noexcept { return Awaiter{this}; }
  /// `co_await push(...).resume_on(ex)`: the coroutine continues on `ex`
  /// (see Executor) instead of the worker that granted the op, even if the
  /// op was granted before the co_await. Call before awaiting; `ex` must
  /// outlive the await.
  template <Executor E>
  LeaseAwaitable& resume_on(E& ex) & {
    bind_executor(ex);
    return *this;
  }
  template <Executor E>
  LeaseAwaitable&& resume_on(E& ex) && {
    bind_executor(ex);
    return std::move(*this);
  }
  /// Called by the awaiting Task's await_transform: the lease will be the
  /// task's; an op that queues behind another lease of it fails the await.
  void ordo_bind_owner(detail::PromiseBase* p) noexcept {
    owner_ = p;
    if (!now_) blocked_on_ = detail::blocked_by_own_lease(*p, st_, consumed_);
  }

  /// Internal: made by ordo::push; takes over one reference to `st`.
  explicit LeaseAwaitable(detail::OpState* st) noexcept : OpAwaitBase(st) {}
  /// Internal: a lease granted inside the push (detail::EngineExtension::grant_now),
  /// with no shared state: `done` releases it.
  LeaseAwaitable(OnComplete done, const RunContext& rc) noexcept
      : OpAwaitBase(nullptr), now_(true), now_done_(done), now_rc_(rc) {}

 private:
  template <class E>
  void bind_executor(E& ex) {
    if (!now_) {
      set_executor(ex);
      return;
    }
    if (consumed_) throw Error(Errc::invalid_argument, "resume_on on a moved-from or awaited ordo::push awaitable");
    now_executor_ = static_cast<void*>(std::addressof(ex));
    now_post_ = &detail::post_resume<E>;
  }

  detail::PromiseBase* owner_ = nullptr;
  // Granted at push (now_): the op's completion and what its grant handed
  // it; where resume_on sends the coroutine.
  bool now_ = false;
  OnComplete now_done_{};
  RunContext now_rc_{};
  void (*now_post_)(void*, std::coroutine_handle<>) noexcept = nullptr;
  void* now_executor_ = nullptr;
};

/// Returned by the function form of ordo::push (and by wait_for): `co_await`
/// yields fn's result (moved out) or rethrows its exception.
///
/// @par Thread safety
/// As LeaseAwaitable.
template <class R>
class [[nodiscard]] OpAwaitable : public detail::OpAwaitBase {
 public:
  OpAwaitable(OpAwaitable&&) noexcept = default;
  ~OpAwaitable() {
    (void)abandon();  // the op completes by itself; the result is dropped with the state
    drop();
  }
  /// `co_await aw` (lvalue or rvalue): the awaiter refers to this object.
  struct Awaiter {
    OpAwaitable* self;
    bool await_ready() const noexcept { return self->ready(); }
    bool await_suspend(std::coroutine_handle<> h) const noexcept { return self->suspend(h); }
    R await_resume() const {
      detail::OpState& s = self->consume();
      if constexpr (!std::is_void_v<R>) return std::move(*static_cast<detail::ResultState<R>&>(s).result);
    }
  };
  Awaiter operator co_await() & noexcept { return Awaiter{this}; }
  Awaiter operator co_await() && noexcept { return Awaiter{this}; }
  /// As LeaseAwaitable::resume_on: the coroutine continues on `ex`.
  template <Executor E>
  OpAwaitable& resume_on(E& ex) & {
    set_executor(ex);
    return *this;
  }
  template <Executor E>
  OpAwaitable&& resume_on(E& ex) && {
    set_executor(ex);
    return std::move(*this);
  }

  /// Called by the awaiting Task's await_transform: an op that queues
  /// behind a lease the task holds fails the await (Errc::deadlock).
  void ordo_bind_owner(detail::PromiseBase* p) noexcept {
    blocked_on_ = detail::blocked_by_own_lease(*p, st_, consumed_);
  }

  /// Internal: made by ordo::push; takes over one reference to `st`.
  explicit OpAwaitable(detail::ResultState<R>* st) noexcept : OpAwaitBase(st) {}
};

/// Access form: pushes an op reading `r` and mutating `w` now; `co_await`
/// resumes the coroutine on the worker that granted it (routed by ctx and
/// attrs.prop like any op; the coroutine runs inside that op's body) with a
/// Lease; the op runs until the lease is released. If the op was granted
/// before the co_await, the coroutine does not suspend and goes on where it
/// is. Throws ordo::Error at once for misuse (deleted variable, ...).
/// Holding a lease while awaiting an op that conflicts with it deadlocks.
///
/// `stop`: see docs/coroutines.md, "Cancellation". A stop requested before
/// the grant throws CancelledError from the co_await (at once: the waiting
/// coroutine is resumed by the stop request); after the grant it has no effect.
[[nodiscard]] inline LeaseAwaitable push(Engine& engine, const Reads& r, const Writes& w, Context ctx = Context::cpu(),
                                         OpAttrs attrs = {}, const std::stop_token& stop = {}) {
  // A lease whose variables are free is granted inside the push, without a
  // body or shared state: the coroutine goes on where it is, and runs no
  // other op (docs/coroutines.md, "Granted at push"). The stop token cannot
  // matter then: it only acts before the grant.
  // A lease's body only publishes the grant: its pusher may run it (a
  // normal CPU lease; others go to their workers). Where the engine would
  // run it at once and its variables are free, grant_now grants it with no
  // body at all.
  const std::uint8_t traits =
      attrs.prop == FnProperty::normal && !ctx.is_gpu() ? detail::kRunsOnPusher : detail::kNoTraits;
  int worker = -1;
  if (detail::OpRecord* op = detail::EngineExtension::grant_now(engine, ctx, r, w, attrs, traits, worker);
      op != nullptr) {
    return LeaseAwaitable(op->completion(), RunContext{ctx, nullptr, worker});
  }
  detail::StateRef mine(detail::make_state<detail::OpState>());
  mine.get()->name = attrs.name;
  mine.get()->cancellable = stop.stop_possible();
  detail::EngineExtension::push(engine, detail::LeaseBody(mine.get()), ctx, r, w, attrs, traits,
                                &mine.get()->pushed);
  mine.get()->arm(stop);
  return LeaseAwaitable(mine.release());
}
/// Access form with a stop token and the default context and attributes.
[[nodiscard]] inline LeaseAwaitable push(Engine& engine, const Reads& r, const Writes& w,
                                         const std::stop_token& stop) {
  return push(engine, r, w, Context::cpu(), OpAttrs{}, stop);
}
/// Access form with attributes and the CPU context: `push(engine, r, w, {.name = "fill"})`.
[[nodiscard]] inline LeaseAwaitable push(Engine& engine, const Reads& r, const Writes& w, OpAttrs attrs,
                                         const std::stop_token& stop = {}) {
  return push(engine, r, w, Context::cpu(), attrs, stop);
}

namespace detail {
/// What fn returns, called as FnBody::call calls it. Named through
/// invoke_result, not call's deduced return type, so that a non-callable F
/// (a stop_token meeting the function form's overloads) is a substitution
/// failure for every compiler, whether or not it checks coro_fn first.
template <class F>
using fn_result_t = std::remove_cvref_t<typename std::conditional_t<std::is_invocable_v<F&, const RunContext&>,
                                                                    std::invoke_result<F&, const RunContext&>,
                                                                    std::invoke_result<F&>>::type>;
}  // namespace detail

/// Function form: pushes `fn` (callable as R(RunContext) or R()) as an op now,
/// with push_sync semantics (runs on a worker; an exception fails the op and
/// is stored on `w`); `co_await` yields fn's result or rethrows its exception.
/// The op is complete (its variables released) before the coroutine resumes,
/// on the worker that ran fn. fn is stored in a recycled shared state, not in
/// the op record, so captures of any size cost no extra allocation.
template <detail::coro_fn F>
[[nodiscard]] OpAwaitable<detail::fn_result_t<std::decay_t<F>>> push(Engine& engine, const Reads& r, const Writes& w,
                                                                     F&& fn, Context ctx = Context::cpu(),
                                                                     OpAttrs attrs = {},
                                                                     const std::stop_token& stop = {}) {
  detail::refuse_in_capture(&engine, "a coroutine push (ordo::push, co_await engine.push or ordo::wait_for)");
  using D = std::decay_t<F>;
  using R = detail::fn_result_t<D>;
  auto* st = detail::make_state<detail::FnState<D, R>>(std::forward<F>(fn));
  detail::StateRef mine(st);
  st->name = attrs.name;
  st->cancellable = stop.stop_possible();
  detail::EngineExtension::push(engine, detail::FnBody<D, R>(st), ctx, r, w, attrs, detail::kNoTraits, &st->pushed);
  st->arm(stop);
  mine.release();
  return OpAwaitable<R>(st);
}
/// Function form with a stop token and the default context and attributes.
template <detail::coro_fn F>
[[nodiscard]] OpAwaitable<detail::fn_result_t<std::decay_t<F>>> push(Engine& engine, const Reads& r, const Writes& w,
                                                                     F&& fn, const std::stop_token& stop) {
  return push(engine, r, w, std::forward<F>(fn), Context::cpu(), OpAttrs{}, stop);
}
/// Function form with attributes and the CPU context: `push(engine, r, w, fn, {.name = "sum"})`.
template <detail::coro_fn F>
[[nodiscard]] OpAwaitable<detail::fn_result_t<std::decay_t<F>>> push(Engine& engine, const Reads& r, const Writes& w,
                                                                     F&& fn, OpAttrs attrs,
                                                                     const std::stop_token& stop = {}) {
  return push(engine, r, w, std::forward<F>(fn), Context::cpu(), attrs, stop);
}

/// The non-blocking counterpart of Engine::wait_for_var: resumes once every
/// write pushed on `var` before this call has finished (pushed now: an async
/// read of var whose body completes at once; it runs inline where it becomes
/// ready). If var carries an error, throws that original exception (unlike
/// Engine::wait_for_var it does not clear it from var).
/// With `stop`: a stop requested before the writes finished throws
/// CancelledError at once (the read op still completes in order, as a no-op).
[[nodiscard]] inline OpAwaitable<void> wait_for(Engine& engine, Var var, const std::stop_token& stop = {}) {
  return push(engine, reads(var), writes(), [] {}, Context::cpu(),
              OpAttrs{.prop = FnProperty::async, .name = "wait_for", .inline_ok = true}, stop);
}

// The member spelling (declared in engine.hpp, with the same parameters):
// each overload forwards to its free function, the one implementation.
inline LeaseAwaitable Engine::push(const Reads& r, const Writes& w, Context ctx, OpAttrs attrs,
                                   const std::stop_token& stop) {
  return ordo::push(*this, r, w, ctx, attrs, stop);
}
inline LeaseAwaitable Engine::push(const Reads& r, const Writes& w, const std::stop_token& stop) {
  return ordo::push(*this, r, w, stop);
}
inline LeaseAwaitable Engine::push(const Reads& r, const Writes& w, OpAttrs attrs, const std::stop_token& stop) {
  return ordo::push(*this, r, w, attrs, stop);
}
template <detail::coro_fn F>
auto Engine::push(const Reads& r, const Writes& w, F&& fn, Context ctx, OpAttrs attrs, const std::stop_token& stop) {
  return ordo::push(*this, r, w, std::forward<F>(fn), ctx, attrs, stop);
}
template <detail::coro_fn F>
auto Engine::push(const Reads& r, const Writes& w, F&& fn, const std::stop_token& stop) {
  return ordo::push(*this, r, w, std::forward<F>(fn), stop);
}
template <detail::coro_fn F>
auto Engine::push(const Reads& r, const Writes& w, F&& fn, OpAttrs attrs, const std::stop_token& stop) {
  return ordo::push(*this, r, w, std::forward<F>(fn), attrs, stop);
}
inline OpAwaitable<void> Engine::wait_for(Var var, const std::stop_token& stop) {
  return ordo::wait_for(*this, var, stop);
}

}  // namespace ordo

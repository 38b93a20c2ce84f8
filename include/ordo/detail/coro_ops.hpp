// ordo/detail/coro_ops.hpp - the shared state behind ordo::push awaitables
// and the bodies of the ops they push. Internal (see ordo/coro.hpp).
#pragma once

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <stop_token>
#include <string>
#include <type_traits>
#include <utility>

#include "ordo/context.hpp"
#include "ordo/detail/coro_runtime.hpp"
#include "ordo/detail/error_ref.hpp"
#include "ordo/detail/op_record.hpp"
#include "ordo/error.hpp"
#include "ordo/on_complete.hpp"

namespace ordo {
namespace detail {

inline constexpr std::uintptr_t kOpPending = 0;    ///< nobody finished, nobody waits
inline constexpr std::uintptr_t kOpReady = 1;      ///< outcome published
inline constexpr std::uintptr_t kOpAbandoned = 2;  ///< the awaitable is gone
// Any other value: the address of the coroutine waiting for the outcome.

struct OpState;

/// The std::stop_callback of a cancellable push: cancels the op's awaitable.
struct CancelFn {
  OpState* s;
  void operator()() const noexcept;
};

/// What an executor's post() receives: resumes one coroutine (through the
/// trampoline of the thread that runs it). Copyable, so it converts to
/// std::function<void()> as well as to move-only callables.
struct ResumeTask {
  std::coroutine_handle<> h;
  void operator()() const { resume(h); }
};

/// Posts `h` to the executor at `ex` (type-erased); resumes it inline if
/// post() throws (rather than losing the coroutine).
template <class E>
void post_resume(void* ex, std::coroutine_handle<> h) noexcept {
  try {
    static_cast<E*>(ex)->post(ResumeTask{h});
  } catch (...) {
    resume(h);
  }
}

/// State shared by an awaitable and the body of its op (one allocation from
/// the frame allocator). The outcome fields are written before `word` is
/// set to kOpReady (release) and read after it is seen (acquire).
///
/// Cancellation (a push given a std::stop_token that can be stopped): the op
/// body (grant or skip) and the stop callback race for `settled`; exactly one
/// wins and publishes the outcome. A body that loses completes its op at once
/// (a no-op success) without touching the outcome.
struct OpState {
  std::atomic<std::uintptr_t> word{kOpPending};
  std::atomic<int> refs{2};  ///< the awaitable (or the pushing factory) + the op body
  void (*destroy)(OpState*) noexcept = nullptr;
  const char* name = nullptr;
  std::exception_ptr error;  ///< outcome: fn's exception, SkippedError or CancelledError
  /// With `error`, when the engine stored it (fn's exception, a skip's
  /// reason): observed when the coroutine gets it (consume).
  ErrorRef error_ref;
  RunContext rc{};
  OnComplete done{};  ///< access form: completes the op
  /// The op as pushed (set by the push, before the awaitable exists): what
  /// a co_await looks for behind the leases its coroutine holds.
  PushedOp pushed{};
  bool cancellable = false;  ///< set before the push; read by the body
  std::atomic<bool> settled{false};  ///< cancellable only: the outcome's winner is decided
  /// resume_on: how to hand the waiting coroutine to an executor (null: resume inline).
  /// Set by the awaitable's owner before it suspends; read only by whoever
  /// resumes a suspended waiter (ordered by `word`).
  void (*post)(void*, std::coroutine_handle<>) noexcept = nullptr;
  void* executor = nullptr;
  /// The registered stop callback; owned (reset) by the awaitable side.
  std::optional<std::stop_callback<CancelFn>> on_stop;

  void unref() noexcept {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) destroy(this);
  }
  /// True if the caller decides the outcome (always, when not cancellable).
  bool claim() noexcept { return !cancellable || !settled.exchange(true, std::memory_order_acq_rel); }
  /// Resumes a coroutine that suspended on this op: inline (through the
  /// trampoline) or on the executor given by resume_on.
  void resume_waiter(std::coroutine_handle<> h) noexcept {
    if (post != nullptr) {
      post(executor, h);
    } else {
      resume(h);
    }
  }
  /// Publishes the outcome and resumes the waiting coroutine, if any.
  /// Returns false if the awaitable was abandoned.
  bool publish() noexcept {
    const std::uintptr_t prev = word.exchange(kOpReady, std::memory_order_acq_rel);
    if (prev == kOpAbandoned) return false;
    if (prev != kOpPending) resume_waiter(std::coroutine_handle<>::from_address(reinterpret_cast<void*>(prev)));
    return true;
  }
  /// The op completed without running its body: the engine skipped it
  /// (defined in ordo/coro.hpp, with SkippedError).
  void skipped() noexcept;
  /// A stop was requested: wins the outcome (if the body has not) with a
  /// CancelledError and resumes the waiter (defined in ordo/coro.hpp).
  void cancel() noexcept;
  /// Registers the stop callback (after the push: a token already stopped
  /// cancels at once).
  void arm(const std::stop_token& token) noexcept {
    if (cancellable) on_stop.emplace(token, CancelFn{this});
  }
};

inline void CancelFn::operator()() const noexcept { s->cancel(); }

template <class S, class... A>
S* make_state(A&&... args) {
  void* p = frame_alloc(sizeof(S));
  try {
    S* s = ::new (p) S(std::forward<A>(args)...);
    s->destroy = [](OpState* b) noexcept {
      static_cast<S*>(b)->~S();
      frame_free(b, sizeof(S));
    };
    return s;
  } catch (...) {
    frame_free(p, sizeof(S));
    throw;
  }
}

/// Owns one reference to an OpState.
class StateRef {
 public:
  explicit StateRef(OpState* s) noexcept : s_(s) {}
  StateRef(StateRef&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  StateRef& operator=(StateRef&&) = delete;
  ~StateRef() {
    if (s_ != nullptr) s_->unref();
  }
  OpState* get() const noexcept { return s_; }
  OpState* release() noexcept { return std::exchange(s_, nullptr); }

 private:
  OpState* s_;
};

/// Body of an access-form op: publishes the grant, or releases at once if
/// the awaitable is gone. Destroyed without having run: the op was skipped.
struct LeaseBody {
  StateRef st;
  void operator()(const RunContext& rc, OnComplete done) noexcept {
    StateRef s(st.release());
    if (!s.get()->claim()) {  // cancelled before the grant: complete the op now, untouched
      try {
        done();
      } catch (...) {
      }
      return;
    }
    s.get()->rc = rc;
    s.get()->done = done;
    if (!s.get()->publish()) {
      try {
        done();
      } catch (...) {
      }
    }
  }
  LeaseBody(LeaseBody&&) noexcept = default;
  explicit LeaseBody(OpState* s) noexcept : st(s) {}
  ~LeaseBody() {
    if (st.get() != nullptr) st.get()->skipped();
  }
};

template <class R>
using fn_storage_t = std::conditional_t<std::is_void_v<R>, std::optional<bool>, std::optional<R>>;

/// The part of a function-form state the awaitable reads (fn's type erased).
template <class R>
struct ResultState : OpState {
  fn_storage_t<R> result;
};

template <class F, class R>
struct FnState : ResultState<R> {
  template <class G>
  explicit FnState(G&& g) : fn(std::forward<G>(g)) {}
  F fn;
};

/// Body of a function-form op: runs fn, completes the op, then resumes the
/// awaiting coroutine (on this worker) with the result.
template <class F, class R>
struct FnBody {
  StateRef st;
  void operator()(const RunContext& rc, OnComplete done) noexcept {
    StateRef s(st.release());
    auto* fs = static_cast<FnState<F, R>*>(s.get());
    if (!fs->claim()) {  // cancelled before the grant: complete the op without running fn
      try {
        done();
      } catch (...) {
      }
      return;
    }
    fs->rc = rc;
    try {
      if constexpr (std::is_void_v<R>) {
        call(fs->fn, rc);
        fs->result.emplace(true);
      } else {
        fs->result.emplace(call(fs->fn, rc));
      }
    } catch (...) {
      fs->error = std::current_exception();
    }
    try {
      if (fs->error) {
        fs->error_ref = ErrorRef::fail(done, fs->error);
      } else {
        done();
      }
    } catch (...) {
    }
    fs->publish();
  }
  FnBody(FnBody&&) noexcept = default;
  explicit FnBody(OpState* s) noexcept : st(s) {}
  ~FnBody() {
    if (st.get() != nullptr) st.get()->skipped();
  }
  static decltype(auto) call(F& f, const RunContext& rc) {
    if constexpr (std::is_invocable_v<F&, const RunContext&>) {
      return std::invoke(f, rc);
    } else {
      return std::invoke(f);
    }
  }
};

/// The await protocol both awaitables share. One atomic word settles the
/// race between the grant (op body, any thread) and the co_await.
class OpAwaitBase {
 public:
  OpAwaitBase(OpAwaitBase&& o) noexcept
      : st_(std::exchange(o.st_, nullptr)), consumed_(o.consumed_), blocked_on_(o.blocked_on_) {}
  OpAwaitBase& operator=(OpAwaitBase&&) = delete;

 protected:
  explicit OpAwaitBase(OpState* st) noexcept : st_(st) {}
  ~OpAwaitBase() = default;

  bool ready() const noexcept {
    if (st_ == nullptr || consumed_ || blocked_on_ >= 0) return true;
    // resume_on: always suspend, so that the coroutine continues on the executor.
    return st_->post == nullptr && st_->word.load(std::memory_order_acquire) == kOpReady;
  }
  bool suspend(std::coroutine_handle<> h) noexcept {
    std::uintptr_t expected = kOpPending;
    if (st_->word.compare_exchange_strong(expected, reinterpret_cast<std::uintptr_t>(h.address()),
                                          std::memory_order_acq_rel, std::memory_order_acquire)) {
      return true;
    }
    // The outcome was published meanwhile: go on here, or hop to the executor.
    if (st_->post == nullptr) return false;
    st_->post(st_->executor, h);
    return true;
  }
  /// resume_on: where the awaiting coroutine continues.
  template <class E>
  void set_executor(E& ex) {
    if (st_ == nullptr || consumed_) throw Error(Errc::invalid_argument, "resume_on on a moved-from or awaited ordo::push awaitable");
    st_->executor = static_cast<void*>(std::addressof(ex));
    st_->post = &post_resume<E>;
  }
  /// Marks the outcome consumed; throws for misuse or the op's error.
  OpState& consume() {
    if (st_ == nullptr) throw Error(Errc::invalid_argument, "co_await on a moved-from ordo::push awaitable");
    if (consumed_) throw Error(Errc::invalid_argument, "an ordo::push awaitable was awaited twice");
    if (blocked_on_ >= 0) throw_blocked();  // not consumed: the op, once granted, completes by itself
    consumed_ = true;
    st_->on_stop.reset();  // the outcome is known: a later stop has no effect
    if (st_->error) {
      st_->error_ref.observe();  // handed to the coroutine: the engine's waits pass over it
      std::rethrow_exception(st_->error);
    }
    return *st_;
  }
  /// Drops the awaitable; returns true if the outcome is ready and unconsumed
  /// (then the caller owns what the outcome holds).
  bool abandon() noexcept {
    if (st_ == nullptr) return false;
    st_->on_stop.reset();  // waits for a stop callback running on another thread (it does not block)
    bool ready_unconsumed = false;
    if (!consumed_) {
      ready_unconsumed = st_->word.exchange(kOpAbandoned, std::memory_order_acq_rel) == kOpReady;
    }
    return ready_unconsumed;
  }
  void drop() noexcept {
    if (st_ != nullptr) std::exchange(st_, nullptr)->unref();
  }

  [[noreturn]] void throw_blocked() const {
    throw Error(Errc::deadlock,
                "co_await of " + (st_->name != nullptr ? std::string("op '") + st_->name + "'" : std::string("an op")) +
                    " would wait for ever: it queues on var " + std::to_string(blocked_on_) +
                    " behind a lease this coroutine holds; release the lease before awaiting an op that conflicts "
                    "with it (the op stays pushed and runs once the lease is released)");
  }

  OpState* st_;
  bool consumed_ = false;
  /// Set where the awaiting ordo::Task binds itself (ordo_bind_owner): the
  /// id of a variable on which the op queues behind a lease that task
  /// holds, so the await fails (Errc::deadlock) instead of waiting for
  /// ever; -1 if none.
  std::int64_t blocked_on_ = -1;
};

}  // namespace detail

}  // namespace ordo

// ordo/task.hpp - coroutine tasks: Task<T>, sync_wait, when_all, AsyncScope.
//
// A Task<T> is a lazy coroutine: calling a `Task<T> f()` creates it
// suspended; it starts when awaited (`co_await f()`), by sync_wait, when_all
// or AsyncScope::spawn. Its result (or exception) goes to its awaiter.
//
//   ordo::Task<int> answer() { co_return 42; }
//   ordo::Task<int> twice() { co_return 2 * co_await answer(); }
//   int x = ordo::sync_wait(twice());  // 84
//
// Where coroutines run, stack depth and the rules: class Task below;
// docs/coroutines.md, "Task, sync_wait, when_all".
#pragma once

#include <condition_variable>
#include <coroutine>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "ordo/detail/coro_runtime.hpp"
#include "ordo/detail/error_ref.hpp"
#include "ordo/error.hpp"
#include "ordo/on_complete.hpp"

namespace ordo {

template <class T = void>
class Task;

namespace detail {

/// An awaiter that is its own awaitable (no operator co_await).
template <class A>
concept plain_awaiter = requires(A& a) { a.await_ready(); } && !requires(A&& a) {
  static_cast<A&&>(a).operator co_await();
} && !requires(A&& a) { operator co_await(static_cast<A&&>(a)); };

/// Refers to a plain awaiter. await_transform hands this out instead of the
/// awaiter itself because g++ 12 copies an awaiter that await_transform
/// returns by reference (the co_await would then work on a copy).
template <class A>
struct AwaiterRef {
  A* a;
  decltype(auto) await_ready() { return a->await_ready(); }
  template <class P>
  decltype(auto) await_suspend(std::coroutine_handle<P> h) {
    return a->await_suspend(h);
  }
  decltype(auto) await_resume() { return a->await_resume(); }
};

/// What every Task promise shares: the continuation, the exception, and the
/// leases parked by destructors that ran during exception unwinding (see
/// ordo::Lease): they are failed with that exception by unhandled_exception(),
/// where it is known, or with a generic error if the coroutine caught it.
class PromiseBase : public FrameAllocated {
 public:
  PromiseBase() noexcept = default;
  PromiseBase(const PromiseBase&) = delete;
  PromiseBase& operator=(const PromiseBase&) = delete;

  std::suspend_always initial_suspend() const noexcept { return {}; }

  struct FinalAwaiter {
    PromiseBase* p;
    bool await_ready() const noexcept { return false; }
    std::coroutine_handle<> await_suspend(std::coroutine_handle<>) const noexcept {
      return p->continuation_ ? transfer(p->continuation_) : std::noop_coroutine();
    }
    void await_resume() const noexcept {}
  };
  FinalAwaiter final_suspend() noexcept { return FinalAwaiter{this}; }

  void unhandled_exception() noexcept {
    error_ = std::current_exception();
    // The leases fail with the exception this task hands its awaiter: the
    // error they leave on the variables reaches a waiter through the task,
    // so it is observed (docs/guide.md, "Errors and exceptions").
    for (const OnComplete& d : parked_) {
      try {
        ErrorRef::fail(d, error_).observe();
      } catch (...) {  // a misused OnComplete: nothing sensible left to do
      }
    }
    parked_.clear();
  }

  /// Every co_await in a Task goes through here: leases parked since the last
  /// one are failed, and engine awaitables learn which promise awaits them.
  template <class A>
  decltype(auto) await_transform(A&& a) noexcept {
    if (!parked_.empty()) fail_parked_generic();
    if constexpr (requires(PromiseBase* self) { a.ordo_bind_owner(self); }) {
      a.ordo_bind_owner(this);
    }
    if constexpr (plain_awaiter<std::remove_reference_t<A>>) {
      return AwaiterRef<std::remove_reference_t<A>>{std::addressof(a)};  // a temporary lives to the end of the co_await
    } else {
      return static_cast<A&&>(a);
    }
  }

  /// A lease destroyed by exception unwinding in this coroutine hands its
  /// completion here (the in-flight exception is not reachable from a destructor).
  void park(OnComplete done) noexcept {
    try {
      parked_.push_back(done);
    } catch (...) {
      finish_one(done, generic_unwind_error());
    }
  }

  void set_continuation(std::coroutine_handle<> c) noexcept { continuation_ = c; }

  /// The leases this task holds (a Lease awaited in it registers itself
  /// until it completes or is moved): a co_await of an op queued behind
  /// one of them fails with Errc::deadlock instead of waiting for ever.
  void lease_held(const OnComplete& done) noexcept {
    try {
      leases_.push_back(done);
    } catch (...) {  // out of memory: this lease goes unchecked
    }
  }
  void lease_ended(const OnComplete& done) noexcept {
    for (auto it = leases_.begin(); it != leases_.end(); ++it) {
      if (*it == done) {
        leases_.erase(it);
        return;
      }
    }
  }
  [[nodiscard]] const std::vector<OnComplete>& leases() const noexcept { return leases_; }

 protected:
  ~PromiseBase() {
    if (!parked_.empty()) fail_parked_generic();
  }
  void on_return() noexcept {
    if (!parked_.empty()) fail_parked_generic();
  }
  void rethrow_if_error() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  static std::exception_ptr generic_unwind_error() noexcept {
    return std::make_exception_ptr(Error(Errc::cancelled,
                                         "lease released by exception unwinding; the coroutine caught the "
                                         "exception, so the op fails with this error instead"));
  }
  static void finish_one(const OnComplete& done, const std::exception_ptr& e) noexcept {
    try {
      done(e);
    } catch (...) {  // a misused OnComplete: nothing sensible left to do
    }
  }
  void fail_parked(const std::exception_ptr& e) noexcept {
    for (const OnComplete& d : parked_) finish_one(d, e);
    parked_.clear();
  }
  void fail_parked_generic() noexcept { fail_parked(generic_unwind_error()); }

  std::coroutine_handle<> continuation_;
  std::exception_ptr error_;
  std::vector<OnComplete> parked_;
  std::vector<OnComplete> leases_;  ///< see lease_held
};

template <class T>
class TaskPromise : public PromiseBase {
 public:
  Task<T> get_return_object() noexcept;

  template <class U = T>
    requires std::is_convertible_v<U&&, T>
  void return_value(U&& v) noexcept(std::is_nothrow_constructible_v<T, U&&>) {
    value_.emplace(std::forward<U>(v));
    on_return();
  }
  T take() {
    rethrow_if_error();
    if (!value_) throw Error(Errc::invalid_argument, "Task result taken twice");
    T out = std::move(*value_);
    value_.reset();
    return out;
  }

 private:
  std::optional<T> value_;
};

template <>
class TaskPromise<void> : public PromiseBase {
 public:
  Task<void> get_return_object() noexcept;
  void return_void() noexcept { on_return(); }
  void take() const { rethrow_if_error(); }
};

}  // namespace detail

/// A lazy coroutine producing a T (or nothing, for Task<void>), or an
/// exception that its awaiter receives. Move-only; owns its coroutine frame
/// (destroying an unstarted or finished task frees it). Await it once:
/// `co_await task` (lvalue or rvalue) starts it and yields its result, moved
/// out (move-only results are fine).
///
/// Stack depth. Awaiting a task and finishing one are symmetric transfers,
/// but every resumption goes through a per-thread trampoline
/// (detail/coro_runtime.hpp) that unwinds to a loop every few transfers, so a
/// chain of a million synchronously completing tasks runs in bounded stack in
/// every build (g++ only makes symmetric transfer a tail call at -O2, and not
/// under the sanitizers).
///
/// Where coroutines run. A coroutine runs on the thread that resumes it: the
/// one that starts it (sync_wait's caller, spawn's caller), then whichever
/// thread completes what it awaits (for engine awaitables, see ordo/coro.hpp:
/// the worker that granted the op; the thread that requested a stop for a
/// cancelled push; or the executor named by resume_on). While a thread runs
/// coroutines, further resumptions on that thread are queued and run in FIFO
/// order as soon as the running coroutine suspends or finishes.
///
/// Rules: a coroutine must not block (no sync_wait, no Engine::wait_for_var
/// inside one: co_await instead). Frames come from a recycling allocator
/// (detail::frame_alloc), not one malloc each.
///
/// @par Thread safety
/// A Task object is not thread-safe: one owner moves or awaits it. Once
/// started, the coroutine may run on any thread (see "Where coroutines run"
/// above); its completion is published to its awaiter with the happens-before
/// edge of the resumption, so the awaiter sees everything the task wrote.
template <class T>
class [[nodiscard]] Task {
 public:
  using promise_type = detail::TaskPromise<T>;
  using value_type = T;
  static_assert(!std::is_reference_v<T>, "Task<T&> is not supported: return a pointer or std::reference_wrapper");

  Task() noexcept = default;
  Task(Task&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  Task& operator=(Task&& o) noexcept {
    if (this != &o) {
      if (h_) h_.destroy();
      h_ = std::exchange(o.h_, {});
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() {
    if (h_) h_.destroy();
  }

  /// False for a default-constructed or moved-from task.
  [[nodiscard]] bool valid() const noexcept { return static_cast<bool>(h_); }
  /// True once the coroutine has finished (with a value or an exception).
  [[nodiscard]] bool done() const noexcept { return h_ && h_.done(); }

  struct Awaiter {
    std::coroutine_handle<promise_type> h;
    bool await_ready() const noexcept { return !h || h.done(); }
    std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiting) const noexcept {
      h.promise().set_continuation(awaiting);
      return detail::transfer(h);
    }
    T await_resume() const {
      if (!h) throw Error(Errc::invalid_argument, "co_await on an empty Task");
      return h.promise().take();
    }
  };
  Awaiter operator co_await() & noexcept { return Awaiter{h_}; }
  Awaiter operator co_await() && noexcept { return Awaiter{h_}; }

 private:
  friend class detail::TaskPromise<T>;
  explicit Task(std::coroutine_handle<promise_type> h) noexcept : h_(h) {}
  std::coroutine_handle<promise_type> h_;
};

template <class T>
Task<T> detail::TaskPromise<T>::get_return_object() noexcept {
  return Task<T>(std::coroutine_handle<TaskPromise<T>>::from_promise(*this));
}
inline Task<void> detail::TaskPromise<void>::get_return_object() noexcept {
  return Task<void>(std::coroutine_handle<TaskPromise<void>>::from_promise(*this));
}

namespace detail {

/// A one-shot event a thread blocks on (mutex + condvar: clear to TSan).
class BlockingEvent {
 public:
  void set() {
    std::lock_guard lock(m_);
    set_ = true;
    cv_.notify_all();  // under the lock: the waiter cannot destroy us before we are done
  }
  void wait() {
    std::unique_lock lock(m_);
    cv_.wait(lock, [this] { return set_; });
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool set_ = false;
};

/// A root coroutine that runs a task to completion and then sets an event.
/// Suspends at its end; its owner destroys it.
class SignalingRoot {
 public:
  struct promise_type : FrameAllocated {
    BlockingEvent* event = nullptr;
    SignalingRoot get_return_object() noexcept {
      return SignalingRoot{std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    std::suspend_always initial_suspend() const noexcept { return {}; }
    struct Final {
      bool await_ready() const noexcept { return false; }
      void await_suspend(std::coroutine_handle<promise_type> h) const noexcept { h.promise().event->set(); }
      void await_resume() const noexcept {}
    };
    Final final_suspend() const noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }  // the body catches everything
  };
  std::coroutine_handle<promise_type> h;
};

template <class T, class Out>
SignalingRoot sync_wait_root(Task<T>& task, Out& out, std::exception_ptr& error) {
  try {
    if constexpr (std::is_void_v<T>) {
      co_await task;
    } else {
      out.emplace(co_await task);
    }
  } catch (...) {
    error = std::current_exception();
  }
}

}  // namespace detail

/// Runs `task` to completion, blocking the calling thread, and returns its
/// result or rethrows its exception. The task starts on the calling thread
/// and continues wherever it is resumed (engine workers, other threads).
///
/// Must not be called from inside a coroutine (it would block the thread that
/// runs the coroutines queued behind it): that throws
/// ordo::Error{Errc::wait_inside_op}. Nor from an engine op body whose engine
/// the task needs to make progress (that may deadlock, as any blocking wait).
///
/// @par Thread safety
/// Any number of threads may call sync_wait concurrently (on different tasks).
template <class T>
T sync_wait(Task<T> task) {
  if (detail::in_coroutine_loop()) {
    throw Error(Errc::wait_inside_op,
                "sync_wait called from inside a coroutine (or an op run inline by one): co_await the task instead");
  }
  if (!task.valid()) throw Error(Errc::invalid_argument, "sync_wait on an empty Task");
  detail::BlockingEvent event;
  std::exception_ptr error;
  std::conditional_t<std::is_void_v<T>, std::optional<bool>, std::optional<T>> out;
  detail::SignalingRoot root = detail::sync_wait_root(task, out, error);
  root.h.promise().event = &event;
  detail::resume(root.h);
  event.wait();
  root.h.destroy();
  if (error) std::rethrow_exception(error);
  if constexpr (!std::is_void_v<T>) return std::move(*out);
}

}  // namespace ordo

#include "ordo/detail/coro_when_all.hpp"  // IWYU pragma: export
#include "ordo/detail/coro_scope.hpp"     // IWYU pragma: export

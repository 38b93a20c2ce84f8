// ordo/detail/coro_scope.hpp - ordo::AsyncScope. Included by ordo/task.hpp.
#pragma once

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <mutex>
#include <stop_token>
#include <type_traits>
#include <utility>

#include "ordo/detail/coro_runtime.hpp"
#include "ordo/task.hpp"

namespace ordo {

class AsyncScope;

namespace detail {

/// A detached coroutine running one spawned task; it frees itself when done.
class ScopeChild {
 public:
  struct promise_type : FrameAllocated {
    AsyncScope* scope = nullptr;
    ScopeChild get_return_object() noexcept {
      return ScopeChild{std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    std::suspend_always initial_suspend() const noexcept { return {}; }
    struct Final {
      bool await_ready() const noexcept { return false; }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> h) const noexcept;
      void await_resume() const noexcept {}
    };
    Final final_suspend() const noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }  // the body catches everything
  };
  std::coroutine_handle<promise_type> h;
};

}  // namespace detail

/// Owns detached tasks: `scope.spawn(task)` starts a task now and forgets it;
/// `co_await scope.join()` (in a coroutine) or `scope.sync_join()` (blocking,
/// outside coroutines) waits until every spawned task has finished, then
/// rethrows the first exception a spawned task let escape, if any (the others
/// are counted and dropped). A scope can be joined again after more spawns.
///
/// spawn starts the task on the calling thread, up to its first suspension
/// (from inside a coroutine: as soon as the calling coroutine suspends), so
/// engine ops the task pushes before it first suspends are registered before
/// spawn returns (outside coroutines).
///
/// STOPPING. The scope owns a std::stop_source: request_stop() stops every
/// token get_stop_token() handed out, so every task made with one (spawn(fn)
/// calls fn(token) for you) sees the stop: a pending co_await ordo::push,
/// wait_for, Semaphore, Channel, sleep_for, when_any, or ordo::io request
/// given the token is cancelled at once, and a task can poll
/// token.stop_requested(). The tasks still finish by themselves: join the
/// scope as usual (it waits for them). A stopped scope stays stopped; tasks
/// spawned later get a stopped token.
///
/// THE RULE: join a scope before destroying it, and before destroying the
/// engine its tasks use (declare the scope after the engine). Destroying a
/// scope with tasks still running reports it on stderr and calls
/// std::terminate (they would use a dead scope); an exception no join
/// rethrew is reported on stderr.
///
/// @par Thread safety
/// spawn may be called from any thread, concurrently, while the scope is not
/// being joined; and at any time from a task of the scope itself (a spawned
/// task may spawn more). One joiner at a time. The joiner sees everything the
/// tasks wrote.
class AsyncScope {
 public:
  AsyncScope() noexcept = default;
  AsyncScope(const AsyncScope&) = delete;
  AsyncScope& operator=(const AsyncScope&) = delete;
  ~AsyncScope() {
    const std::size_t live = count_.load(std::memory_order_acquire) - 1;
    if (live != 0) {
      std::fprintf(stderr, "ordo: AsyncScope destroyed with %zu task(s) still running: join it first\n", live);
      std::terminate();
    }
    if (first_error_) {
      std::fprintf(stderr, "ordo: AsyncScope destroyed with %zu unobserved task exception(s): join it to rethrow\n",
                   errors_);
    }
  }

  /// Starts `task` as a detached task of this scope.
  template <class T>
  void spawn(Task<T> task) {
    if (!task.valid()) throw Error(Errc::invalid_argument, "AsyncScope::spawn of an empty Task");
    detail::ScopeChild child = run_child(std::move(task), this);
    child.h.promise().scope = this;
    count_.fetch_add(1, std::memory_order_relaxed);
    detail::resume(child.h);
  }

  /// Makes a task with the scope's stop token and spawns it:
  /// `scope.spawn([&](std::stop_token st) { return serve(conn, st); })`.
  /// `make` is called here and not kept: if it is itself a coroutine
  /// lambda, it must outlive the task (as any coroutine lambda's captures).
  template <class F>
    requires std::is_invocable_v<F&, std::stop_token>
  void spawn(F&& make) {
    spawn(make(stop_.get_token()));
  }

  /// A token that request_stop() stops (see STOPPING above).
  [[nodiscard]] std::stop_token get_stop_token() const noexcept { return stop_.get_token(); }
  /// Stops every token of this scope; true if this call made the stop.
  /// Thread-safe; runs the tokens' stop callbacks on the calling thread.
  bool request_stop() noexcept { return stop_.request_stop(); }
  [[nodiscard]] bool stop_requested() const noexcept { return stop_.stop_requested(); }

  /// Spawned tasks not finished yet (a snapshot).
  [[nodiscard]] std::size_t active() const noexcept {
    const std::size_t n = count_.load(std::memory_order_acquire);
    return n == 0 ? 0 : n - 1;
  }

  class JoinAwaiter {
   public:
    explicit JoinAwaiter(AsyncScope& s) noexcept : s_(&s) {}
    bool await_ready() const noexcept { return false; }
    bool await_suspend(std::coroutine_handle<> h) noexcept {
      s_->joiner_ = h;
      // Drop the scope's own count (release: publishes joiner_ to the last task).
      if (s_->count_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        s_->count_.store(1, std::memory_order_relaxed);
        s_->joiner_ = {};
        return false;  // nothing running: go on
      }
      return true;
    }
    void await_resume() const { s_->rethrow_first_error(); }

   private:
    AsyncScope* s_;
  };

  /// `co_await scope.join()`: resumes when every spawned task has finished
  /// (on the thread that finished the last one), then rethrows the first
  /// escaped exception.
  [[nodiscard]] JoinAwaiter join() noexcept { return JoinAwaiter(*this); }

  /// Blocking join, for threads that are not running coroutines.
  void sync_join() { sync_wait(join_task(this)); }

 private:
  friend struct detail::ScopeChild::promise_type::Final;

  template <class T>
  static detail::ScopeChild run_child(Task<T> task, AsyncScope* scope) {
    try {
      co_await task;
    } catch (...) {
      scope->record_error(std::current_exception());
    }
  }
  static Task<void> join_task(AsyncScope* s) { co_await s->join(); }

  void record_error(const std::exception_ptr& e) noexcept {
    std::lock_guard lock(error_mutex_);
    if (!first_error_) first_error_ = e;
    ++errors_;
  }
  void rethrow_first_error() {
    std::exception_ptr e;
    {
      std::lock_guard lock(error_mutex_);
      e = std::exchange(first_error_, nullptr);
      errors_ = 0;
    }
    if (e) std::rethrow_exception(e);
  }
  /// Called by a finished task (its frame already freed): the coroutine to run next.
  std::coroutine_handle<> child_done() noexcept {
    if (count_.fetch_sub(1, std::memory_order_acq_rel) != 1) return std::noop_coroutine();
    // Last one out while a joiner waits (the joiner dropped the scope's count).
    count_.store(1, std::memory_order_relaxed);
    return detail::transfer(std::exchange(joiner_, {}));
  }

  /// Spawned tasks running + 1 (the scope's own count, dropped while joining).
  std::atomic<std::size_t> count_{1};
  std::coroutine_handle<> joiner_;
  std::mutex error_mutex_;
  std::exception_ptr first_error_;  ///< guarded by error_mutex_
  std::size_t errors_ = 0;          ///< guarded by error_mutex_
  std::stop_source stop_;           ///< thread-safe itself; stopped once, never reset
};

inline std::coroutine_handle<> detail::ScopeChild::promise_type::Final::await_suspend(
    std::coroutine_handle<promise_type> h) const noexcept {
  AsyncScope* s = h.promise().scope;
  h.destroy();  // the task is finished: free its frame before the joiner can run
  return s->child_done();
}

}  // namespace ordo

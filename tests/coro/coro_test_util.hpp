// tests/coro/coro_test_util.hpp - helpers shared by the coroutine tests.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <coroutine>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "core/test_util.hpp"
#include "ordo/coro.hpp"
#include "ordo/task.hpp"

namespace ordo::test {

struct Boom : std::runtime_error {
  explicit Boom(const std::string& s) : std::runtime_error(s) {}
};

namespace detail_bounded {
template <class T>
struct State {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::conditional_t<std::is_void_v<T>, std::optional<bool>, std::optional<T>> value;
  std::exception_ptr error;
};

template <class T>
Task<void> wrap(Task<T> task, std::shared_ptr<State<T>> st) {
  try {
    // Destroyed at the end of this block, before `done` is signalled: the
    // task's promise holds its exception too (see run_bounded).
    Task<T> t = std::move(task);
    if constexpr (std::is_void_v<T>) {
      co_await t;
      st->value.emplace(true);
    } else {
      st->value.emplace(co_await t);
    }
  } catch (...) {
    st->error = std::current_exception();
  }
  std::lock_guard lock(st->m);
  st->done = true;
  st->cv.notify_all();
}
}  // namespace detail_bounded

/// sync_wait with a limit: a hung task fails the test and aborts the process
/// (the task still references the test's stack, so there is no going on).
template <class T>
T run_bounded(Task<T> task, std::chrono::seconds limit = std::chrono::seconds(60)) {
  static AsyncScope* scope = new AsyncScope;  // never destroyed: a timed-out task may still run
  auto st = std::make_shared<detail_bounded::State<T>>();
  scope->spawn(detail_bounded::wrap(std::move(task), st));
  std::exception_ptr error;
  {
    std::unique_lock lock(st->m);
    if (!st->cv.wait_for(lock, limit, [&] { return st->done; })) {
      std::fprintf(stderr, "run_bounded: task did not finish within %llds: aborting\n",
                   static_cast<long long>(limit.count()));
      std::fflush(stderr);
      std::abort();
    }
    // Taken out under the lock, so the task's thread, which drops its State
    // reference after this, never releases the exception: libstdc++'s
    // exception reference counts are not instrumented, and ThreadSanitizer
    // would report that release against this thread's use as a race.
    error = std::move(st->error);
  }
  if (error) std::rethrow_exception(error);
  if constexpr (!std::is_void_v<T>) return std::move(*st->value);
}

/// Waits (bounded) until every write pushed on `v` so far has finished, then
/// Engine::wait_for_var (which then returns at once, rethrowing v's error).
inline void bounded_wait(Engine& engine, Var v, std::chrono::seconds limit = std::chrono::seconds(60)) {
  auto gate = std::make_shared<Gate>();
  engine.push_sync([gate] { gate->open(); }, Context::cpu(), {v}, {}, {.always_run = true});
  if (!gate->wait(limit)) {
    std::fprintf(stderr, "bounded_wait: var %u not released within %llds: aborting\n", v.id(),
                 static_cast<long long>(limit.count()));
    std::fflush(stderr);
    std::abort();
  }
  engine.wait_for_var(v);
}

/// A single-waiter event: `co_await ev` suspends until set(), which resumes
/// the waiter on the setting thread.
class Event {
 public:
  void set() {
    void* prev = state_.exchange(set_marker(), std::memory_order_acq_rel);
    if (prev != nullptr && prev != set_marker()) ordo::detail::resume(std::coroutine_handle<>::from_address(prev));
  }
  [[nodiscard]] bool is_set() const noexcept { return state_.load(std::memory_order_acquire) == set_marker(); }
  bool await_ready() const noexcept { return is_set(); }
  bool await_suspend(std::coroutine_handle<> h) noexcept {
    void* expected = nullptr;
    return state_.compare_exchange_strong(expected, h.address(), std::memory_order_acq_rel);
  }
  void await_resume() const noexcept {}

 private:
  void* set_marker() const noexcept { return const_cast<Event*>(this); }
  std::atomic<void*> state_{nullptr};
};

/// Resumes awaiting coroutines on threads of its own; joins them when destroyed.
class ThreadResumer {
 public:
  ~ThreadResumer() {
    for (;;) {
      std::vector<std::thread> batch;
      {
        std::lock_guard lock(m_);
        batch.swap(threads_);
      }
      if (batch.empty()) return;
      for (auto& t : batch) t.join();  // a joined thread may have started more
    }
  }
  struct Awaiter {
    ThreadResumer* r;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) {
      std::lock_guard lock(r->m_);
      r->threads_.emplace_back([h] { ordo::detail::resume(h); });
    }
    void await_resume() const noexcept {}
  };
  /// `co_await resumer.hop()`: continue on a new thread.
  Awaiter hop() noexcept { return Awaiter{this}; }

 private:
  std::mutex m_;
  std::vector<std::thread> threads_;
};

}  // namespace ordo::test

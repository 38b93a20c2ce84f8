// ordo/detail/coro_when_all.hpp - ordo::when_all. Included by ordo/task.hpp.
#pragma once

#include <array>
#include <atomic>
#include <coroutine>
#include <cstddef>
#include <exception>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "ordo/detail/coro_runtime.hpp"
#include "ordo/task.hpp"

namespace ordo {

/// What when_all yields for a Task<T>: T, or std::monostate for Task<void>.
template <class T>
using when_all_result_t = std::conditional_t<std::is_void_v<T>, std::monostate, T>;

namespace detail {

/// Counts the children of a when_all still running, plus one held by the
/// parent until it has started them all; whoever brings it to zero resumes
/// the parent.
struct WhenAllLatch {
  std::atomic<std::size_t> count;
  std::coroutine_handle<> parent;
};

/// The coroutine wrapping one child: runs it, stores its outcome, counts down.
class WhenAllChild {
 public:
  struct promise_type : FrameAllocated {
    WhenAllLatch* latch = nullptr;
    WhenAllChild get_return_object() noexcept {
      return WhenAllChild{std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    std::suspend_always initial_suspend() const noexcept { return {}; }
    struct Final {
      bool await_ready() const noexcept { return false; }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> h) const noexcept {
        WhenAllLatch* l = h.promise().latch;
        // acq_rel: the last child sees every other child's result before the parent runs.
        if (l->count.fetch_sub(1, std::memory_order_acq_rel) == 1) return transfer(l->parent);
        return std::noop_coroutine();  // the parent (maybe running already) destroys this frame
      }
      void await_resume() const noexcept {}
    };
    Final final_suspend() const noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }  // the body catches everything
  };

  WhenAllChild() noexcept = default;
  explicit WhenAllChild(std::coroutine_handle<promise_type> h) noexcept : h_(h) {}
  WhenAllChild(WhenAllChild&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  WhenAllChild& operator=(WhenAllChild&& o) noexcept {
    if (this != &o) {
      if (h_) h_.destroy();
      h_ = std::exchange(o.h_, {});
    }
    return *this;
  }
  ~WhenAllChild() {
    if (h_) h_.destroy();
  }
  [[nodiscard]] std::coroutine_handle<promise_type> handle() const noexcept { return h_; }

 private:
  std::coroutine_handle<promise_type> h_;
};

template <class T>
WhenAllChild when_all_child(Task<T>& task, std::optional<when_all_result_t<T>>& out, std::exception_ptr& error) {
  try {
    if constexpr (std::is_void_v<T>) {
      co_await task;
      out.emplace();
    } else {
      out.emplace(co_await task);
    }
  } catch (...) {
    error = std::current_exception();
  }
}

/// Starts every child (queued on this thread in argument order: each runs up
/// to its first suspension before the next starts) and resumes the parent
/// when the last one finishes.
class WhenAllStart {
 public:
  WhenAllStart(WhenAllLatch& latch, WhenAllChild* children, std::size_t n) noexcept
      : latch_(&latch), children_(children), n_(n) {}
  bool await_ready() const noexcept { return n_ == 0; }
  bool await_suspend(std::coroutine_handle<> parent) {
    latch_->parent = parent;
    latch_->count.store(n_ + 1, std::memory_order_relaxed);
    for (std::size_t i = 0; i < n_; ++i) {
      children_[i].handle().promise().latch = latch_;
      resume(children_[i].handle());
    }
    // Drop the parent's own count; if every child already finished, go on at once.
    return latch_->count.fetch_sub(1, std::memory_order_acq_rel) != 1;
  }
  void await_resume() const noexcept {}

 private:
  WhenAllLatch* latch_;
  WhenAllChild* children_;
  std::size_t n_;
};

template <class... Ts, std::size_t... I>
Task<std::tuple<when_all_result_t<Ts>...>> when_all_impl(std::index_sequence<I...>, Task<Ts>... tasks) {
  std::tuple<std::optional<when_all_result_t<Ts>>...> results;
  std::array<std::exception_ptr, sizeof...(Ts)> errors{};
  std::array<WhenAllChild, sizeof...(Ts)> children{
      when_all_child(tasks, std::get<I>(results), errors[I])...};
  WhenAllLatch latch{};
  co_await WhenAllStart(latch, children.data(), children.size());
  for (auto& c : children) c = WhenAllChild{};  // free the frames now
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  co_return std::tuple<when_all_result_t<Ts>...>(std::move(*std::get<I>(results))...);
}

template <class T>
Task<std::vector<when_all_result_t<T>>> when_all_vector(std::vector<Task<T>> tasks) {
  std::vector<std::optional<when_all_result_t<T>>> results(tasks.size());
  std::vector<std::exception_ptr> errors(tasks.size());
  std::vector<WhenAllChild> children;
  children.reserve(tasks.size());
  for (std::size_t i = 0; i < tasks.size(); ++i) children.push_back(when_all_child(tasks[i], results[i], errors[i]));
  WhenAllLatch latch{};
  co_await WhenAllStart(latch, children.data(), children.size());
  children.clear();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  std::vector<when_all_result_t<T>> out;
  out.reserve(results.size());
  for (auto& r : results) out.push_back(std::move(*r));
  co_return out;
}

}  // namespace detail

/// Runs the tasks concurrently and yields a tuple of their results, in
/// argument order (std::monostate for a Task<void>). The tasks start on the
/// awaiting thread in argument order, each running up to its first suspension
/// before the next starts: so engine ops a task pushes before it first
/// suspends are registered in argument order. If any task throws, when_all
/// waits for all of them, then rethrows the exception of the first one (in
/// argument order) that failed.
///
/// @par Thread safety
/// The tasks may finish on any threads; the awaiter sees all their results.
template <class... Ts>
[[nodiscard]] Task<std::tuple<when_all_result_t<Ts>...>> when_all(Task<Ts>... tasks) {
  return detail::when_all_impl(std::index_sequence_for<Ts...>{}, std::move(tasks)...);
}

/// The same for a run-time number of tasks of one type: yields a vector of
/// their results, in order. As in the tuple, a Task<void> gives
/// std::monostate: a vector of n of them for n tasks of void, so generic
/// code sees one shape whatever T is.
template <class T>
[[nodiscard]] Task<std::vector<when_all_result_t<T>>> when_all(std::vector<Task<T>> tasks) {
  return detail::when_all_vector<T>(std::move(tasks));
}

}  // namespace ordo

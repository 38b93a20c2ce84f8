// ordo/for_each.hpp - bounded concurrency: at most `limit` tasks at a time.
//
//   // Process every file, four at a time (a pipeline that reads with ordo::io
//   // and counts in engine ops: more lanes than cores only adds contention).
//   co_await ordo::for_each(paths, 4, [&](const std::string& p) -> ordo::Task<void> { co_await load(p); });
//
//   // The tasks are already made: run them four at a time, results in order.
//   std::vector<int> sizes = co_await ordo::when_all(std::move(tasks), 4);
//
// The lanes, the order of starts and failures: when_all(tasks, limit) below.
#pragma once

#include <atomic>
#include <concepts>
#include <cstddef>
#include <exception>
#include <iterator>
#include <mutex>
#include <optional>
#include <ranges>
#include <type_traits>
#include <utility>
#include <vector>

#include "ordo/error.hpp"
#include "ordo/task.hpp"

namespace ordo {

namespace detail {

/// What the lanes of one bounded call share. The first failure (lowest
/// index) is kept under `m`; `failed` is a hint that stops new starts.
struct LaneShared {
  std::atomic<bool> failed{false};  ///< set after a failure; read before each start (relaxed is enough: a hint)
  std::mutex m;
  std::exception_ptr error;  ///< guarded by m
  std::size_t error_index = 0;  ///< guarded by m

  void fail(std::size_t index, std::exception_ptr e) noexcept {
    {
      std::lock_guard lock(m);
      if (!error || index < error_index) {
        error = std::move(e);
        error_index = index;
      }
    }
    failed.store(true, std::memory_order_relaxed);
  }
  void rethrow() {
    if (error) std::rethrow_exception(error);  // after the lanes' join: no lane writes any more
  }
};

inline void check_limit(std::size_t limit) {
  if (limit == 0) throw Error(Errc::invalid_argument, "bounded when_all / for_each: limit must be at least 1");
}

template <class T>
Task<void> when_all_lane(std::vector<Task<T>>& tasks, std::vector<std::optional<when_all_result_t<T>>>& out,
                         std::atomic<std::size_t>& next, LaneShared& shared) {
  for (;;) {
    if (shared.failed.load(std::memory_order_relaxed)) co_return;
    const std::size_t i = next.fetch_add(1, std::memory_order_relaxed);
    if (i >= tasks.size()) co_return;
    try {
      if constexpr (std::is_void_v<T>) {
        co_await tasks[i];
        out[i].emplace();
      } else {
        out[i].emplace(co_await tasks[i]);
      }
    } catch (...) {
      shared.fail(i, std::current_exception());
    }
    tasks[i] = Task<T>{};  // free the finished task's frame now
  }
}

template <class T>
Task<std::vector<when_all_result_t<T>>> when_all_bounded(std::vector<Task<T>> tasks, std::size_t limit) {
  std::vector<std::optional<when_all_result_t<T>>> results(tasks.size());
  std::atomic<std::size_t> next{0};
  LaneShared shared;
  std::vector<Task<void>> lanes;
  const std::size_t n = limit < tasks.size() ? limit : tasks.size();
  lanes.reserve(n);
  for (std::size_t i = 0; i < n; ++i) lanes.push_back(when_all_lane(tasks, results, next, shared));
  co_await when_all(std::move(lanes));  // the join: every lane's writes are visible here
  shared.rethrow();
  std::vector<when_all_result_t<T>> out;
  out.reserve(results.size());
  for (auto& r : results) out.push_back(std::move(*r));
  co_return out;
}

// The range for_each walks: an lvalue by pointer (the caller keeps it alive),
// an rvalue moved in. Not std::views::all: with clang 14 and libstdc++ 12,
// instantiating ref_view / owning_view fails (clang checks the constraints
// of view_interface's members too early), so no view type is made here.
template <class R>
struct RangeRef {
  R* r;
  R& get() noexcept { return *r; }
};
template <class R>
struct RangeOwned {
  R r;
  R& get() noexcept { return r; }
};

template <class V, class F>
struct ForEachShared : LaneShared {
  using Range = std::remove_reference_t<decltype(std::declval<V&>().get())>;
  ForEachShared(V& v, F& f) : it(std::ranges::begin(v.get())), end(std::ranges::end(v.get())), fn(&f) {}
  std::ranges::iterator_t<Range> it;  ///< guarded by m
  std::ranges::sentinel_t<Range> end;
  std::size_t index = 0;  ///< of `it`; guarded by m
  F* fn;
};

template <class V, class F>
Task<void> for_each_lane(ForEachShared<V, F>& sh) {
  for (;;) {
    std::optional<decltype((*sh.fn)(*sh.it))> task;
    std::size_t index = 0;
    {
      std::lock_guard lock(sh.m);
      if (sh.failed.load(std::memory_order_relaxed) || sh.it == sh.end) co_return;
      index = sh.index++;
      try {
        task.emplace((*sh.fn)(*sh.it));  // a lazy task: made here, started below, outside the lock
      } catch (...) {
        if (!sh.error || index < sh.error_index) {  // fn itself threw (under the lock already)
          sh.error = std::current_exception();
          sh.error_index = index;
        }
        sh.failed.store(true, std::memory_order_relaxed);
        co_return;
      }
      ++sh.it;
    }
    try {
      co_await std::move(*task);
    } catch (...) {
      sh.fail(index, std::current_exception());
    }
  }
}

template <class V, class F>
Task<void> for_each_impl(V view, std::size_t limit, F fn) {
  ForEachShared<V, F> shared(view, fn);
  std::vector<Task<void>> lanes;
  lanes.reserve(limit);
  for (std::size_t i = 0; i < limit; ++i) lanes.push_back(for_each_lane(shared));
  co_await when_all(std::move(lanes));
  shared.rethrow();
}

}  // namespace detail

/// Runs the tasks with at most `limit` of them started and unfinished at a
/// time, and yields their results in order (as when_all(tasks) does, which
/// it equals for limit >= tasks.size()). limit 0 throws
/// ordo::Error{Errc::invalid_argument}.
///
/// This and for_each run `limit` lanes: each lane takes the next element
/// (task), awaits it, and takes another, until none is left. The first `limit` start in order on
/// the awaiting thread, each up to its first suspension (as when_all starts
/// its children); a later one starts on the thread that finished the task
/// before it in its lane. After a failure no new element is started; the
/// running ones are awaited, then the failure is rethrown (several: the one of
/// the lowest index). Nothing blocks a thread.
///
/// @par Thread safety
/// The tasks may finish on any threads; the awaiter sees all their results.
template <class T>
[[nodiscard]] Task<std::vector<when_all_result_t<T>>> when_all(std::vector<Task<T>> tasks, std::size_t limit) {
  detail::check_limit(limit);
  return detail::when_all_bounded<T>(std::move(tasks), limit);
}

/// Awaits fn(element) for every element of `range`, at most `limit` at a
/// time; fn returns a Task (of any type; results are dropped). A range
/// passed as an rvalue is moved into the task; an lvalue must outlive it.
/// fn is called (to make each lazy task) under a lock shared by the lanes,
/// in range order; a coroutine fn should take the element by value unless
/// the range owns it (a reference parameter of a coroutine outlives the call).
/// The elements are taken in order; a failure stops further starts (the
/// lanes as for when_all(tasks, limit) above).
///
/// @par Thread safety
/// fn's tasks run concurrently with each other (up to `limit`): share data
/// between them through engine variables, a Channel, or a lock.
template <std::ranges::input_range R, class F>
  requires(std::is_lvalue_reference_v<R> || std::movable<std::remove_cvref_t<R>>) &&
          std::invocable<F&, std::ranges::range_reference_t<R>>
[[nodiscard]] Task<void> for_each(R&& range, std::size_t limit, F fn) {
  detail::check_limit(limit);
  if constexpr (std::is_lvalue_reference_v<R>) {
    return detail::for_each_impl(detail::RangeRef<std::remove_reference_t<R>>{&range}, limit, std::move(fn));
  } else {
    return detail::for_each_impl(detail::RangeOwned<std::remove_cvref_t<R>>{std::move(range)}, limit, std::move(fn));
  }
}

}  // namespace ordo

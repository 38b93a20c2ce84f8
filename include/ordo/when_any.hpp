// ordo/when_any.hpp - the first of several tasks to finish wins; the others
// are cancelled through a stop source and joined before it returns.
//
//   std::stop_source stop;
//   auto r = co_await ordo::when_any(stop, fetch(primary, stop.get_token()),
//                                          fetch(mirror, stop.get_token()));
//   // r.index(): which one finished first; std::get<0>(r) / std::get<1>(r): its value
//
// How `stop` reaches the tasks, and what becomes of the losers: when_any below.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <exception>
#include <optional>
#include <stop_token>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "ordo/error.hpp"
#include "ordo/task.hpp"

namespace ordo {

namespace detail {

/// Who won: the first child to finish claims `decided`.
struct WhenAnyState {
  std::atomic<bool> decided{false};
  std::size_t winner = 0;    ///< written by the claimant only; read after the join
  std::exception_ptr error;  ///< the winner's exception, if it threw
  std::stop_source* stop = nullptr;

  /// True for the first caller: it is the winner.
  bool claim(std::size_t index, std::exception_ptr e) noexcept {
    if (decided.exchange(true, std::memory_order_acq_rel)) return false;
    winner = index;
    error = std::move(e);
    return true;
  }
};

template <class T>
WhenAllChild when_any_child(Task<T>& task, std::size_t index, std::optional<when_all_result_t<T>>& out,
                            WhenAnyState& st) {
  std::exception_ptr e;
  std::optional<when_all_result_t<T>> value;
  try {
    if constexpr (std::is_void_v<T>) {
      co_await task;
      value.emplace();
    } else {
      value.emplace(co_await task);
    }
  } catch (...) {
    e = std::current_exception();
  }
  if (st.claim(index, e)) {
    out = std::move(value);
    st.stop->request_stop();  // the losers' stop callbacks run here (their resumptions queue on this thread)
  }
}

template <class... Ts, std::size_t... I>
Task<std::variant<when_all_result_t<Ts>...>> when_any_impl(std::index_sequence<I...>, std::stop_source& stop,
                                                          Task<Ts>... tasks) {
  std::tuple<std::optional<when_all_result_t<Ts>>...> results;
  WhenAnyState st;
  st.stop = &stop;
  std::array<WhenAllChild, sizeof...(Ts)> children{when_any_child(tasks, I, std::get<I>(results), st)...};
  WhenAllLatch latch{};
  co_await WhenAllStart(latch, children.data(), children.size());
  for (auto& c : children) c = WhenAllChild{};
  if (st.error) std::rethrow_exception(st.error);
  std::optional<std::variant<when_all_result_t<Ts>...>> out;
  ((st.winner == I ? (out.emplace(std::in_place_index<I>, std::move(*std::get<I>(results))), 0) : 0), ...);
  co_return std::move(*out);
}

template <class T>
Task<std::pair<std::size_t, when_all_result_t<T>>> when_any_vector(std::stop_source& stop,
                                                                  std::vector<Task<T>> tasks) {
  std::vector<std::optional<when_all_result_t<T>>> results(tasks.size());
  WhenAnyState st;
  st.stop = &stop;
  std::vector<WhenAllChild> children;
  children.reserve(tasks.size());
  for (std::size_t i = 0; i < tasks.size(); ++i) children.push_back(when_any_child(tasks[i], i, results[i], st));
  WhenAllLatch latch{};
  co_await WhenAllStart(latch, children.data(), children.size());
  children.clear();
  if (st.error) std::rethrow_exception(st.error);
  co_return std::pair<std::size_t, when_all_result_t<T>>(st.winner, std::move(*results[st.winner]));
}

}  // namespace detail

/// Runs the tasks concurrently (started as when_all starts them); the first
/// to finish wins. Yields a variant whose index() is the winner's position
/// and whose value is its result (std::monostate for a Task<void>), or
/// rethrows the winner's exception. `stop` must outlive the await. At least
/// one task.
///
/// The tasks are made by the caller with tokens of `stop` (when_any cannot hand
/// a token to a task that already exists). When the first one finishes, with a
/// value or an exception, when_any calls stop.request_stop(): the others see it
/// through their tokens (a pending co_await ordo::push, wait_for, Semaphore,
/// Channel, sleep_for or ordo::io request given that token is cancelled at
/// once). It then waits for every task to finish, and yields the winner's
/// value or rethrows the winner's exception; the losers' outcomes (typically
/// ordo::CancelledError) are dropped. A task that ignores its token simply
/// runs to its end: when_any never abandons a running task.
///
/// @par Thread safety
/// The tasks may finish on any threads; the awaiter sees all their writes.
template <class... Ts>
  requires(sizeof...(Ts) > 0)
[[nodiscard]] Task<std::variant<when_all_result_t<Ts>...>> when_any(std::stop_source& stop, Task<Ts>... tasks) {
  return detail::when_any_impl(std::index_sequence_for<Ts...>{}, stop, std::move(tasks)...);
}

/// The same for a run-time number of tasks of one type: yields the winner's
/// index and result. An empty vector throws ordo::Error{Errc::invalid_argument}.
template <class T>
[[nodiscard]] Task<std::pair<std::size_t, when_all_result_t<T>>> when_any(std::stop_source& stop,
                                                                          std::vector<Task<T>> tasks) {
  if (tasks.empty()) throw Error(Errc::invalid_argument, "when_any of no tasks");
  return detail::when_any_vector<T>(stop, std::move(tasks));
}

}  // namespace ordo

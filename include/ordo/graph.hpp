// ordo/graph.hpp - captured graphs: record a sequence of pushes once, replay
// it many times.
//
//   ordo::Graph step = engine.capture([&] {
//     engine.push_sync(load, ordo::Context::cpu(), {}, {batch});
//     engine.push_sync(train, ordo::Context::cpu(), {batch}, {weights});
//   });
//   for (int i = 0; i < n; ++i) engine.replay(step, i);   // ordo::replay_arg<int>() == i in the bodies
//   co_await ordo::replay(engine, step);                   // resumes when the replay's ops are done
//
// Automatic capture: a loop whose iterations push the same ops (same body
// types, variables and attributes) replays them, with each iteration's
// bodies, from the second iteration on, and pushes an iteration that differs:
//
//   ordo::AutoCapture loop(engine);
//   for (int i = 0; i < n; ++i) loop.run([&] { engine.push_sync([i, &m] { ... }, cpu, {a}, {b}); });
//
// What a replay promises, what cannot be captured and what it costs:
// docs/graphs.md.
#pragma once

#include <any>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <typeinfo>
#include <utility>

#include "ordo/detail/error_ref.hpp"
#include "ordo/detail/graph_capture.hpp"
#include "ordo/engine.hpp"
#include "ordo/error.hpp"

namespace ordo {

namespace detail {
struct ReplayState;
struct GraphAccess;
class AutoRecorder;
/// Starts a replay of the graph (src/graph/replay.cpp). Returns
/// the replay's state when `awaited` (the caller then owns one reference,
/// dropped by replay_drop), null otherwise.
ReplayState* start_replay(Engine& engine, const std::shared_ptr<const GraphData>& graph, std::any arg, bool awaited);
/// start_replay, awaited through a callback instead of a coroutine (the
/// Asio form): `done` runs once, on the thread that finishes the replay's
/// last op, with the replay's first error (empty: none); not when this
/// call throws.
void start_replay_notify(Engine& engine, const std::shared_ptr<const GraphData>& graph, std::any arg,
                         std::function<void(ErrorRef)> done);
bool replay_ready(const ReplayState* s) noexcept;
/// False: finished meanwhile, resume now.
bool replay_suspend(ReplayState* s, std::coroutine_handle<> h) noexcept;
/// Rethrows the replay's first error (marking it observed), if any.
void replay_result(ReplayState* s);
void replay_drop(ReplayState* s) noexcept;
/// The argument of the replay whose op body runs on this thread, or null.
const std::any* current_replay_arg() noexcept;
[[noreturn]] void bad_replay_arg(const std::any* arg, const char* wanted);
}  // namespace detail

/// A recorded sequence of pushes (Engine::capture), replayed by
/// Engine::replay and ordo::replay. Holds the recorded bodies, their
/// variables and attributes, and the dependencies among them, resolved at
/// capture. Copies share one immutable graph; a graph stays alive until its
/// last copy is gone and its last replay has finished, so destroying it
/// while replays are in flight is safe. It holds its variables by handle,
/// not by reference: deleting one makes later replays throw
/// Errc::deleted_var (replays already pushed run first, as pushes do).
///
/// @par Thread safety
/// Immutable: any number of threads may replay one graph at once.
class Graph {
 public:
  Graph() noexcept = default;
  [[nodiscard]] bool empty() const noexcept { return data_ == nullptr; }
  /// Recorded pushes.
  [[nodiscard]] std::size_t size() const noexcept;
  /// Dependencies among them, resolved at capture: pairs (a, b) of recorded
  /// ops, a before b, that share a variable one of them mutates, with no
  /// recorded op between them on it.
  [[nodiscard]] std::size_t edges() const noexcept;

 private:
  friend class Engine;
  friend struct detail::GraphAccess;
  explicit Graph(std::shared_ptr<const detail::GraphData> d) noexcept : data_(std::move(d)) {}
  std::shared_ptr<const detail::GraphData> data_;
};

/// Inside the body of an op of a replay given an argument (Engine::replay(g,
/// arg), ordo::replay(engine, g, arg)): that argument, as a T. Valid while
/// the body runs (an async body copies what it needs before it returns).
/// Throws ordo::Error{Errc::invalid_argument} outside such a body, or when
/// the argument is not a T.
template <class T>
[[nodiscard]] const T& replay_arg() {
  const std::any* a = detail::current_replay_arg();
  const T* p = a != nullptr ? std::any_cast<T>(a) : nullptr;
  if (p == nullptr) detail::bad_replay_arg(a, typeid(T).name());
  return *p;
}

/// What ordo::replay returns: co_await it to wait for every op of the
/// replay (pushed when ordo::replay was called, not when awaited). It
/// resumes the coroutine on the thread that finished the replay's last op
/// and rethrows the replay's first error, once: an op body's exception, or
/// the error that made the engine skip one of the replay's ops (that error
/// is then observed: wait_for_all does not rethrow it again). Not awaited,
/// it lets the replay run; its errors then stay on the variables, as a
/// push's do.
///
/// @par Thread safety
/// One owner, awaited at most once.
class [[nodiscard]] ReplayAwaitable {
 public:
  explicit ReplayAwaitable(detail::ReplayState* s) noexcept : s_(s) {}
  ReplayAwaitable(ReplayAwaitable&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  ReplayAwaitable& operator=(ReplayAwaitable&&) = delete;
  ~ReplayAwaitable() {
    if (s_ != nullptr) detail::replay_drop(s_);
  }
  [[nodiscard]] bool await_ready() const noexcept { return detail::replay_ready(s_); }
  bool await_suspend(std::coroutine_handle<> h) noexcept { return detail::replay_suspend(s_, h); }
  void await_resume() { detail::replay_result(s_); }

 private:
  detail::ReplayState* s_;
};

/// Replays `graph` on `engine` now (as Engine::replay) and returns an
/// awaitable for its completion.
[[nodiscard]] inline ReplayAwaitable replay(Engine& engine, const Graph& graph);
/// The same with a per-replay argument (ordo::replay_arg<T>()).
template <class T>
[[nodiscard]] ReplayAwaitable replay(Engine& engine, const Graph& graph, T&& arg);

template <class F>
Graph Engine::capture(F&& fn) {
  detail::GraphRecorder rec(*this);
  std::forward<F>(fn)();
  return Graph(rec.finish());
}

template <class T>
void Engine::replay(const Graph& graph, T&& arg) {
  detail::start_replay(*this, graph.data_, std::any(std::forward<T>(arg)), false);
}

namespace detail {
/// The free ordo::replay forms' way to a graph's data.
struct GraphAccess {
  static const std::shared_ptr<const GraphData>& data(const Graph& g) noexcept { return g.data_; }
};
}  // namespace detail

inline ReplayAwaitable replay(Engine& engine, const Graph& graph) {
  return ReplayAwaitable(detail::start_replay(engine, detail::GraphAccess::data(graph), std::any(), true));
}

template <class T>
ReplayAwaitable replay(Engine& engine, const Graph& graph, T&& arg) {
  return ReplayAwaitable(
      detail::start_replay(engine, detail::GraphAccess::data(graph), std::any(std::forward<T>(arg)), true));
}

/// Automatic capture (docs/graphs.md, "Automatic capture"): each run(fn)
/// records the pushes fn makes on the engine (as Engine::capture does:
/// nothing runs inside fn, and the same calls are refused), then, at the end
/// of run(), makes them: replayed as the graph learned from an earlier
/// iteration, with this iteration's bodies, when they match it op for op
/// (body types, sync or async, contexts, variables and modes, attributes,
/// operators); else pushed one by one, in order, and learned for the next
/// iteration. Either way the program behaves exactly as if fn's pushes had
/// been made at the end of run(). An exception out of fn (a refused call
/// included) pushes the ops recorded before it, then propagates.
///
/// @par Thread safety
/// One thread at a time calls run(); other threads push on the same
/// variables as they like. May outlive its engine (it can then only be
/// destroyed); bodies still in flight are destroyed when their ops are done.
class AutoCapture {
 public:
  explicit AutoCapture(Engine& engine);
  ~AutoCapture();
  AutoCapture(const AutoCapture&) = delete;
  AutoCapture& operator=(const AutoCapture&) = delete;

  /// Records fn's pushes on the engine, then replays or pushes them (above).
  template <class F>
  void run(F&& fn);

  /// Iterations replayed as the learned graph.
  [[nodiscard]] std::uint64_t replayed() const noexcept;
  /// Iterations pushed op by op (the first, each that differed, ...).
  [[nodiscard]] std::uint64_t pushed() const noexcept;
  /// Why the last pushed iteration was not replayed: the op index and what
  /// differed ("op 3 'decode': another variable list"); empty if none was.
  [[nodiscard]] const std::string& last_mismatch() const noexcept;
  /// Ops of the graph learned (0: none).
  [[nodiscard]] std::size_t learned_size() const noexcept;

 private:
  void begin();
  void end();
  void fail();
  std::unique_ptr<detail::AutoRecorder> rec_;
};

template <class F>
void AutoCapture::run(F&& fn) {
  begin();
  try {
    std::forward<F>(fn)();
  } catch (...) {
    fail();
    throw;
  }
  end();
}

}  // namespace ordo

// ordo/detail/asio_inline.hpp - what ordo::asio::push tells the engine when
// it may run fn on the calling io_context thread instead of handing it to a
// worker (the work-first path): which io_context runs here (IoTurn), fn's
// measured cost (a moving average per fn type) and the completions of
// earlier inline runs still waiting on that io_context. The decision is the
// engine's placement (EngineCore::place, through EngineExtension::inline_at_io).
// Internal; every condition, and what the user sees: docs/asio.md, "Where fn runs".
#pragma once

#include <asio/execution.hpp>
#include <asio/execution_context.hpp>
#include <asio/io_context.hpp>
#include <asio/query.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

#include "ordo/context.hpp"
#include "ordo/detail/extension.hpp"
#include "ordo/engine.hpp"

namespace ordo::asio_detail {

/// Per io_context state of the inline path, owned by IoTurnService (dies
/// with the io_context; threads keep weak references).
struct IoTurn {
  ::asio::io_context* io;  ///< the owner; valid while this IoTurn is alive
  /// Completions of inline runs posted to this io_context and not yet run.
  /// Incremented by push() on an io thread after an inline run, decremented
  /// when the op's handler runs (or its state is destroyed). Heuristic only:
  /// relaxed; a stale value sends one op to a worker or keeps one inline.
  std::shared_ptr<std::atomic<int>> pending;
};

/// The execution_context service that owns an io_context's IoTurn.
class IoTurnService final : public ::asio::execution_context::service {
 public:
  static inline ::asio::execution_context::id id;
  explicit IoTurnService(::asio::io_context& io)
      : ::asio::execution_context::service(io),
        turn_(std::make_shared<IoTurn>(IoTurn{&io, std::make_shared<std::atomic<int>>(0)})) {}
  [[nodiscard]] std::shared_ptr<IoTurn> turn() const { return turn_; }

 private:
  void shutdown() override {}
  std::shared_ptr<IoTurn> turn_;
};

/// The io_context this thread last attached an ordo::asio handler of, while
/// running it (weak: expires with the io_context). Written and read by the
/// owning thread only.
inline thread_local std::weak_ptr<IoTurn> t_io_turn;

/// The state whose op this thread is pushing on the inline path (null
/// otherwise): its launcher runs fn at once only if it is launched inside
/// that push. Owning thread only.
inline thread_local const void* t_pushing = nullptr;

/// Sets t_pushing for one push.
class PushScope {
 public:
  explicit PushScope(const void* st) noexcept : outer_(t_pushing) { t_pushing = st; }
  ~PushScope() { t_pushing = outer_; }
  PushScope(const PushScope&) = delete;
  PushScope& operator=(const PushScope&) = delete;

 private:
  const void* outer_;
};

/// Moving average of the run time of fn type F, in ns; -1 until it first
/// ran. Shared by every engine and thread; relaxed (a lost update is harmless).
template <class F>
inline std::atomic<std::int64_t> g_fn_cost_ns{-1};

template <class F>
void record_cost(std::chrono::steady_clock::duration d) noexcept {
  const std::int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  const std::int64_t old = g_fn_cost_ns<F>.load(std::memory_order_relaxed);
  g_fn_cost_ns<F>.store(old < 0 ? ns : old + (ns - old) / 4, std::memory_order_relaxed);
}

template <class F>
std::int64_t cost_ns() noexcept {
  return g_fn_cost_ns<F>.load(std::memory_order_relaxed);
}

/// True if an op pushed with (ctx, attrs) may take the inline path at all:
/// a normal CPU op whose inline_ok decides, in the engine, where it runs.
inline bool eligible(const Engine& engine, Context ctx, const OpAttrs& attrs) noexcept {
  return attrs.inline_ok && attrs.prop == FnProperty::normal && !ctx.is_gpu() &&
         detail::EngineExtension::inline_ok_decides(engine, ctx, attrs);
}

/// The pending counter of the io_context running on this thread, if the
/// engine places an op whose fn's runs take `cost_ns` (-1: unknown) here,
/// now; null to offload.
inline std::shared_ptr<std::atomic<int>> inline_turn(const Engine& engine, Context ctx, const OpAttrs& attrs,
                                                     std::int64_t cost_ns) noexcept {
  const std::shared_ptr<IoTurn> t = t_io_turn.lock();
  if (!t || !t->io->get_executor().running_in_this_thread()) return {};
  const detail::IoSite site{cost_ns, t->pending->load(std::memory_order_relaxed) != 0};
  if (!detail::EngineExtension::inline_at_io(engine, ctx, attrs, site)) return {};
  return t->pending;
}

/// The io_context behind executor `ex`, or null: an io_context executor
/// (tracked or not), one held by a polymorphic executor (any_io_executor:
/// the form use_awaitable handlers carry), or one under a strand. Other
/// executors (system, engine_executor, ...) give null.
template <class Ex>
::asio::io_context* io_context_of(const Ex& ex) noexcept {
  using Plain = ::asio::io_context::executor_type;
  using Tracked = std::decay_t<decltype(::asio::prefer(std::declval<const Plain&>(),
                                                       ::asio::execution::outstanding_work.tracked))>;
  if constexpr (std::is_same_v<Ex, Plain> || std::is_same_v<Ex, Tracked>) {
    return &ex.context();
  } else if constexpr (requires { ex.template target<Plain>(); }) {
    if (const Plain* p = ex.template target<Plain>()) return &p->context();
    if (const Tracked* t = ex.template target<Tracked>()) return &t->context();
    return nullptr;
  } else if constexpr (requires { ex.get_inner_executor(); }) {
    return io_context_of(ex.get_inner_executor());
  } else {
    return nullptr;
  }
}

/// Called when a handler with executor `ex` is attached on this thread: if
/// ex belongs to an io_context running here, this thread is one of its io
/// threads (the next pushes from it may run inline).
template <class Ex>
void note_io_thread(const Ex& ex) noexcept {
  ::asio::io_context* io = io_context_of(ex);
  if (io == nullptr) return;
  if (const std::shared_ptr<IoTurn> t = t_io_turn.lock(); t && t->io == io) return;
  if (!io->get_executor().running_in_this_thread()) return;
  try {
    t_io_turn = ::asio::use_service<IoTurnService>(*io).turn();
  } catch (...) {
    // No service (out of memory): this thread just keeps offloading.
  }
}

}  // namespace ordo::asio_detail

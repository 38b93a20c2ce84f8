// ordo/schedule.hpp - move a coroutine onto the engine's workers.
//
//   co_await ordo::schedule(engine);                           // continue on a CPU worker
//   co_await ordo::schedule(engine, ordo::Context::cpu(1));    // ... of a given context (per-device engine)
//   co_await ordo::yield(engine);                              // let queued work run first, then continue
//
// Both post the coroutine's continuation with Engine::post (routed like an op
// of that context and OpAttrs::prop; never run on the calling thread, never
// held back by max_in_flight). The coroutine then runs inside that post's
// body: Engine::inside_op() is true there, so blocking waits on the engine
// throw Errc::wait_inside_op (co_await instead). Neither orders anything
// against engine variables: use a push for that.
#pragma once

#include <coroutine>

#include "ordo/coro.hpp"
#include "ordo/engine.hpp"

namespace ordo {

/// `co_await` posts the coroutine to a worker of the context (see the header comment).
///
/// @par Thread safety
/// One coroutine awaits it.
class [[nodiscard]] ScheduleAwaiter {
 public:
  ScheduleAwaiter(Engine& engine, Context ctx, OpAttrs attrs) noexcept : engine_(&engine), ctx_(ctx), attrs_(attrs) {}
  bool await_ready() const noexcept { return false; }
  /// Throws what Engine::post throws (the coroutine then goes on here, with the exception).
  void await_suspend(std::coroutine_handle<> h) { engine_->post(detail::ResumeTask{h}, ctx_, attrs_); }
  void await_resume() const noexcept {}

 private:
  Engine* engine_;
  Context ctx_;
  OpAttrs attrs_;
};

/// Continues the coroutine on a worker of `ctx`.
[[nodiscard]] inline ScheduleAwaiter schedule(Engine& engine, Context ctx = Context::cpu(),
                                              OpAttrs attrs = {.name = "ordo::schedule"}) {
  return {engine, ctx, attrs};
}

/// Re-queues the coroutine behind the work already queued for `ctx`'s
/// workers (a worker may then pick other work first), and continues on one of them.
[[nodiscard]] inline ScheduleAwaiter yield(Engine& engine, Context ctx = Context::cpu()) {
  return {engine, ctx, OpAttrs{.name = "ordo::yield"}};
}

}  // namespace ordo

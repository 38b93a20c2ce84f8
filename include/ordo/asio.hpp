// ordo/asio.hpp - engine operations as Asio asynchronous operations.
//
// For servers on standalone Asio (1.22+, <asio.hpp>): a request handler
// pushes dependency-ordered work to an ordo::Engine and awaits it with any
// Asio completion token, without blocking its io_context:
//
//   int now = co_await ordo::asio::push(e, ordo::reads(), ordo::writes(v),
//                                       [&] { return ++value; }, asio::use_awaitable);
//
// Link target ordo::asio (header-only). Inside namespace ordo, `asio::` names
// ordo::asio: spell Asio's own names `::asio::` there. The contract, one
// section each in docs/asio.md: eager registration, errors, where handlers
// run, where fn runs, cancellation, lifetime of the engine and io_context.
#pragma once

#include "ordo/detail/asio_config.hpp"  // before any Asio header

#include <asio/async_result.hpp>

#include <any>
#include <exception>
#include <memory>
#include <type_traits>
#include <utility>

#include "ordo/asio_executor.hpp"
#include "ordo/context.hpp"
#include "ordo/coro.hpp"
#include "ordo/detail/asio_op.hpp"
#include "ordo/engine.hpp"
#include "ordo/error_code.hpp"
#include "ordo/graph.hpp"
#include "ordo/var.hpp"

namespace ordo::asio {

/// The completion signature of push(engine, reads, writes, fn, token):
/// void(std::exception_ptr, T) for fn returning T, void(std::exception_ptr)
/// for void.
template <class F>
using push_signature_t = asio_detail::signature_t<asio_detail::fn_result_t<std::decay_t<F>>>;

/// Pushes fn (callable as T(RunContext) or T()) as an op reading `reads` and
/// mutating `writes`, now (push_sync semantics, routed by ctx and
/// attrs.prop); the Asio operation completes with fn's result or exception
/// once the op has finished (its variables released). The op is pushed when
/// push() is called, whatever the token; the handler is always posted to its
/// associated executor; fn runs on an engine worker, or inline on an
/// io_context thread only with OpAttrs::inline_ok (docs/asio.md: "Eager
/// registration", "Errors", "Where handlers run", "Where fn runs",
/// "Cancellation"). A push refused because the engine's destructor has
/// begun (Errc::shutting_down) completes the operation with that error
/// instead of throwing. `reads`/`writes`
/// accept `{a, b}`, a Var, a vector or ordo::reads(...)/ordo::writes(...)
/// (use those inside co_await: g++ 12 rejects braced lists there).
///
/// @par Thread safety
/// Any thread may call it, concurrently (it is a push). The returned
/// operation is started once, by one thread.
template <class F, class Token>
  requires(std::is_invocable_v<std::decay_t<F>&, const RunContext&> || std::is_invocable_v<std::decay_t<F>&>)
auto push(Engine& engine, VarSpan reads, VarSpan writes, F&& fn, Context ctx, OpAttrs attrs, Token&& token) {
  using D = std::decay_t<F>;
  using R = asio_detail::fn_result_t<D>;
  static_assert(std::is_void_v<R> || (std::is_default_constructible_v<R> && std::is_move_constructible_v<R>),
                "ordo::asio::push: fn's result must be default-constructible (it is passed as T{} beside an "
                "error, as asio::co_spawn does) and movable; return std::optional<T> otherwise");
  ordo::detail::refuse_in_capture(&engine, "ordo::asio::push");
  auto st = std::make_shared<asio_detail::State<D, R>>(std::forward<F>(fn));
  st->name = attrs.name;
  st->timed = asio_detail::eligible(engine, ctx, attrs);
  std::shared_ptr<std::atomic<int>> turn;
  if (st->timed) turn = asio_detail::inline_turn(engine, ctx, attrs, asio_detail::cost_ns<D>());
  try {
    if (turn) {
      // The inline path (detail/asio_inline.hpp): pushed as a launcher, so fn
      // runs right here if the op is ready, and on a worker once it is
      // otherwise.
      st->adaptive = true;
      OpAttrs launcher = attrs;
      launcher.prop = FnProperty::async;
      {
        const asio_detail::PushScope scope(st.get());
        engine.push_async(asio_detail::Body<D, R>(st), ctx, reads, writes, launcher);  // eager: registered now
      }
      if (st->ran_inline) st->hold_turn(std::move(turn));
    } else {
      OpAttrs offload = attrs;
      if (st->timed) offload.inline_ok = false;  // inline_ok, but this push goes to a worker (no turn)
      engine.push_async(asio_detail::Body<D, R>(st), ctx, reads, writes, offload);  // eager: registered now
    }
  } catch (const Error& e) {
    // Refused because the engine is being destroyed: the request still gets
    // its answer, through the handler like any outcome (the body, destroyed
    // unrun, published a skip; the refusal says more). Misuse still throws.
    if (e.code() != Errc::shutting_down) throw;
    st->error = std::current_exception();
  }
  return ::asio::async_initiate<Token, asio_detail::signature_t<R>>(
      asio_detail::Initiation<R>{std::shared_ptr<asio_detail::StateBase<R>>(std::move(st))}, token);
}

/// push on Context::cpu() with default attributes.
template <class F, class Token>
  requires(std::is_invocable_v<std::decay_t<F>&, const RunContext&> || std::is_invocable_v<std::decay_t<F>&>)
auto push(Engine& engine, VarSpan reads, VarSpan writes, F&& fn, Token&& token) {
  return push(engine, reads, writes, std::forward<F>(fn), Context::cpu(), OpAttrs{}, std::forward<Token>(token));
}

/// The asynchronous counterpart of Engine::wait_for_var: completes once every
/// write pushed on `var` before this call has finished (pushed now: an async
/// read of var that runs inline where it becomes ready, so no worker is
/// taken). Completion signature void(std::exception_ptr): the exception is
/// var's error, if it carries one (not cleared from var, unlike
/// Engine::wait_for_var). Cancellable like push.
///
/// @par Thread safety
/// As push.
template <class Token>
auto wait_for(Engine& engine, Var var, Token&& token) {
  return push(engine, VarSpan(var), VarSpan(), [] {}, Context::cpu(),
              OpAttrs{.prop = FnProperty::async, .name = "asio::wait_for", .inline_ok = true},
              std::forward<Token>(token));
}

/// Replays `graph` now (as Engine::replay, given `arg` when there is one:
/// ordo::replay_arg<T>() in the bodies) and completes, with any completion
/// token, once every op of the replay has finished: signature
/// void(std::exception_ptr), the replay's first error as ordo::replay
/// rethrows it (then observed). The handler is posted to its associated
/// executor. Cancellation completes the handler at once with
/// operation_aborted; the replay's ops were pushed and run regardless.
/// A replay the engine refuses (a deleted variable) throws from this call.
///
/// @par Thread safety
/// As push.
template <class Token>
auto replay(Engine& engine, const Graph& graph, std::any arg, Token&& token) {
  auto st = std::make_shared<asio_detail::StateBase<void>>();
  st->name = "ordo::asio::replay";
  detail::start_replay_notify(engine, detail::GraphAccess::data(graph), std::move(arg),
                              [st](detail::ErrorRef error) noexcept {
                                if (!st->claim()) return;  // cancelled first
                                st->error_ref = std::move(error);
                                st->error = st->error_ref.exception();
                                st->publish(st);
                              });
  return ::asio::async_initiate<Token, void(std::exception_ptr)>(asio_detail::Initiation<void>{st}, token);
}
template <class Token>
auto replay(Engine& engine, const Graph& graph, Token&& token) {
  return replay(engine, graph, std::any(), std::forward<Token>(token));
}

}  // namespace ordo::asio

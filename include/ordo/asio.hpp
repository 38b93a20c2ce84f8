// ordo/asio.hpp - engine operations as Asio asynchronous operations.
//
// For servers built on standalone Asio (1.22+, <asio.hpp>): a request
// handler pushes dependency-ordered work to an ordo::Engine and awaits it
// with any Asio completion token, without blocking its io_context:
//
//   asio::awaitable<void> handle(ordo::Engine& e, ordo::Var v, int& value) {
//     int now = co_await ordo::asio::push(e, ordo::reads(), ordo::writes(v),
//                                         [&] { return ++value; }, asio::use_awaitable);
//     co_await ordo::asio::wait_for(e, v, asio::use_awaitable);
//   }
//   ordo::asio::push(e, {v}, {}, [&] { return value; },
//                    [](std::exception_ptr err, int n) { ... });   // a callback
//   std::future<int> f = ordo::asio::push(e, {v}, {}, fn, asio::use_future);
//
// Link target ordo::asio (header-only: ordo::core + Asio + Threads).
// Inside namespace ordo, `asio::` names ordo::asio: spell Asio's own names
// `::asio::` there.
//
// EAGER REGISTRATION. push / wait_for push their op to the engine when they
// are called, before they return, whatever the token: `auto b = push(..A..,
// use_awaitable); auto c = push(..B.., use_awaitable); co_await c; co_await b;`
// runs A before B when they conflict, although use_awaitable (and
// asio::experimental::deferred, parallel_group) start the Asio operation
// only later. Starting it only attaches the handler. An operation never
// started (an awaitable never awaited, a deferred operation dropped) still
// runs its op in push order; its outcome is dropped. Starting one twice (a
// copied deferred operation launched twice) throws ordo::Error.
//
// COMPLETION. Signature void(std::exception_ptr, T) where fn returns T
// (void(std::exception_ptr) for void), as asio::co_spawn does: the original
// exception reaches the user unchanged. With use_awaitable it is rethrown by
// co_await; with use_future by future::get(); as_tuple gives it as a value;
// a callback gets it as its first argument (null on success; T{} is passed
// on failure, so T must be default-constructible: return std::optional<U>
// otherwise). std::error_code users compare an ordo::Error's code with
// ordo::error_code_of (<ordo/error_code.hpp>); a cancelled operation fails
// with std::system_error(asio::error::operation_aborted), what Asio's own
// operations throw through use_awaitable. (asio::redirect_error needs an
// error_code signature and does not apply; use as_tuple.)
//
// Misuse (deleted variable, ...) throws ordo::Error from the initiating
// function itself, before any handler is involved.
//
// ERRORS OF THE OP. An exception thrown by fn fails the op exactly as with
// push_sync: it is stored on the variables the op mutates (ops reading them
// are skipped, Engine::wait_for_var rethrows it) AND handed to the handler.
// An op skipped because an input carries an error completes with that
// original exception. An error handed to a handler is observed:
// Engine::wait_for_all and the engine's destructor pass over it; that of an
// operation never started is the engine's to rethrow or report, once
// (docs/guide.md, "Errors and exceptions"). A server that wants a failed
// request to leave no trace on its variables catches inside fn.
//
// WHERE HANDLERS RUN. Always through asio::post on the handler's associated
// executor (asio::system_executor if it has none), never inside the
// initiating function, the cancellation emit, or on the engine worker that
// ran fn (unless the handler's executor is that worker pool, see
// engine_executor). While the operation is pending, outstanding work is
// counted on that executor (io_context::run() does not return). Memory for
// the pending handler comes from the handler's associated allocator and is
// released before the handler runs.
//
// WHERE FN RUNS. On an engine worker: push() never runs fn on the calling
// thread, so an io thread is never held by a body it handed off. A fn pushed
// with OpAttrs::inline_ok (short, never blocks: the caller's promise) may run
// inside the call where handing it over would only add wake-ups: on a thread
// running an io_context that ordo::asio delivered a handler to before, when
// the op is ready at push (its variables free) and this fn type (the
// lambda's type) measured at most 2 us, or at most 200 us while the engine
// has nothing in flight and no earlier inline completion waits on that
// io_context (a second request read in the same turn goes to a worker).
// Only CPU ops with FnProperty::normal qualify; fn still runs as an op body
// (Engine::inside_op(), ordering, errors as above). Details:
// detail/asio_inline.hpp.
//
// CANCELLATION. If the handler's associated cancellation slot is connected,
// a cancellation signal (terminal, partial or total: all three hold, since a
// cancelled op has no effect at all) that arrives before the op is granted a
// worker completes the operation with asio::error::operation_aborted; fn is
// never called and the op itself still completes in push order as a no-op
// (nothing stored on its variables; a writer still counts in var_version),
// so later ops see consistent queues. A signal that arrives once fn has
// started has no effect: the operation completes normally. The grant and the
// signal race on one atomic flag; exactly one wins.
//
// LIFETIME. The engine must outlive every operation started on it. The
// io_context need not outlive the engine: if it is destroyed (declared after
// the engine, say) while operations still hold handlers for it, its
// destructor destroys those handlers without calling them, as Asio does
// with the handlers of its own pending operations, and reports the ops by
// name on stderr; the ops still run, and nothing touches the io_context
// afterwards. The same holds for any executor that names an
// asio::execution_context (strands, any_io_executor, thread_pool).
// Declare the io_context before the engine, whose destructor drains the ops,
// to have every handler run. Details: detail/asio_pending.hpp.
#pragma once

#include "ordo/detail/asio_config.hpp"  // before any Asio header

#include <asio/async_result.hpp>

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
/// once the op has finished (its variables released). See the header
/// comment for completion, executors and cancellation. `reads`/`writes`
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
  auto st = std::make_shared<asio_detail::State<D, R>>(std::forward<F>(fn));
  st->name = attrs.name;
  st->timed = asio_detail::eligible(engine, ctx, attrs);
  std::shared_ptr<std::atomic<int>> turn;
  if (st->timed) turn = asio_detail::inline_turn(engine, asio_detail::cost_ns<D>());
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

}  // namespace ordo::asio

// ordo/detail/launcher.hpp - internal launchers: async ops whose body only
// starts asynchronous work and runs no user code (ordo::io's push_read and
// push_write). Internal; not for user code.
#pragma once

#include <utility>

#include "ordo/engine.hpp"

namespace ordo::detail {

/// Pushes an internal launcher (OpKind::fn_launcher): an async op (`fn` is
/// `void(RunContext, OnComplete)`, attrs.prop must be FnProperty::async, at
/// most 2 variables) whose body only starts a request. Like every async op it
/// runs inline where it becomes ready on a pushing thread or a worker; unlike
/// a user's, also on a completion thread (an I/O reaper that completed the
/// previous op of the same variable) outside any op it runs, instead of
/// waking a worker just to start the next request: at queue depth 1 on
/// O_DIRECT that wake-up was a hop per read that fio does not pay. Made
/// ready by a delivery (the reaper's, or a worker's that waited in the
/// ring), it starts inside the delivery loop, so that its request joins the
/// batch the loop submits at its end. The Engine befriends this struct;
/// users cannot push such ops otherwise.
struct LauncherPush {
  template <class F>
  static void push(Engine& engine, F&& fn, Context ctx, VarSpan reads, VarSpan writes, const OpAttrs& attrs) {
    OpRecord* op = op_alloc();
    OpGuard guard(op);
    op->fn.emplace(std::forward<F>(fn));
    engine.submit_launcher(guard, ctx, reads, writes, attrs);
  }
};

/// Pushes the op behind a coroutine's lease (OpKind::fn_lease): ordo::push's
/// access form. `fn` is detail::LeaseBody, which only publishes the grant;
/// the op lasts until the Lease is released. The engine times that span and,
/// while leases are short, grants one that is ready at push on the pushing
/// thread (work first for coroutines; docs/coroutines.md).
struct LeasePush {
  template <class F>
  static void push(Engine& engine, F&& fn, Context ctx, VarSpan reads, VarSpan writes, const OpAttrs& attrs) {
    OpRecord* op = op_alloc();
    OpGuard guard(op);
    op->fn.emplace(std::forward<F>(fn));
    engine.submit_lease(guard, ctx, reads, writes, attrs);
  }
  /// Work first without the body: where the lease would be granted on this
  /// thread at once (a thread outside the engine while leases are short, or
  /// a CPU worker), grants it here (no op body, no shared state) and returns
  /// the started op (its OnComplete releases it) and this thread's worker
  /// index; null where the usual push must be made.
  static OpRecord* try_now(Engine& engine, Context ctx, VarSpan reads, VarSpan writes, const OpAttrs& attrs,
                           int& worker) {
    return engine.grant_lease_now(ctx, reads, writes, attrs, worker);
  }
};

}  // namespace ordo::detail

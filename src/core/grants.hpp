// src/core/grants.hpp - the engine's grants: the one place that locks an
// op's variables, grants or queues its accesses, and on release grants what
// waits behind them; with the direct path (an inline_ok op run on its
// pusher without a record), which is made of them. EngineCore's inline
// members, here so that Engine's side of the direct path (engine.cpp) and
// the core (engine_core.cpp) both inline them. Internal.
#pragma once

#include "engine_core.hpp"

namespace ordo::detail {

/// The op's i-th access node, set for `spec` and not yet queued.
inline AccessNode* link_access(OpRecord* op, std::size_t i, const AccessSpec& spec) noexcept {
  AccessNode* a = &op->access[i];
  a->op = op;
  a->next = nullptr;
  a->set(spec.var, spec.write);
  return a;
}

inline std::size_t EngineCore::gather(VarSpan reads, VarSpan writes, AccessSpec* out, const EngineCore* owner) {
  std::size_t n = 0;
  for (const Var& v : writes) out[n++] = AccessSpec{owner->checked_record(v), VarRecord::gen_of(v), true};
  for (const Var& v : reads) out[n++] = AccessSpec{owner->checked_record(v), VarRecord::gen_of(v), false};
  return n;
}

inline void EngineCore::prepare(OpRecord* op, Context ctx, std::size_t n, const OpAttrs& attrs) {
  op->engine = this;
  op->ctx = ctx;
  op->prop = attrs.prop;
  op->priority = attrs.priority;
  op->name = attrs.name;
  op->always_run = attrs.always_run;
  op->error_to_awaiter = attrs.error_to_awaiter;
  if (attrs.inline_ok) op->traits |= kRunsOnPusher;
  op->n_access = static_cast<std::uint16_t>(n);
  if (n > static_cast<std::size_t>(kInlineAccess)) op->access = access_alloc(n);
}

inline Direct EngineCore::begin_direct(DirectRun& run, Context ctx, const AccessSpec* specs, std::size_t n,
                                       const OpAttrs& attrs, OperatorRecord* oper,
                                       std::uint64_t oper_gen) noexcept {
  // Grant every access now or none: all variables locked (the push's atomic
  // step), each one free for this access and carrying no live error (a
  // skip), and no handle stale (the usual push throws for it). The list is
  // as the caller gave it (sorting costs more than the rest of the push; an
  // operator's copy may be stale), so it is locked without waiting: never
  // waiting while holding a lock, whatever the order. A variable listed
  // twice fails its second try: the usual push merges the two.
  if (lock_vars<true>(specs, n, [this](const AccessSpec& a) { return grantable(a); }) != n) {
    return Direct::normalized;
  }
  if (oper != nullptr) {
    // Still the operator the handle names (delete_operator bumps `gen`
    // before it takes specs[0]'s lock): then the copy was its list and
    // specs[0] its access[0]. Counted while that lock is held.
    if (oper->gen.load(std::memory_order_relaxed) != oper_gen) {
      unlock_vars(specs, n);
      return Direct::normalized;
    }
    ++oper->direct_runs;
    run.oper = oper;
  }
  grant_all(specs, n, nullptr, /*unlock=*/true);  // the direct path: no record
  ThreadState& ts = t_state;
  run.specs = specs;
  run.n = static_cast<std::uint32_t>(n);
  run.ctx = ctx;
  run.error_to_awaiter = attrs.error_to_awaiter;
  run.self = RunningOp{this, attrs.name};
  run.outer = ts.running;
  ts.running = &run.self;
  ts.depth = 1;
  return Direct::granted;
}

inline void EngineCore::end_direct(DirectRun& run, ErrorRecord* own) noexcept {
  ThreadState& ts = t_state;
  ts.running = run.outer;
  // complete() for an op without a record: release the accesses, hand the
  // ops they make ready on (none, unless another thread pushed behind this
  // one meanwhile), then run what the body left to run after it (the naive
  // engine's posts and pushes from inside an op).
  ReadyList ready;
  bool release_oper = false;
  release_all<false>(run.specs, run.n, run.error_to_awaiter ? nullptr : own, ready, nullptr,
                     [&](std::size_t i, VarRecord*) {
                       if (i == 0 && run.oper != nullptr) [[unlikely]] {
                         // Guarded by this lock (specs[0] is the operator's access[0]).
                         if (--run.oper->direct_runs == 0 && run.oper->release_deferred) {
                           run.oper->release_deferred = false;
                           release_oper = true;
                         }
                       }
                       return true;
                     });
  release(own);
  stats_.count_completed(1);  // a direct run is never in the in-flight count
  if (release_oper) [[unlikely]] release_operator(run.oper);  // deleted while this body ran
  if (!ready.empty() || !ts.inline_ops.empty()) [[unlikely]] {
    const Call call(this);
    dispatch_ready(ready);
    drain_inline(ts);
  }
  ts.depth = 0;
}

// ---------------------------------------------------------------------------
// Grants: the one place that locks an op's variables, grants or queues its
// accesses, and on release grants what waits and collects the ops made ready.

template <bool TryOnly, class Check>
inline std::size_t EngineCore::lock_vars(const AccessSpec* specs, std::size_t n, Check&& check) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    VarRecord* v = specs[i].var;
    if constexpr (TryOnly) {
      if (!v->lock.try_lock()) {
        unlock_vars(specs, i);
        return i;
      }
    } else {
      v->lock.lock();
    }
    if (!check(specs[i])) [[unlikely]] {
      unlock_vars(specs, i + 1);
      return i;
    }
  }
  return n;
}

inline void EngineCore::unlock_vars(const AccessSpec* specs, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) specs[i].var->lock.unlock();
}

inline bool EngineCore::grantable(const AccessSpec& spec) const noexcept {
  const VarRecord* v = spec.var;
  // A graph's kept access makes a write wait here: the usual push takes it back.
  return v->gen == spec.gen && v->free_for(spec.write) && !live(v->error);
}

inline void EngineCore::grant_all(const AccessSpec* specs, std::size_t n, const OpRecord* by, bool unlock) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    specs[i].var->grant(specs[i].write, by);
    if (unlock) specs[i].var->lock.unlock();
  }
}

inline std::int32_t EngineCore::grant_or_queue(OpRecord* op, const AccessSpec* specs, std::size_t n,
                                               bool is_delete) noexcept {
  return grant_or_queue(op, specs, n, is_delete, [this, op](std::size_t, VarRecord* v) {
    if (live(v->error)) inherit(op, v->error);
  });
}

template <class Granted>
inline std::int32_t EngineCore::grant_or_queue(OpRecord* op, const AccessSpec* specs, std::size_t n, bool is_delete,
                                               Granted&& on_grant) noexcept {
  std::int32_t granted = 0;
  for (std::size_t i = 0; i < n; ++i) {
    VarRecord* v = specs[i].var;
    AccessNode* a = link_access(op, i, specs[i]);
    if (is_delete) {
      ++v->gen;  // every handle to v is stale from now on
      v->deleted = true;
    }
    // A graph's kept access (VarKeeper) is taken back before anything
    // queues behind it; a read is granted beside a kept read.
    if (!v->free_for(a->write()) && v->keeper != nullptr) [[unlikely]] unkeep(v);
    if (v->free_for(a->write())) {
      v->grant(a->write(), op);
      on_grant(i, v);
      ++granted;
    } else if (v->tail != nullptr) {
      v->tail->next = a;
      v->tail = a;
    } else {
      v->head = v->tail = a;
    }
  }
  return granted;
}

inline VarRecord* var_of(const AccessNode& a) noexcept { return a.var(); }
inline bool write_of(const AccessNode& a) noexcept { return a.write(); }
inline VarRecord* var_of(const AccessSpec& a) noexcept { return a.var; }
inline bool write_of(const AccessSpec& a) noexcept { return a.write; }

template <bool Profiled, class Access, class UnderLock>
inline void EngineCore::release_all(const Access* list, std::size_t n, ErrorRecord* outcome, ReadyList& ready,
                                    const OpRecord* by, UnderLock&& under_lock) {
  for (std::size_t i = 0; i < n; ++i) {
    VarRecord* v = var_of(list[i]);
    v->lock.lock();
    v->release_access(write_of(list[i]), outcome);
    if (under_lock(i, v)) grant_waiting<Profiled>(v, ready, by);
    v->lock.unlock();
  }
}

template <bool Profiled>
void EngineCore::grant_waiting(VarRecord* v, ReadyList& ready, [[maybe_unused]] const OpRecord* by) {
  auto grant = [&](AccessNode* a) {
    v->head = a->next;
    if (v->head == nullptr) v->tail = nullptr;
    OpRecord* op = a->op;
    if ((op->traits & kHolder) != 0) [[unlikely]] {
      const auto* hooks = static_cast<const HolderHooks*>(op->aux);
      hooks->granted(hooks, static_cast<std::size_t>(a - op->access), v, ready, false);
      return;
    }
    if (live(v->error)) inherit(op, v->error);
    // acq_rel: the thread that reaches zero sees every other grant's writes.
    if constexpr (Profiled) {
      if (prof_->on_grant_access(by, op, v)) ready.push(op);  // the same decrement, and the edge
    } else if (op->wait.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      ready.push(op);
    }
  };
  // The head, and the reads right behind a granted read.
  while (v->head != nullptr && v->compatible(v->head->write())) {
    const bool write = v->head->write();
    v->grant(write, v->head->op);
    grant(v->head);
    if (write) return;
  }
}

}  // namespace ordo::detail

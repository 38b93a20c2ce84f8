// src/core/engine_core.cpp - dependency tracking, dispatch and completion.
#include "engine_core.hpp"

#include "grants.hpp"

#include "ordo/error_code.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <type_traits>

namespace ordo::detail {

namespace {

constexpr std::size_t kVarChunk = 1024;

std::string op_label(const char* name) {
  return name != nullptr ? std::string("op '") + name + "'" : std::string("an unnamed op");
}

/// State of a thread blocked in wait_for_var. The signal is given under the
/// mutex so the waiter cannot return (and destroy this) before it is done.
struct VarWaiter {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  ErrorRecord* error = nullptr;  ///< owned ref to the variable's error, if any

  void signal() {
    std::lock_guard lock(mutex);
    done = true;
    cv.notify_one();
  }
  void wait() {
    std::unique_lock lock(mutex);
    cv.wait(lock, [this] { return done; });
  }
};

void cleanup_op(OpRecord* op) noexcept {
  op->fn.reset();
  if (op->oper != nullptr) op->oper->engine->release_operator(op->oper);
  op_free(op);
}

}  // namespace

// ---------------------------------------------------------------------------
// Construction and shutdown

EngineCore::EngineCore(Options options) : opts_(std::move(options)) {
  if (opts_.cpu_workers == 0) opts_.cpu_workers = usable_cpus();
  resume_at_ = static_cast<std::int64_t>(opts_.max_in_flight / 2);
  if (opts_.profile.enabled) {
    prof_storage_ = std::make_unique<ProfilerCore>(opts_.profile, this);
    prof_ = prof_storage_.get();
  }
  kind_ = EngineKindPolicy::make(*this, opts_);  // last: its workers may look at the engine at once
  serial_ = kind_->serial();
}

EngineCore::~EngineCore() {
  {
    std::lock_guard lock(keepers_->mutex);
    keepers_->closed = true;
  }
  for (auto& chunk : var_chunks_) {
    for (std::size_t i = 0; i < kVarChunk; ++i) release(chunk[i].error);
  }
  for (ErrorRecord* e : errors_) release(e);
  for (auto& rec : oper_storage_) rec.fn.reset();
}

bool EngineCore::all_idle() const noexcept { return kind_->idle(); }

bool EngineCore::shutdown() noexcept {
  using clock = std::chrono::steady_clock;
  bool abandoned = false;
  std::int64_t stuck = 0;
  {
    std::unique_lock lock(idle_mutex_);
    idle_waiters_.fetch_add(1, std::memory_order_seq_cst);
    std::int64_t last = in_flight_.load(std::memory_order_seq_cst);
    auto quiet_since = clock::now();
    bool told = false;
    while (in_flight_.load(std::memory_order_seq_cst) != 0) {
      idle_cv_.wait_for(lock, std::chrono::milliseconds(20));
      const std::int64_t now_in_flight = in_flight_.load(std::memory_order_seq_cst);
      // Progress is possible while any worker runs or has queued work; only
      // when all are idle can the remaining ops be waiting on completions
      // that never come.
      if (now_in_flight != last || !all_idle()) {
        last = now_in_flight;
        quiet_since = clock::now();
        continue;
      }
      if (opts_.shutdown_timeout.count() > 0 && clock::now() - quiet_since >= opts_.shutdown_timeout) {
        abandoned = true;
        stuck = now_in_flight;
        break;
      }
      if (!told && clock::now() - quiet_since >= kStuckNotice) {
        // Say what the wait is for, once, and keep waiting as configured.
        told = true;
        lock.unlock();
        const std::string what = pending_ops().describe(8);
        const std::string limit = opts_.shutdown_timeout.count() > 0
                                      ? "up to shutdown_timeout (" + std::to_string(opts_.shutdown_timeout.count()) +
                                            " ms) without progress, then abandons them"
                                      : "for ever (shutdown_timeout is 0)";
        std::fprintf(stderr,
                     "ordo: the engine's destructor is waiting for %lld op(s) that make no progress%s%s; it waits %s\n",
                     static_cast<long long>(now_in_flight), what.empty() ? "" : ": ", what.c_str(), limit.c_str());
        lock.lock();
      }
    }
    idle_waiters_.fetch_sub(1, std::memory_order_seq_cst);
  }

  std::vector<ErrorReport> reports;
  {
    std::lock_guard lock(error_mutex_);
    for (ErrorRecord* e : errors_) {
      if (!e->observed.load(std::memory_order_acquire)) reports.push_back(ErrorReport::from(e->op_name, e->exception));
    }
  }
  if (abandoned) {
    // One report per op found holding a variable, by name; the ops queued
    // behind them, and any the variables do not show, in the count.
    const std::string why = "engine destroyed with " + std::to_string(stuck) +
                            " op(s) in flight: still holding its variables after shutdown_timeout; abandoned";
    const PendingOps pending = pending_ops();
    const std::error_code code = make_error_code(Errc::shutdown_abandoned);
    for (const std::string& name : pending.holder_names) reports.push_back({name, why, code});
    if (pending.holder_names.empty()) {
      reports.push_back({"",
                         "engine destroyed with " + std::to_string(stuck) +
                             " op(s) still waiting for async completions after shutdown_timeout; abandoned",
                         code});
    }
  }
  for (const auto& r : reports) {
    try {
      if (opts_.on_unobserved_error) {
        opts_.on_unobserved_error(r);
      } else {
        std::fprintf(stderr, "ordo: unobserved error from %s: %s\n",
                     r.op_name.empty() ? "an unnamed op" : ("op '" + r.op_name + "'").c_str(), r.message.c_str());
      }
    } catch (...) {
      // The destructor never throws; a failing reporter has nowhere to go.
    }
  }

  kind_->stop_and_join();
  return !abandoned;
}

std::string EngineCore::PendingOps::describe(std::size_t most) const {
  std::string out;
  for (std::size_t i = 0; i < lines.size() && i < most; ++i) out += (i == 0 ? "" : "; ") + lines[i];
  if (lines.size() > most) out += "; and " + std::to_string(lines.size() - most) + " more";
  return out;
}

EngineCore::PendingOps EngineCore::pending_ops() {
  PendingOps out;
  const std::lock_guard chunks(var_mutex_);
  for (std::size_t c = 0; c < var_chunks_.size(); ++c) {
    const std::size_t used = c + 1 == var_chunks_.size() ? var_chunk_used_ : kVarChunk;
    for (std::size_t i = 0; i < used; ++i) {
      VarRecord* v = &var_chunks_[c][i];
      const std::lock_guard lock(v->lock);  // a writer completes under it: its record stays put
      // A graph's kept access holds nothing up (a push takes it back).
      if (v->keeper != nullptr &&
          v->keeper->state[v->keep_index].load(std::memory_order_relaxed) == VarKeeper::kKept) {
        continue;
      }
      const std::string var = "var " + std::to_string(v->id);
      if (v->write_running && v->writer != nullptr) {
        out.lines.push_back(op_label(v->writer->name) + " holds " + var);
        if (v->writer->name != nullptr) out.holder_names.emplace_back(v->writer->name);
      } else if (v->running_reads > 0) {
        out.lines.push_back(std::to_string(v->running_reads) + " read(s) hold " + var);
      }
      if (v->head != nullptr) out.lines.push_back(op_label(v->head->op->name) + " waits for " + var);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// Variables

Var EngineCore::new_variable() {
  std::lock_guard lock(var_mutex_);
  VarRecord* v = var_free_;
  if (v != nullptr) {
    var_free_ = v->free_next;
    v->free_next = nullptr;
  } else {
    if (var_chunks_.empty() || var_chunk_used_ == kVarChunk) {
      var_chunks_.emplace_back(new VarRecord[kVarChunk]);  // its initialisers, not a memset before them
      var_chunk_used_ = 0;
    }
    v = &var_chunks_.back()[var_chunk_used_];
    v->engine = this;
    v->id = static_cast<std::uint32_t>((var_chunks_.size() - 1) * kVarChunk + var_chunk_used_);
    ++var_chunk_used_;
  }
  return VarRecord::handle(v);
}

void EngineCore::bad_record(const Var& var) const {
  if (var.empty()) throw Error(Errc::empty_var, "an empty (default-constructed) Var was used");
  throw Error(Errc::foreign_var, "var " + std::to_string(var.id()) + " belongs to another engine");
}

std::uint64_t EngineCore::var_version(Var var) {
  VarRecord* v = checked_record(var);
  std::lock_guard lock(v->lock);
  if (v->gen != VarRecord::gen_of(var)) {
    throw Error(Errc::deleted_var, "var_version: var " + std::to_string(var.id()) + " was deleted");
  }
  std::uint64_t version = v->version;
  // Writes of replays whose access a graph still holds (VarKeeper) are complete.
  if (v->keeper != nullptr) version += v->keeper->slots[v->keep_index].writes.load(std::memory_order_relaxed);
  return version;
}

void EngineCore::recycle_var(VarRecord* v) noexcept {
  {
    std::lock_guard lock(v->lock);
    release(v->error);
    v->error = nullptr;
    v->version = 0;
    v->deleted = false;
  }
  std::lock_guard lock(var_mutex_);
  v->free_next = var_free_;
  var_free_ = v;
}

// ---------------------------------------------------------------------------
// Pushing

std::size_t EngineCore::normalize(VarSpan reads, VarSpan writes, AccessSpec* out, const EngineCore* owner) {
  const std::size_t n = gather(reads, writes, out, owner);
  if (n <= 1) return n;  // the common single-variable push: nothing to sort or merge
  return sort_merge(out, n);
}

std::size_t EngineCore::sort_merge(AccessSpec* out, std::size_t n) {
  auto less = [](const AccessSpec& a, const AccessSpec& b) { return std::less<>{}(a.var, b.var); };
  if (n <= 16) {
    for (std::size_t i = 1; i < n; ++i) {
      AccessSpec x = out[i];
      std::size_t j = i;
      for (; j > 0 && less(x, out[j - 1]); --j) out[j] = out[j - 1];
      out[j] = x;
    }
  } else {
    std::sort(out, out + n, less);
  }
  // Merge duplicates: a variable read and written counts as written.
  std::size_t m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (m > 0 && out[m - 1].var == out[i].var) {
      if (out[m - 1].gen != out[i].gen) {
        throw Error(Errc::deleted_var, "var " + std::to_string(out[i].var->id) + " was deleted (stale handle)");
      }
      out[m - 1].write = out[m - 1].write || out[i].write;
    } else {
      out[m++] = out[i];
    }
  }
  return m;
}

void EngineCore::inherit(OpRecord* op, ErrorRecord* e) const noexcept {
  ErrorRecord* expected = nullptr;
  retain(e);
  // acq_rel: the dispatcher (acquire on `wait`) then also sees the record.
  if (!op->error.compare_exchange_strong(expected, e, std::memory_order_acq_rel)) release(e);
}

void EngineCore::throttle() {
  const ThreadState& ts = t_state;
  // Never block a thread the engine needs to make progress.
  if (ts.running != nullptr || ts.engine == this) return;
  const auto bound = static_cast<std::int64_t>(opts_.max_in_flight);
  const std::int64_t held = held_back_count();
  if (held < bound) return;
  // After a stall (below) pushers go on up to one more bound's worth of ops,
  // then wait again: at most `bound` ops more per kStallPatience.
  if (held < stall_limit_.load(std::memory_order_relaxed)) return;
  std::unique_lock lock(idle_mutex_);
  throttle_waiters_.fetch_add(1, std::memory_order_seq_cst);
  // Wait for half the bound to drain, while the engine makes progress
  // without this thread: every worker idle with ops still in flight, or no
  // op finished for kStallPatience, means that what is in flight waits for
  // something outside the engine, perhaps for this very thread.
  std::int64_t last = in_flight_.load(std::memory_order_seq_cst);
  std::int64_t limit = 0;  // drained (or all idle): no stall
  for (;;) {
    if (held_back_count() <= resume_at_ || all_idle()) break;
    if (idle_cv_.wait_for(lock, kStallPatience) == std::cv_status::timeout) {
      const std::int64_t now = in_flight_.load(std::memory_order_seq_cst);
      if (now == last) {
        limit = held_back_count() + bound;
        break;
      }
      last = now;
    }
  }
  stall_limit_.store(limit, std::memory_order_relaxed);
  throttle_waiters_.fetch_sub(1, std::memory_order_seq_cst);
}

void EngineCore::worker_idle() noexcept {
  // A worker found no work and is about to sleep: a throttled pusher may have
  // to go on (every worker idle, see throttle()). Called on workers only.
  if (throttle_waiters_.load(std::memory_order_seq_cst) > 0) wake_idle_waiters();
}

void EngineCore::wake_idle_waiters() noexcept {
  // Only where the engine outlives the call (workers, pushers). Passing
  // through the mutex orders this wake-up after a waiter's check of the
  // count (it checks under the mutex), so none is lost; notifying after the
  // unlock keeps a woken waiter from preempting this thread only to block on
  // the mutex it still holds and be woken a second time by the unlock.
  { const std::lock_guard lock(idle_mutex_); }
  idle_cv_.notify_all();
}

void EngineCore::push(OpRecord* op, Context ctx, VarSpan reads, VarSpan writes, const OpAttrs& attrs) {
  if (attrs.prop == FnProperty::delete_var) [[unlikely]] {
    throw Error(Errc::invalid_argument, "FnProperty::delete_var is reserved for delete_variable");
  }
  const std::size_t n = reads.size() + writes.size();
  if (n > kPushLocal) [[unlikely]] {
    std::vector<AccessSpec> heap(n);
    submit(op, ctx, heap.data(), normalize(reads, writes, heap.data(), this), attrs);
    return;
  }
  AccessSpec specs[kPushLocal];
  gather(reads, writes, specs, this);
  enter(op, ctx, specs, n, attrs);
}

void EngineCore::submit(OpRecord* op, Context ctx, const AccessSpec* specs, std::size_t n, const OpAttrs& attrs) {
  enter(op, ctx, specs, n, attrs);
}

template <class Spec>
void EngineCore::enter(OpRecord* op, Context ctx, Spec* specs, std::size_t n, const OpAttrs& attrs) {
  // A list the push gathered itself (not const) is in the caller's order,
  // perhaps with a variable twice; a const one is normalised already.
  constexpr bool kGathered = !std::is_const_v<Spec>;
  // One compare for every good id: a negative one wraps above kMaxDevices.
  if (static_cast<std::uint32_t>(ctx.device_id) >= static_cast<std::uint32_t>(kMaxDevices) &&
      (ctx.device_id < 0 || ctx.is_gpu())) [[unlikely]] {
    throw Error(Errc::invalid_argument,
                "push of " + op_label(attrs.name) + ": bad device id " + std::to_string(ctx.device_id));
  }
  if (n > kMaxAccess) throw Error(Errc::invalid_argument, "push of " + op_label(attrs.name) + ": too many variables");
  const bool is_delete = attrs.prop == FnProperty::delete_var;
  if constexpr (kGathered) {
    if (prof_ != nullptr && n > 1) [[unlikely]] n = sort_merge(specs, n);  // the profiler records the merged list
  }

  prepare(op, ctx, n, attrs);
  op->wait.store(static_cast<std::int32_t>(n + 1), std::memory_order_relaxed);

  if (op->kind < OpKind::wait_var && over_bound()) {
    throttle();
  }
  if (prof_ != nullptr) [[unlikely]] prof_->on_push(op, specs, n);

  // Every variable locked (the whole push is one atomic step with respect
  // to every other push), none stale, then each access granted or queued.
  // A gathered list is locked in its own order without waiting (never
  // waiting while holding a lock, whatever the order): no sort for the
  // common push. A busy lock, a variable listed twice or a stale handle
  // sends it the usual way: sorted, merged, locked in address order.
  const auto same_gen = [](const AccessSpec& a) { return a.var->gen == a.gen; };
  std::size_t locked = 0;
  if constexpr (kGathered) {
    locked = lock_vars<true>(specs, n, same_gen);
    if (locked != n) [[unlikely]] {
      if (const std::size_t m = n > 1 ? sort_merge(specs, n) : n; m != n) {
        access_shrink(op, m);
        op->wait.store(static_cast<std::int32_t>(m + 1), std::memory_order_relaxed);
        n = m;
      }
      locked = lock_vars<false>(specs, n, same_gen);
    }
  } else {
    locked = lock_vars<false>(specs, n, same_gen);
  }
  if (locked != n) [[unlikely]] {
    if (prof_ != nullptr) prof_->on_push_failed(op);
    throw Error(Errc::deleted_var,
                "push of " + op_label(attrs.name) + ": var " + std::to_string(specs[locked].var->id) + " was deleted");
  }
  const std::int32_t granted = grant_or_queue(op, specs, n, is_delete);
  // An op that runs to completion inside this push is never seen by another
  // thread as in flight (a wait on another thread is not ordered with this
  // push), so it is not counted: no locked add here and subtract at the end.
  // Every other op is counted before the unlock that makes it reachable.
  // Ready at push with no fence gate to ask: placed now, once. A sync op
  // placed here runs to completion before the push returns.
  const bool ready = granted == static_cast<std::int32_t>(n);
  const bool placed = ready && gate_.load(std::memory_order_relaxed) == nullptr;
  const Placement at = placed ? place(op, Origin::push) : Placement{Place::queue};
  const bool here = placed && at.where == Place::now && op->kind < OpKind::wait_var && !op_fn(op).is_async();
  op->counted = !here;
  if (!here) in_flight_.fetch_add(1, std::memory_order_relaxed);
  unlock_vars(specs, n);

  if (!ready && op->wait.fetch_sub(granted + 1, std::memory_order_acq_rel) != granted + 1) return;  // queued
  if (placed && at.where == Place::queue) {
    at.pool->enqueue(op);  // to a worker: nothing runs here
    return;
  }
  // From here the op may run on this thread: ops it finishes count in this call.
  const Call call(this);
  if (placed) {
    run_at(op, at);
  } else {
    dispatch(op, Origin::push);  // all granted here: nobody else can have touched `wait`
  }
}

// ---------------------------------------------------------------------------
// The direct path (detail::DirectRun): an inline_ok op without an op record

bool EngineCore::recordless(Context ctx, std::size_t n) const noexcept {
  // What a push without an op record can do: grant a CPU op's few
  // variables (DirectRun::kMaxAccess, on the stack) where no profiler names
  // ops by their record and no fence gate holds records.
  return !ctx.is_gpu() && ctx.device_id >= 0 && n <= DirectRun::kMaxAccess && prof_ == nullptr &&
         gate_.load(std::memory_order_relaxed) == nullptr;
}

bool EngineCore::direct_allowed(Context ctx, const OpAttrs& attrs, std::size_t n) const noexcept {
  // Where place() runs the op on its pusher at once, the direct path runs it
  // without a record: outside any op (it keeps the thread's op depth itself)
  // and under the in-flight bound (a push over it waits first, in submit()).
  if (!attrs.inline_ok || !recordless(ctx, n)) return false;
  const ThreadState& ts = t_state;
  if (ts.depth != 0 || ts.engine != nullptr) return false;
  if (place(OpShape{OpKind::fn, kRunsOnPusher, attrs.prop, ctx, false}, Origin::push).where != Place::now) {
    return false;
  }
  return !over_bound();
}

bool EngineCore::lease_direct_allowed(Context ctx, const OpAttrs& attrs, std::uint8_t traits,
                                      std::size_t n) const noexcept {
  // A lease's push runs no user code (it publishes the grant): where
  // place() would run it at once, its variables may be granted here with
  // no body and no record; the coroutine goes on with its lease, on the
  // thread it is on.
  return recordless(ctx, n) && place(OpShape{OpKind::fn, traits, attrs.prop, ctx, false}, Origin::push).where == Place::now;
}

bool EngineCore::inline_ok_decides(Context ctx, const OpAttrs& attrs) const noexcept {
  const OpShape with{OpKind::fn, kRunsOnPusher, attrs.prop, ctx, false};
  OpShape without = with;
  without.traits = kNoTraits;
  return place(with, Origin::push).where == Place::now && place(without, Origin::push).where != Place::now;
}

bool EngineCore::inline_at_io(Context ctx, const OpAttrs& attrs, const IoSite& site) const noexcept {
  if (!inline_ok_decides(ctx, attrs)) return false;
  const OpShape at_io{OpKind::fn, kRunsOnPusher, attrs.prop, ctx, false, &site};
  return place(at_io, Origin::push).where == Place::now;
}

bool EngineCore::io_runs_here(const IoSite& io) const noexcept {
  if (io.cost_ns < 0 || io.cost_ns > kInlineCostLimitNs) return false;
  return io.cost_ns <= kTrivialCostNs || (in_flight_.load(std::memory_order_relaxed) == 0 && !io.pending);
}

bool EngineCore::grant_lease_now(OpRecord* op, const AccessSpec* specs, std::size_t n) noexcept {
  // All variables locked in address order (the push's atomic step), each one
  // free for this access and carrying no live error, or nothing is granted.
  if (lock_vars<false>(specs, n, [this](const AccessSpec& a) { return grantable(a); }) != n) return false;
  // The (prepared) record as submit() then execute() would leave it: every
  // access granted (not queued), counted in flight before the unlock that
  // makes it reachable, its body started (a held lease does not count
  // against the in-flight bound).
  op->kind = OpKind::fn;
  op->wait.store(0, std::memory_order_relaxed);
  for (std::size_t i = 0; i < n; ++i) link_access(op, i, specs[i]);
  grant_all(specs, n, op, /*unlock=*/false);
  op->counted = true;
  in_flight_.fetch_add(1, std::memory_order_relaxed);
  op->async_started = true;
  async_started_.fetch_add(1, std::memory_order_relaxed);
  unlock_vars(specs, n);
  return true;
}

// ---------------------------------------------------------------------------
// Operators

OperatorRecord* EngineCore::alloc_operator() {
  std::lock_guard lock(oper_mutex_);
  OperatorRecord* rec = oper_free_;
  if (rec != nullptr) {
    oper_free_ = rec->free_next;
    rec->free_next = nullptr;
  } else {
    rec = &oper_storage_.emplace_back();
    rec->engine = this;
  }
  return rec;
}

void EngineCore::free_operator(OperatorRecord* rec) noexcept {
  rec->fn.reset();
  rec->access.clear();
  rec->name.clear();
  std::lock_guard lock(oper_mutex_);
  rec->free_next = oper_free_;
  oper_free_ = rec;
}

void EngineCore::release_operator(OperatorRecord* rec) noexcept {
  if (rec->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) free_operator(rec);
}

void EngineCore::retire_operator(OperatorRecord* rec) noexcept {
  if (rec->direct_n.load(std::memory_order_relaxed) != 0) {
    // After the bump of `gen`: a direct run that checks it under this lock
    // from now on fails; one counted before holds the record (its body may
    // still be running), and the last of them drops the handle's reference.
    VarRecord* first = rec->access[0].var;
    std::lock_guard lock(first->lock);
    if (rec->direct_runs != 0) {
      rec->release_deferred = true;
      return;
    }
  }
  release_operator(rec);
}

// ---------------------------------------------------------------------------
// Dispatch and execution

bool EngineCore::on_worker_of(Context ctx) const noexcept {
  const ThreadState& ts = t_state;
  if (ts.engine != this || ts.pool == nullptr || ts.completion_thread || ctx.is_gpu()) return false;
  return ts.pool == kind_->cpu();  // normal CPU ops run there with the pooled and per-device engines
}

void EngineCore::run_now(OpRecord* op) {
  ThreadState& ts = t_state;
  if (ts.depth > 0) {
    op->engine->execute(op);  // nested in a running op (a push from its body): the outer loop drains
    return;
  }
  ts.depth = 1;
  op->engine->execute(op);
  drain_inline(ts);
  ts.depth = 0;
}

void EngineCore::drain_inline(ThreadState& ts) {
  while (!ts.inline_ops.empty()) {
    OpRecord* next = ts.inline_ops.pop();
    next->engine->execute(next);
  }
}

void EngineCore::run_later(OpRecord* op) {
  ThreadState& ts = t_state;
  if (ts.depth == 0) {
    run_now(op);
    return;
  }
  // Already running ops on this thread: run it after the current one (a
  // trampoline, so completion cascades never deepen the stack).
  ts.inline_ops.push(op);
}

bool EngineCore::fence_hold(FenceGate* gate, OpRecord* op) {
  // Cold: only with a gate installed (ordo/fence.hpp). Posts have no variables.
  if ((op->traits & kFenceExempt) != 0 || op->kind == OpKind::posted) return false;
  if (op->fence_released) {
    op->fence_released = false;  // released by the gate: its fences were waited for
    return false;
  }
  for (std::uint16_t i = 0; i < op->n_access; ++i) {
    // acquire: a null written by the gate on another thread once the work
    // behind the fence finished (release) carries that work's writes here.
    if (op->access[i].var()->fence.load(std::memory_order_acquire) != nullptr) {
      return gate->hold(detail_fence_access::make(op));
    }
  }
  return false;
}

void EngineCore::release_held(OpRecord* op, std::exception_ptr error) {
  if (error) {
    ErrorRecord* e = make_error(std::move(error), op->name);
    inherit(op, e);
    release(e);
  }
  op->fence_released = true;  // consumed by fence_hold in this dispatch (the gate is installed)
  dispatch(op, Origin::completion);
}

namespace {
// place() reads an op's record or the shape of a push without one alike.
bool skipped(const OpShape& op) noexcept { return op.skipped; }
bool skipped(const OpRecord& op) noexcept {
  return op.error.load(std::memory_order_relaxed) != nullptr && !op.always_run;
}
const IoSite* io_site(const OpShape& op) noexcept { return op.io; }
const IoSite* io_site(const OpRecord& /*op*/) noexcept { return nullptr; }
}  // namespace

Placement EngineCore::place(const OpRecord* op, Origin origin) const { return place_of(*op, origin); }

Placement EngineCore::place(const OpShape& op, Origin origin) const { return place_of(op, origin); }

template <class Op>
Placement EngineCore::place_of(const Op& op, Origin origin) const {
  const ThreadState& ts = t_state;
  const bool at_push = origin == Origin::push;
  // Bookkeeping (no user code) runs at once and is never deferred: the
  // waiting thread may be the one that would run the deferred list.
  if (op.kind == OpKind::wait_var) return {Place::now};
  if (op.kind == OpKind::posted) {
    // Never on the posting thread; naive, posted from inside one of its
    // ops (not on a completion thread): right after that op.
    const bool after_op = serial_ && ts.depth > 0 && !ts.completion_thread && (ts.engine == this || ts.engine == nullptr);
    if (after_op) return {Place::next};
    return {Place::queue, route(op)};
  }
  if (serial_) {
    // On the thread that pushes or completes, except a completion thread,
    // which never runs user code (route(): the naive engine's helper).
    if (!at_push && ts.completion_thread) return {Place::queue, route(op)};
    return {at_push ? Place::now : Place::next};
  }
  if (skipped(op)) {
    // Skipped: bookkeeping, but destroying the body may resume a coroutine:
    // made ready by a completion on a thread that is not a worker, it goes to one.
    if (!at_push && ts.engine != this) return {Place::queue, route(op)};
    return {at_push ? Place::now : Place::next};
  }
  if (at_push) {
    // An op that asked for it (OpTraits::kRunsOnPusher) runs on its pusher,
    // like a call; no other op ever does. Pushed from an io thread, its
    // cost decides too (io_runs_here).
    if (pusher_runs(op.traits, ts)) {
      const IoSite* io = io_site(op);
      if (io == nullptr || io_runs_here(*io)) return {Place::now};
    }
  } else if ((op.traits & kNoUserCode) != 0 && ts.completion_thread && ts.running == nullptr && !ts.launching) {
    // Made ready by a delivery (a reaper's, or a worker's that waited in an
    // idle ring), outside any op body: it starts its request inside the
    // delivery loop, which then submits it with the rest of its batch.
    return {Place::launch};
  }
  // A normal CPU op goes to the kind's CPU pool (no call to route()).
  WorkerPool* const pool =
      op.prop == FnProperty::normal && !op.ctx.is_gpu() && kind_->cpu() != nullptr ? kind_->cpu() : route(op);
  if (ts.engine != this) return {Place::queue, pool};  // a pusher, or a thread that completes from outside
  // On a worker of this engine.
  if (op.prop == FnProperty::async) return {at_push ? Place::now : Place::next};  // a launcher: no queue hop
  if (ts.pool == pool && !pool->is_priority() && ts.continuations < kPeriodOps &&
      (ts.running == nullptr || origin == Origin::finished) && ts.inline_ops.empty()) {
    // Its continuation: the first op released by the op this worker just
    // finished runs next here (no queue, no wake-up, its data in this
    // core's cache). Only one, and only once the body has returned: every
    // other ready op goes to a deque, where an idle worker can take it.
    return {Place::chain};
  }
  return {Place::queue, pool};
}

std::uint32_t EngineCore::continuations_here(const OpShape& op) const {
  if (place_of(op, Origin::finished).where != Place::chain) return 0;
  return kPeriodOps - t_state.continuations;
}

void EngineCore::continued(std::uint32_t n) noexcept { t_state.continuations += n; }

void EngineCore::dispatch(OpRecord* op, Origin origin, QueueBatch* batch) {
  if (FenceGate* gate = gate_.load(std::memory_order_relaxed); gate != nullptr) [[unlikely]] {
    if (fence_hold(gate, op)) return;
  }
  run_at(op, place(op, origin), batch);
}

void EngineCore::dispatch_ready(const ReadyList& ready) {
  QueueBatch batch;  // flushed when this returns
  for (OpRecord* r = ready.head; r != nullptr;) {
    OpRecord* next = r->next;
    dispatch(r, Origin::completion, &batch);
    r = next;
  }
}

void EngineCore::run_at(OpRecord* op, const Placement& at, QueueBatch* batch) {
  ThreadState& ts = t_state;
  switch (at.where) {
    case Place::now:
      run_now(op);
      return;
    case Place::next:
      run_later(op);
      return;
    case Place::chain:
      ++ts.continuations;
      run_later(op);
      return;
    case Place::launch:
      // One level deep: a launch that completes at once (a synchronous
      // failure) makes the next one ready the usual way.
      ts.launching = true;
      run_now(op);
      ts.launching = false;
      return;
    case Place::queue:
      if (batch != nullptr) {
        batch->add(at.pool, op);
      } else {
        at.pool->enqueue(op);
      }
      return;
  }
}

void EngineCore::execute(OpRecord* op) {
  if (prof_ != nullptr) [[unlikely]] prof_->on_start(op);
  ThreadState& ts = t_state;
  if (op->kind == OpKind::wait_var) {
    auto* waiter = static_cast<VarWaiter*>(op->aux);
    VarRecord* v = op->access[0].var();
    {
      std::lock_guard lock(v->lock);
      if (live(v->error)) {
        waiter->error = v->error;  // the variable's reference moves to the waiter: cleared
        v->error = nullptr;
      }
    }
    if (waiter->error == nullptr) {
      // A fence that failed (HeldOp::release with an error): the op's own reference.
      waiter->error = op->error.exchange(nullptr, std::memory_order_acq_rel);
    }
    complete(op, nullptr);
    waiter->signal();
    return;
  }
  if (op->error.load(std::memory_order_acquire) != nullptr && !op->always_run) {
    complete(op, nullptr);  // skipped: passes the inherited error on
    return;
  }
  const RunContext rc{op->ctx, nullptr, ts.engine == this ? ts.index : -1};
  OpFn& fn = op_fn(op);
  const char* name = op->name;
  const RunningOp self{this, name};
  const RunningOp* outer = ts.running;
  ts.running = &self;
  if (!fn.is_async()) {
    ErrorRecord* own = nullptr;
    // The completion locks these; their lines, last written by the pusher
    // (its enqueue) or another worker, arrive while the body runs.
    for (std::uint16_t i = 0; i < op->n_access; ++i) prefetch_for_write(op->access[i].var());
    try {
      fn.invoke_sync(rc);
    } catch (...) {
      own = make_error(std::current_exception(), name);
    }
    ts.running = outer;
    complete(op, own);
    return;
  }
  std::uint64_t gen = op->gen.load(std::memory_order_relaxed);
  [[maybe_unused]] const std::uint32_t prof_id = op->prof_id;  // the record may be recycled once completed
  op->body.store(1, std::memory_order_relaxed);
  op->async_started = true;
  async_started_.fetch_add(1, std::memory_order_relaxed);
  std::exception_ptr thrown;
  try {
    fn.invoke_async(rc, op->completion());
  } catch (...) {
    thrown = std::current_exception();
  }
  ts.running = outer;
  if (prof_ != nullptr) [[unlikely]] prof_->on_body_end(prof_id);
  // acq_rel pairs with the CAS in complete(): exactly one side frees the record.
  const std::uint8_t state = op->body.exchange(0, std::memory_order_acq_rel);
  if (thrown) {
    if (state != 2 && op->gen.compare_exchange_strong(gen, gen + 1, std::memory_order_acq_rel)) {
      complete(op, make_error(thrown, name));
    } else {
      report_late_error(thrown, name);  // it threw after completing: still reported
    }
  }
  if (state == 2) cleanup_op(op);
}

ErrorRecord* EngineCore::make_error(std::exception_ptr e, const char* op_name) {
  auto* rec = new ErrorRecord;
  rec->exception = std::move(e);
  rec->op_name = op_name != nullptr ? op_name : "";
  rec->epoch = error_epoch_.fetch_add(1, std::memory_order_relaxed) + 1;
  rec->refs.store(2, std::memory_order_relaxed);  // the engine's list + the caller
  std::lock_guard lock(error_mutex_);
  errors_.push_back(rec);
  return rec;
}

void EngineCore::report_late_error(std::exception_ptr e, const char* op_name) {
  release(make_error(std::move(e), op_name));
}

template <bool Profiled>
inline VarRecord* EngineCore::release_accesses(OpRecord* op, ErrorRecord* outcome, ReadyList& ready) {
  VarRecord* deleted = nullptr;
  // Last written by the pusher or another worker: ask for every line at once.
  for (std::uint16_t i = 0; i < op->n_access; ++i) prefetch_for_write(op->access[i].var());
  release_all<Profiled>(op->access, op->n_access, outcome, ready, op, [&](std::size_t, VarRecord* v) {
    if (v->deleted && op->prop == FnProperty::delete_var) {
      deleted = v;  // no access can follow a delete: the queue is empty
      return false;
    }
    return true;
  });
  return deleted;
}

VarRecord* EngineCore::release_accesses_profiled(OpRecord* op, ErrorRecord* own_error, ErrorRecord* outcome,
                                                 ReadyList& ready) {
  prof_->on_end(op, own_error);
  return release_accesses<true>(op, outcome, ready);
}

void EngineCore::complete(OpRecord* op, ErrorRecord* own_error) noexcept {
  const bool counted = op->counted;  // read before the record is recycled
  ErrorRecord* inherited = op->error.load(std::memory_order_acquire);
  ErrorRecord* outcome = own_error;
  if (outcome == nullptr && inherited != nullptr && !op->always_run) outcome = inherited;
  // What the variables keep: the outcome, except the op's own error under
  // OpAttrs::error_to_awaiter (its awaiter gets it; the writes count as made).
  ErrorRecord* const stored = own_error != nullptr && op->error_to_awaiter ? nullptr : outcome;

  if (op->async_started) {
    op->async_started = false;
    async_started_.fetch_sub(1, std::memory_order_relaxed);
  }
  ReadyList ready;
  VarRecord* deleted = nullptr;
  if (prof_ != nullptr) [[unlikely]] {
    deleted = release_accesses_profiled(op, own_error, stored, ready);
  } else {
    deleted = release_accesses<false>(op, stored, ready);
  }
  if (deleted != nullptr) recycle_var(deleted);

  // A skipped op's body is destroyed, never called; while it is destroyed,
  // Engine::skip_reason() names the error that skipped it (a reference kept
  // for that time: a layer may take its own, detail::ErrorRef::skipping).
  const bool skipped = own_error == nullptr && outcome != nullptr;
  ErrorRecord* const skip_error = skipped ? retain(outcome) : nullptr;
  // Every grant (the only other writer) happened before the dispatch: a load
  // and a store, not a locked exchange.
  if (inherited != nullptr) {
    op->error.store(nullptr, std::memory_order_relaxed);
    release(inherited);
  }
  // Its body's destructor takes it (with the reference), now or, for an
  // async body still on its executor's stack, when that one frees the record.
  if ((op->traits & kOutcomeToBody) != 0) [[unlikely]] op->error.store(retain(own_error), std::memory_order_relaxed);
  release(own_error);
  std::uint8_t running = 1;
  // acquire: a 0 here is the executor's exchange (it is off the record);
  // this side then frees the record, and its reuse must come after that
  // exchange (ThreadSanitizer caught a reused record's read overlapping it).
  if (op->body.load(std::memory_order_acquire) == 1 &&
      op->body.compare_exchange_strong(running, 2, std::memory_order_acq_rel)) {
    // The async body is still on its executor's stack: it frees the record.
  } else if (skipped) {
    ThreadState& ts = t_state;
    ErrorRecord* const outer = ts.skip_error;
    ts.skip_error = skip_error;
    cleanup_op(op);
    ts.skip_error = outer;
  } else {
    cleanup_op(op);
  }
  release(skip_error);

  dispatch_ready(ready);
  if (counted) {
    op_finished();
  } else {
    stats_.count_completed(1);  // ran inside its push: never in the in-flight count
  }
}

bool EngineCore::must_notify(std::int64_t after) const noexcept {
  return (after == 0 && idle_waiters_.load(std::memory_order_seq_cst) > 0) ||
         (throttle_waiters_.load(std::memory_order_seq_cst) > 0 &&
          after - async_started_.load(std::memory_order_relaxed) <= resume_at_);
}

std::int64_t EngineCore::held_back_count() const noexcept {
  // Ops in flight, less async ops whose body has started: those wait on
  // something outside the engine (I/O, a coroutine holding a lease) and may
  // stay for long; holding pushers back for them would stall the engine.
  return in_flight_.load(std::memory_order_seq_cst) - async_started_.load(std::memory_order_relaxed);
}

void EngineCore::op_finished(std::uint32_t n) noexcept {
  ThreadState& ts = t_state;
  if (ts.call != nullptr && ts.call->engine == this) {
    ts.call->finished += n;  // subtracted when the call ends
    return;
  }
  if (ts.engine == this) {
    // A worker counts locally and subtracts in batches: the in-flight count's
    // cache line then stays with the pushing thread. It is flushed at the
    // latest when the worker runs out of work, so the count reaches zero as
    // soon as the engine is idle.
    if ((ts.finished += n) >= kPeriodOps) flush_finished();
    return;
  }
  // A foreign thread (async completion, inline run on a pusher): once the
  // count can reach zero the engine may be destroyed, so decrement under the
  // mutex the destructor waits on; the unlock is the last touch.
  stats_.count_completed(n);
  std::lock_guard lock(idle_mutex_);
  const std::int64_t after = in_flight_.fetch_sub(n, std::memory_order_seq_cst) - n;
  if (must_notify(after)) idle_cv_.notify_all();
}

EngineCore::Call::Call(EngineCore* core) noexcept {
  ThreadState& ts = t_state;
  scope_.engine = core;
  scope_.outer = ts.call;
  ts.call = &scope_;
}

EngineCore::Call::~Call() {
  ThreadState& ts = t_state;
  ts.call = scope_.outer;
  if (scope_.finished > 0) scope_.engine->subtract_finished(scope_.finished);
}

void EngineCore::subtract_finished(std::int64_t n) noexcept {
  // Counted before the decrement: a snapshot that sees the decrement sees
  // the count (Engine::stats() reads in_flight_ first).
  stats_.count_completed(static_cast<std::uint64_t>(n));
  const std::int64_t after = in_flight_.fetch_sub(n, std::memory_order_seq_cst) - n;
  if (must_notify(after)) wake_idle_waiters();
}

void EngineCore::flush_finished() noexcept {
  // Only on this engine's workers, which are joined before the engine is
  // freed: touching the engine after the decrement is safe.
  ThreadState& ts = t_state;
  const std::int64_t n = ts.finished;
  if (n == 0) return;
  ts.finished = 0;
  subtract_finished(n);
}

// ---------------------------------------------------------------------------
// A replay's recorded ops

std::size_t EngineCore::submit_holders(OpRecord* const* holders, const AccessSpec* specs, std::size_t n,
                                       const OpAttrs& attrs, std::size_t ops, HoldStep& step) {
  // Prepared before any lock is taken: the access lists' allocation may throw.
  for (std::size_t base = 0, count = 0; base < n; base += kMaxAccess, ++count) {
    prepare(holders[count], Context::cpu(), std::min(kMaxAccess, n - base), attrs);
    holders[count]->counted = true;
  }
  const std::size_t locked = lock_vars<false>(specs, n, [](const AccessSpec& a) { return a.var->gen == a.gen; });
  if (locked != n) return locked;
  if (!step.under_locks(&step)) {
    unlock_vars(specs, n);
    return kDeclined;
  }
  ReadyList ready;  // stays empty: a grant at push makes nothing ready
  std::size_t count = 0;
  for (std::size_t base = 0; base < n; base += kMaxAccess, ++count) {
    OpRecord* holder = holders[count];
    const std::size_t m = std::min(kMaxAccess, n - base);
    const auto* hooks = static_cast<const HolderHooks*>(holder->aux);
    grant_or_queue(holder, specs + base, m, false,
                   [&](std::size_t i, VarRecord* v) { hooks->granted(hooks, i, v, ready, true); });
  }
  // Before the unlock: a completion may grant a holder's access (and make
  // ops ready) as soon as it can lock the variable.
  in_flight_.fetch_add(static_cast<std::int64_t>(count + ops), std::memory_order_relaxed);
  unlock_vars(specs, n);
  return n;
}

namespace {
/// Whether a graph's keeper holds an access on v (kept or taken by a replay).
bool claimed(const VarRecord* v) noexcept {
  return v->keeper != nullptr && v->keeper->state[v->keep_index].load(std::memory_order_acquire) != VarKeeper::kFree;
}

/// Under v's lock, its access held by the keeper or by a replay that took
/// it: the slot's writes and error settled on v, the access ended (the
/// caller grants what waits), the slot free.
void settle(VarRecord* v, VarKeeper& keeper, std::uint32_t k) noexcept {
  VarKeeper::Slot& slot = keeper.slots[k];
  v->version += slot.writes.exchange(0, std::memory_order_relaxed);
  ErrorRecord* e = std::exchange(slot.error, nullptr);
  if (e != nullptr) keeper.errors.fetch_sub(1, std::memory_order_relaxed);
  if (v->keep_write && v->error != e) {
    release(v->error);
    v->error = e;  // the slot's reference
  } else {
    release(e);  // a read's copy, or the same one
  }
  v->ungrant(v->keep_write);
  keeper.state[k].store(VarKeeper::kFree, std::memory_order_release);
  if (v->keeper == &keeper) v->keeper = nullptr;
}

/// The slot of an access now held by a replay, after that replay: its
/// writes counted, a write's outcome left; counted among the keeper's errors.
void fill_slot(VarKeeper& keeper, std::uint32_t k, bool write, ErrorRecord* outcome, std::uint64_t writes) noexcept {
  VarKeeper::Slot& slot = keeper.slots[k];
  // Its holder alone writes it (var_version reads it): no locked add.
  if (writes != 0) slot.writes.store(slot.writes.load(std::memory_order_relaxed) + writes, std::memory_order_relaxed);
  if (write && slot.error != outcome) {
    release(slot.error);
    slot.error = retain(outcome);
  }
  if (slot.error != nullptr) keeper.errors.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

void EngineCore::hold_ended(VarRecord* v, bool write, ErrorRecord* outcome, std::uint64_t writes, VarKeeper* keeper,
                            std::uint32_t k) noexcept {
  ReadyList ready;
  v->lock.lock();
  // Kept when nothing waits and no graph holds v already (a read of
  // another replay may have run beside this one): one per variable.
  if (v->head == nullptr && !claimed(v)) {
    if (!write) keeper->slots[k].error = retain(v->error);  // what a replay that takes it reads
    fill_slot(*keeper, k, write, outcome, writes);
    if (write) v->writer = nullptr;  // the holder's record goes before the access ends
    v->keeper = keeper;
    v->keep_index = k;
    v->keep_write = write;
    keeper->state[k].store(VarKeeper::kKept, std::memory_order_release);
  } else {
    v->release_access(write, outcome);
    if (write) v->version += writes - 1;  // the release counts one
    grant_waiting<false>(v, ready, nullptr);
  }
  v->lock.unlock();
  if (!ready.empty()) dispatch_ready(ready);
}

void EngineCore::taken_ended(VarRecord* v, bool write, ErrorRecord* outcome, std::uint64_t writes,
                             VarKeeper* keeper, std::uint32_t k) noexcept {
  fill_slot(*keeper, k, write, outcome, writes);
  std::uint8_t taken = VarKeeper::kTaken;
  // release: the replay's ops before whoever takes it next (acquire).
  if (keeper->state[k].compare_exchange_strong(taken, VarKeeper::kKept, std::memory_order_acq_rel)) return;
  // A push waits on v (kWanted): released, as a completion would.
  ReadyList ready;
  v->lock.lock();
  settle(v, *keeper, k);
  grant_waiting<false>(v, ready, nullptr);
  v->lock.unlock();
  if (!ready.empty()) dispatch_ready(ready);
}

void EngineCore::unkeep(VarRecord* v) noexcept {
  VarKeeper& keeper = *v->keeper;
  const std::uint32_t k = v->keep_index;
  std::lock_guard lock(keeper.lock);
  std::uint8_t state = keeper.state[k].load(std::memory_order_acquire);
  for (;;) {
    if (state == VarKeeper::kKept) {
      settle(v, keeper, k);  // nothing waits on a kept access: nothing to grant
      return;
    }
    if (state != VarKeeper::kTaken) return;  // free, or wanted already
    // Its replay releases it at its end; or keeps it first (then taken back here).
    if (keeper.state[k].compare_exchange_weak(state, VarKeeper::kWanted, std::memory_order_acq_rel)) return;
  }
}

std::size_t EngineCore::keep_idle(VarKeeper& keeper, const AccessSpec* specs, std::size_t n) noexcept {
  std::size_t kept = 0;
  for (std::size_t k = 0; k < n; ++k) {
    VarRecord* v = specs[k].var;
    std::lock_guard lock(v->lock);
    if (v->gen != specs[k].gen || !v->free_for(specs[k].write) || claimed(v)) continue;
    v->grant(specs[k].write, nullptr);
    keeper.slots[k].error = retain(v->error);  // as released with no write: the error stays
    if (v->error != nullptr) keeper.errors.fetch_add(1, std::memory_order_relaxed);
    v->keeper = &keeper;
    v->keep_index = static_cast<std::uint32_t>(k);
    v->keep_write = specs[k].write;
    keeper.state[k].store(VarKeeper::kKept, std::memory_order_release);
    ++kept;
  }
  return kept;
}

void EngineCore::drop_kept(VarKeeper& keeper, const AccessSpec* specs, std::size_t n) noexcept {
  // Under the registry's lock: the engine's destructor cannot free the
  // variables meanwhile (it closes the registry first).
  std::lock_guard lock(keeper.registry->mutex);
  if (keeper.registry->closed) return;
  for (std::size_t k = 0; k < n; ++k) {
    if (keeper.state[k].load(std::memory_order_acquire) != VarKeeper::kKept) continue;  // no replay is left
    VarRecord* v = specs[k].var;
    std::lock_guard var_lock(v->lock);
    if (v->keeper == &keeper) unkeep(v);  // else a push took it back since the load above
  }
  // A push that took an access back (seen free above) may still hold the
  // keeper's lock in unkeep: the keeper goes once it has let go.
  const std::lock_guard last(keeper.lock);
}

void EngineCore::end_holder(OpRecord* holder) noexcept {
  access_shrink(holder, 0);  // every access released already: complete() has none left to release
  complete(holder, nullptr);
}


// ---------------------------------------------------------------------------
// Waiting

void EngineCore::wait_for_var(Var var) {
  const ThreadState& ts = t_state;
  if (ts.running != nullptr && ts.running->engine == this) {
    throw Error(Errc::wait_inside_op, "wait_for_var called from inside " + op_label(ts.running->name) +
                                          " of the same engine: it would wait for itself; push a dependent op "
                                          "(or, in a coroutine, co_await ordo::wait_for(engine, var)) instead");
  }
  AccessSpec spec{checked_record(var), VarRecord::gen_of(var), false};
  VarWaiter waiter;
  OpRecord* op = op_alloc();
  OpGuard guard(op);
  op->kind = OpKind::wait_var;
  op->aux = &waiter;
  submit(op, Context::cpu(), &spec, 1, OpAttrs{.name = "wait_for_var"});
  guard.release();
  waiter.wait();
  if (waiter.error != nullptr) {
    waiter.error->observed.store(true, std::memory_order_release);
    std::exception_ptr e = waiter.error->exception;
    release(waiter.error);
    std::rethrow_exception(e);
  }
}

void EngineCore::wait_for_all() {
  const ThreadState& ts = t_state;
  if (ts.running != nullptr && ts.running->engine == this) {
    throw Error(Errc::wait_inside_op, "wait_for_all called from inside " + op_label(ts.running->name) +
                                          " of the same engine: it would wait for itself");
  }
  const std::int64_t called = prof_ != nullptr ? prof_->now() : 0;
  {
    std::unique_lock lock(idle_mutex_);
    idle_waiters_.fetch_add(1, std::memory_order_seq_cst);
    while (in_flight_.load(std::memory_order_seq_cst) != 0) idle_cv_.wait(lock);
    idle_waiters_.fetch_sub(1, std::memory_order_seq_cst);
  }
  // ordo/fence.hpp: ops complete before the work behind their fences (GPU
  // kernels) has finished; wait for it too, and report its unobserved failure.
  FenceGate* const gate = gate_.load(std::memory_order_acquire);
  if (gate != nullptr) [[unlikely]] gate->wait_idle();
  if (prof_ != nullptr) prof_->on_wait_all(called);
  std::exception_ptr first;
  {
    std::lock_guard lock(error_mutex_);
    while (!errors_.empty()) {
      ErrorRecord* e = errors_.front();
      errors_.pop_front();
      const bool seen = e->observed.exchange(true, std::memory_order_acq_rel);
      if (!seen) first = e->exception;
      release(e);
      if (first) break;
    }
    // From here on no variable carries an error raised before this call.
    cleared_epoch_.store(error_epoch_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  if (!first && gate != nullptr) [[unlikely]] first = gate->take_error();
  if (first) std::rethrow_exception(first);
}

std::size_t EngineCore::pending_errors() {
  std::lock_guard lock(error_mutex_);
  return static_cast<std::size_t>(std::count_if(errors_.begin(), errors_.end(), [](const ErrorRecord* e) {
    return !e->observed.load(std::memory_order_acquire);
  }));
}

}  // namespace ordo::detail


// src/core/engine.cpp - ordo::Engine, a thin handle over detail::EngineCore.
#include "ordo/engine.hpp"

#include <cstdio>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "engine_core.hpp"
#include "grants.hpp"
#include "ordo/detail/error_ref.hpp"
#include "ordo/detail/extension.hpp"

namespace ordo {

namespace {
/// Cores of engines that were destroyed with async ops that never completed.
/// Kept alive (and reachable) so that a late completion stays harmless.
void abandon(detail::EngineCore* core) {
  static std::mutex* mutex = new std::mutex;
  static auto* cores = new std::vector<detail::EngineCore*>;
  std::lock_guard lock(*mutex);
  cores->push_back(core);
}
/// True while the calling thread captures a graph of `engine` (ordo/graph.hpp):
/// the calls that cannot be recorded refuse, push(Operator) records.
bool capturing(const Engine* engine) noexcept {
  const detail::GraphRecorder* rec = detail::t_recorder;
  return rec != nullptr && rec->engine() == engine;
}

/// A reference to a pre-built operator for one push (released when the op
/// is cleaned up), taken only while the record is live (never resurrecting
/// a freed one) and still the operator the handle's `gen` names.
void retain_operator(detail::EngineCore* core, detail::OperatorRecord* rec, std::uint64_t gen) {
  std::int64_t refs = rec->refs.load(std::memory_order_relaxed);
  do {
    if (refs == 0) throw Error(Errc::deleted_operator, "push of a deleted operator");
  } while (!rec->refs.compare_exchange_weak(refs, refs + 1, std::memory_order_acq_rel));
  if (rec->gen.load(std::memory_order_acquire) != gen) {
    core->release_operator(rec);
    throw Error(Errc::deleted_operator, "push of a deleted operator");
  }
}
}  // namespace

/// The layers to tell when the destructor begins (EngineExtension::watch).
struct detail::EngineWatchers {
  std::mutex mutex;  ///< guards `list` and `closed`
  std::vector<EngineWatcher*> list;
  bool closed = false;  ///< the destructor has taken the list: watch() refuses, unwatch() finds nothing
};

Engine::Engine(Options options)
    : core_(std::make_unique<detail::EngineCore>(std::move(options))),
      watchers_(std::make_unique<detail::EngineWatchers>()) {}

Engine::~Engine() {
  // Layers with threads of their own first (an io Reactor): they stop using
  // the engine while it still runs what their shutdown hands it.
  // Told without the lock: what a watcher's shutdown runs (a cancelled
  // request's callback) may make another watcher, which is then refused.
  std::vector<detail::EngineWatcher*> told;
  {
    const std::lock_guard lock(watchers_->mutex);
    watchers_->closed = true;
    told.swap(watchers_->list);
  }
  for (auto w = told.rbegin(); w != told.rend(); ++w) (*w)->engine_closing();
  // Timers next: whatever is still armed fires now, and what that posts is
  // drained below with the rest.
  delete timers_.exchange(nullptr, std::memory_order_acq_rel);
  if (!core_) return;
  // From here on only the engine's own ops may push (check_open): a push
  // from another thread would race the drain's end and be lost.
  closing_.store(true, std::memory_order_seq_cst);
  const bool drained = core_->shutdown();
  if (const std::string& path = core_->options().profile.trace_path;
      core_->profiler() != nullptr && !path.empty()) {
    try {
      profiler().write_chrome_trace(path);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ordo: the profiler could not write its trace: %s\n", e.what());
    }
  }
  if (!drained) abandon(core_.release());
}

Var Engine::new_variable() { return core_->new_variable(); }

void Engine::delete_variable(Var var) {
  delete_variable([] {}, Context::cpu(), var);
}

// Once the destructor has begun: pushes made by the ops it drains (on its
// workers, or inside one of its ops) belong to the drain; others are refused.
void Engine::refuse_if_foreign(const char* op_name) const {
  const detail::ThreadState& ts = detail::t_state;
  const detail::EngineCore* core = core_.get();
  if (ts.engine == core || (ts.running != nullptr && ts.running->engine == core)) return;  // part of the drain
  throw Error(Errc::shutting_down,
              (op_name != nullptr ? std::string("push of op '") + op_name + "'" : std::string("a push")) +
                  " from a thread that runs none of the engine's ops: refused, the engine is being destroyed "
                  "(its destructor drains the ops already pushed and takes no new ones from other threads)");
}

void Engine::submit(detail::OpGuard& guard, Context ctx, VarSpan reads, VarSpan writes, const OpAttrs& attrs,
                    std::uint8_t traits) {
  check_open(attrs.name);
  detail::OpRecord* op = guard.get();
  op->kind = detail::OpKind::fn;
  op->traits = traits;
  core_->push(op, ctx, reads, writes, attrs);
  guard.release();
}

// submit() of an op that begin_direct normalised, then found a variable busy.
void Engine::submit_normalized(detail::OpGuard& guard, Context ctx, const detail::DirectRun& run,
                               const OpAttrs& attrs) {
  detail::OpRecord* op = guard.get();
  op->kind = detail::OpKind::fn;
  core_->submit(op, ctx, run.specs, run.n, attrs);
  guard.release();
}

void Engine::submit_delete(detail::OpGuard& guard, Context ctx, Var var) {
  check_open("delete_variable");
  if (capturing(this)) detail::GraphRecorder::refuse("delete_variable");
  detail::AccessSpec spec{core_->checked_record(var), detail::VarRecord::gen_of(var), true};
  detail::OpRecord* op = guard.get();
  op->kind = detail::OpKind::fn;
  core_->submit(op, ctx, &spec, 1, OpAttrs{.prop = FnProperty::delete_var, .name = "delete_variable"});
  guard.release();
}

void Engine::submit_post(detail::OpGuard& guard, Context ctx, const OpAttrs& attrs) {
  check_open(attrs.name);
  if (attrs.prop == FnProperty::delete_var) {
    throw Error(Errc::invalid_argument, "FnProperty::delete_var is reserved for delete_variable");
  }
  detail::OpRecord* op = guard.get();
  op->kind = detail::OpKind::posted;
  core_->submit(op, ctx, nullptr, 0, attrs);
  guard.release();
}

detail::OperatorRecord* Engine::alloc_operator() { return core_->alloc_operator(); }

void Engine::free_operator(detail::OperatorRecord* rec) noexcept { core_->free_operator(rec); }

detail::OpFn& Engine::operator_fn(detail::OperatorRecord* rec) noexcept { return rec->fn; }

Operator Engine::init_operator(detail::OperatorRecord* rec, VarSpan reads, VarSpan writes, const OpAttrs& attrs,
                               std::uint8_t traits) {
  try {
    if (attrs.prop == FnProperty::delete_var) {
      throw Error(Errc::invalid_argument, "FnProperty::delete_var is reserved for delete_variable");
    }
    rec->access.resize(reads.size() + writes.size());
    rec->access.resize(detail::EngineCore::normalize(reads, writes, rec->access.data(), core_.get()));
    rec->name = attrs.name != nullptr ? attrs.name : "";
    rec->attrs = attrs;
    rec->attrs.name = attrs.name != nullptr ? rec->name.c_str() : nullptr;
    rec->traits = traits;
  } catch (...) {
    core_->free_operator(rec);
    throw;
  }
  // The direct path's copy (OperatorRecord::direct_n). A stale handle may
  // read it while it is written: the count last, slots never null once set.
  const std::size_t n = rec->access.size();
  const bool direct = attrs.inline_ok && n != 0 && n <= detail::DirectRun::kMaxAccess &&
                      attrs.prop == FnProperty::normal && !rec->fn.is_async();
  std::uint32_t write_bits = 0;
  for (std::size_t i = 0; direct && i < n; ++i) {
    rec->direct_var[i].store(rec->access[i].var, std::memory_order_relaxed);
    rec->direct_gen[i].store(rec->access[i].gen, std::memory_order_relaxed);
    if (rec->access[i].write) write_bits |= 1U << i;
  }
  rec->direct_writes.store(write_bits, std::memory_order_relaxed);
  rec->direct_n.store(direct ? static_cast<std::uint32_t>(n) : 0U, std::memory_order_relaxed);
  // direct_runs and release_deferred need no reset: a record is freed only
  // once its last direct run has ended and taken the deferred release.
  rec->refs.store(1, std::memory_order_release);
  return Operator{rec, rec->gen.load(std::memory_order_acquire)};
}

void Engine::push(Operator handle, Context ctx) { push_operator(handle, ctx, nullptr); }

void Engine::push(Operator handle, Context ctx, int priority) { push_operator(handle, ctx, &priority); }

void Engine::push_operator(Operator handle, Context ctx, const int* priority) {
  detail::OperatorRecord* rec = handle.rec_;
  if (rec == nullptr) throw Error(Errc::deleted_operator, "push of an empty Operator handle");
  if (rec->engine != core_.get()) throw Error(Errc::deleted_operator, "push of an operator of another engine");
  // The name only once refused: a stale handle's record may be rewritten
  // meanwhile (init_operator), so the usual push reads nothing of it here.
  if (closing_.load(std::memory_order_relaxed)) [[unlikely]] refuse_if_foreign(rec->attrs.name);
  if (capturing(this)) [[unlikely]] {
    detail::t_recorder->record_operator(rec, handle.gen_, ctx, priority);
    return;
  }
  {
    // The direct path (detail::DirectRun) of an inline_ok operator, with no
    // reference taken: begin_direct grants it only if the handle is still live.
    detail::DirectRun run;
    if (begin_direct(run, ctx, rec, handle.gen_) == detail::Direct::granted) {
      try {
        rec->fn.invoke_sync(RunContext{ctx, nullptr, -1});
      } catch (...) {
        fail_direct(run, std::current_exception());
        return;
      }
      end_direct(run);
      return;
    }
  }
  retain_operator(core_.get(), rec, handle.gen_);
  detail::OpRecord* op = detail::op_alloc();
  op->kind = detail::OpKind::oper;
  op->traits = rec->traits;
  op->oper = rec;
  OpAttrs attrs = rec->attrs;
  if (priority != nullptr) attrs.priority = *priority;
  try {
    core_->submit(op, ctx, rec->access.data(), rec->access.size(), attrs);
  } catch (...) {
    op->oper = nullptr;
    detail::op_free(op);
    core_->release_operator(rec);
    throw;
  }
}

void Engine::delete_operator(Operator handle) {
  detail::OperatorRecord* rec = handle.rec_;
  if (rec == nullptr || rec->engine != core_.get()) {
    throw Error(Errc::deleted_operator, "delete_operator: empty handle or operator of another engine");
  }
  std::uint64_t gen = handle.gen_;
  // release pairs with the acquire load in push(): later pushes see the new gen.
  if (!rec->gen.compare_exchange_strong(gen, gen + 1, std::memory_order_acq_rel)) {
    throw Error(Errc::deleted_operator, "delete_operator: the operator was already deleted");
  }
  core_->retire_operator(rec);
}

void Engine::wait_for_var(Var var) {
  if (capturing(this)) detail::GraphRecorder::refuse("wait_for_var");
  core_->wait_for_var(var);
}
void Engine::wait_for_all() {
  if (capturing(this)) detail::GraphRecorder::refuse("wait_for_all");
  core_->wait_for_all();
}
std::uint64_t Engine::var_version(Var var) const { return core_->var_version(var); }
std::size_t Engine::in_flight() const noexcept { return core_->in_flight(); }
std::size_t Engine::pending_errors() const { return core_->pending_errors(); }
const Options& Engine::options() const noexcept { return core_->options(); }
Profiler Engine::profiler() const noexcept { return Profiler(core_->profiler()); }
bool Engine::inside_op() noexcept { return detail::t_state.running != nullptr; }
bool Engine::on_worker_of(Context ctx) const noexcept { return core_->on_worker_of(ctx); }

detail::ProfilerCore* detail::EngineExtension::profiler(Engine& engine) noexcept { return engine.core_->profiler(); }

detail::TimerService& detail::EngineExtension::timers(Engine& engine) {
  // acquire pairs with the release of the CAS that published the service.
  if (detail::TimerService* t = engine.timers_.load(std::memory_order_acquire)) return *t;
  auto* made = new detail::TimerService;
  detail::TimerService* expected = nullptr;
  if (engine.timers_.compare_exchange_strong(expected, made, std::memory_order_acq_rel)) return *made;
  delete made;  // another thread made it first
  return *expected;
}

void detail::EngineExtension::retain_operator(Engine& engine, OperatorRecord* rec, std::uint64_t gen) {
  ordo::retain_operator(engine.core_.get(), rec, gen);
}

void detail::EngineExtension::watch(Engine& engine, EngineWatcher* w) {
  const std::lock_guard lock(engine.watchers_->mutex);
  if (engine.watchers_->closed) {
    throw Error(Errc::shutting_down, "a layer (an ordo::io::Reactor) was made for an engine being destroyed");
  }
  engine.watchers_->list.push_back(w);
}
bool detail::EngineExtension::unwatch(Engine& engine, EngineWatcher* w) noexcept {
  const std::lock_guard lock(engine.watchers_->mutex);
  auto& list = engine.watchers_->list;
  for (auto it = list.begin(); it != list.end(); ++it) {
    if (*it == w) {
      list.erase(it);
      return true;
    }
  }
  return false;
}

bool detail::EngineExtension::attach_idle_task(Engine& engine, IdleTask* task) noexcept {
  return engine.core_->attach_idle_task(task);
}
void detail::EngineExtension::detach_idle_task(Engine& engine, IdleTask* task) noexcept {
  engine.core_->detach_idle_task(task);
}
bool detail::EngineExtension::inline_ok_decides(const Engine& engine, Context ctx, const OpAttrs& attrs) noexcept {
  return engine.core_->inline_ok_decides(ctx, attrs);
}
bool detail::EngineExtension::inline_at_io(const Engine& engine, Context ctx, const OpAttrs& attrs,
                                           const IoSite& site) noexcept {
  return engine.core_->inline_at_io(ctx, attrs, site);
}
void detail::EngineExtension::want_idle_task_runner(Engine& engine) noexcept {
  engine.core_->want_idle_task_runner();
}

CompletionThread::CompletionThread() noexcept : outer_(detail::t_state.completion_thread) {
  detail::t_state.completion_thread = true;
}
CompletionThread::~CompletionThread() { detail::t_state.completion_thread = outer_; }
bool CompletionThread::active() noexcept { return detail::t_state.completion_thread; }

std::exception_ptr Engine::skip_reason() noexcept {
  const detail::ErrorRecord* reason = detail::t_state.skip_error;
  return reason != nullptr ? reason->exception : std::exception_ptr{};
}

// detail::ErrorRef (ordo/detail/error_ref.hpp): here, beside OnComplete and
// skip_reason, whose records it refers to.
detail::ErrorRef detail::ErrorRef::fail(const OnComplete& done, std::exception_ptr error) {
  ErrorRecord* kept = nullptr;
  done.finish(std::move(error), &kept);
  return ErrorRef(kept);
}
detail::ErrorRef detail::ErrorRef::skipping() noexcept { return ErrorRef(retain(t_state.skip_error)); }
detail::ErrorRef detail::ErrorRef::retained(ErrorRecord* r) noexcept { return ErrorRef(retain(r)); }
std::exception_ptr detail::ErrorRef::exception() const noexcept {
  return rec_ != nullptr ? rec_->exception : std::exception_ptr{};
}
void detail::ErrorRef::observe() const noexcept {
  // release: pairs with the acquire loads of wait_for_all, pending_errors and
  // the shutdown report, which pass over an observed error.
  if (rec_ != nullptr) rec_->observed.store(true, std::memory_order_release);
}
void detail::ErrorRef::drop(ErrorRecord* r) noexcept { release(r); }

}  // namespace ordo

namespace ordo {

void OnComplete::finish(std::exception_ptr error, detail::ErrorRecord** kept) const {
  detail::OpRecord* op = op_;
  if (op == nullptr) throw Error(Errc::invalid_argument, "an empty OnComplete was called");
  std::uint64_t gen = gen_;
  // Claim the completion: exactly one call wins. Records are never freed, so
  // reading `gen` of a recycled record is safe and simply fails the claim.
  if (!op->gen.compare_exchange_strong(gen, gen_ + 1, std::memory_order_acq_rel)) {
    throw Error(Errc::double_completion,
                "OnComplete called more than once for " +
                    (name_ != nullptr ? std::string("op '") + name_ + "'" : std::string("an unnamed async op")));
  }
  detail::EngineCore* core = op->engine;
  detail::ErrorRecord* own = error ? core->make_error(std::move(error), op->name) : nullptr;
  if (kept != nullptr) *kept = detail::retain(own);
  core->complete(op, own);
}

}  // namespace ordo

namespace ordo {

// Fence gate (ordo/fence.hpp).
void Engine::set_fence_gate(FenceGate* gate) noexcept { core_->set_fence_gate(gate); }

FenceSlot& Engine::fence_slot(Var var) const {
  detail::VarRecord* v = core_->checked_record(var);
  std::lock_guard lock(v->lock);
  if (v->gen != detail::VarRecord::gen_of(var)) {
    throw Error(Errc::deleted_var, "fence_slot: var " + std::to_string(var.id()) + " was deleted");
  }
  return v->fence;
}

std::size_t HeldOp::size() const noexcept { return op_->n_access; }
FenceSlot& HeldOp::slot(std::size_t i) const noexcept { return op_->access[i].var()->fence; }
bool HeldOp::writes(std::size_t i) const noexcept { return op_->access[i].write(); }
bool HeldOp::deletes() const noexcept { return op_->prop == FnProperty::delete_var; }
Context HeldOp::context() const noexcept { return op_->ctx; }
const char* HeldOp::name() const noexcept { return op_->name; }
void HeldOp::release(std::exception_ptr error) const { op_->engine->release_held(op_, std::move(error)); }

// Engine's side of the direct path (the core's parts inline from grants.hpp).
detail::Direct Engine::begin_direct(detail::DirectRun& run, Context ctx, VarSpan reads, VarSpan writes,
                                    const OpAttrs& attrs) {
  check_open(attrs.name);
  detail::EngineCore* core = core_.get();
  if (!core->direct_allowed(ctx, attrs, reads.size() + writes.size())) return detail::Direct::declined;
  std::size_t n = detail::EngineCore::gather(reads, writes, run.local, core);
  const detail::Direct d = core->begin_direct(run, ctx, run.local, n, attrs);
  if (d == detail::Direct::normalized && n > 1) n = detail::EngineCore::sort_merge(run.local, n);
  run.specs = run.local;
  run.n = static_cast<std::uint32_t>(n);
  return d;
}

detail::Direct Engine::begin_direct(detail::DirectRun& run, Context ctx, detail::OperatorRecord* rec,
                                    std::uint64_t gen) {
  // No reference taken (two atomic read-modify-writes, as many as the rest of
  // the direct path): the copy is read unchecked, and begin_direct checks
  // `gen` once the variables are locked (OperatorRecord::direct_n).
  detail::EngineCore* core = core_.get();
  const std::uint32_t n = rec->direct_n.load(std::memory_order_relaxed);  // at most kMaxAccess, as written
  // direct_n is set only for an inline_ok op of FnProperty::normal (init_operator).
  if (n == 0 || !core->direct_allowed(ctx, OpAttrs{.inline_ok = true}, n)) return detail::Direct::declined;
  const std::uint32_t writes = rec->direct_writes.load(std::memory_order_relaxed);
  for (std::uint32_t i = 0; i < n; ++i) {
    detail::VarRecord* v = rec->direct_var[i].load(std::memory_order_relaxed);
    if (v == nullptr) return detail::Direct::declined;  // a stale copy, being written
    run.local[i] = detail::AccessSpec{v, rec->direct_gen[i].load(std::memory_order_relaxed),
                                      ((writes >> i) & 1U) != 0};
  }
  return core->begin_direct(run, ctx, run.local, n, rec->attrs, rec, gen);
}

void Engine::end_direct(detail::DirectRun& run) noexcept { core_->end_direct(run, nullptr); }

detail::OpRecord* Engine::grant_lease_now(Context ctx, VarSpan reads, VarSpan writes, const OpAttrs& attrs,
                                          std::uint8_t traits, int& worker) {
  check_open(attrs.name);
  detail::EngineCore* core = core_.get();
  if (!core->lease_direct_allowed(ctx, attrs, traits, reads.size() + writes.size())) return nullptr;
  detail::AccessSpec specs[detail::DirectRun::kMaxAccess];
  std::size_t n = detail::EngineCore::gather(reads, writes, specs, core);  // throws for a foreign handle
  if (n > 1) n = detail::EngineCore::sort_merge(specs, n);                 // throws for a stale duplicate
  detail::OpRecord* op = detail::op_alloc();
  core->prepare(op, ctx, n, attrs);
  if (core->grant_lease_now(op, specs, n)) {
    const detail::ThreadState& ts = detail::t_state;
    worker = ts.engine == core ? ts.index : -1;
    return op;
  }
  detail::op_free(op);
  return nullptr;
}

void Engine::fail_direct(detail::DirectRun& run, std::exception_ptr error) noexcept {
  detail::EngineCore* core = core_.get();
  core->end_direct(run, core->make_error(std::move(error), run.self.name));
}


}  // namespace ordo

// src/graph/replay.cpp - Engine::replay and ordo::replay. One op per
// variable of the graph, pushed as one atomic step, holds the variable for
// the replay; the recorded ops wait in the replay (a counter per op,
// decremented once per edge) and pass errors on through the replay's own
// copy of each variable's error, never through a variable's queue. With the
// profiler on (which draws each op's variable edges), the recorded ops are
// pushed again instead, one by one. Bodies are the graph's own, wrapped to
// hand each the replay's argument and to count the replay's ops down.
#include <any>
#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/engine_core.hpp"
#include "core/grants.hpp"
#include "graph_data.hpp"
#include "ordo/detail/coro_runtime.hpp"
#include "ordo/detail/error_ref.hpp"
#include "ordo/detail/extension.hpp"
#include "ordo/graph.hpp"

namespace ordo::detail {

namespace {
thread_local const std::any* t_replay_arg = nullptr;

/// Sets the replay argument a body reads (ordo::replay_arg) for one call.
class ArgScope {
 public:
  explicit ArgScope(const std::any* arg) noexcept : outer_(std::exchange(t_replay_arg, arg)) {}
  ~ArgScope() { t_replay_arg = outer_; }
  ArgScope(const ArgScope&) = delete;
  ArgScope& operator=(const ArgScope&) = delete;

 private:
  const std::any* outer_;
};

constexpr std::uintptr_t kPending = 0;    ///< ops left, nobody waits
constexpr std::uintptr_t kReady = 1;      ///< every op finished
constexpr std::uintptr_t kAbandoned = 2;  ///< the awaitable is gone
}  // namespace

struct ReplayState;

/// A holder of a replay: its record, and where its accesses start in
/// GraphData::vars (a holder has at most EngineCore::kMaxAccess).
struct HoldChunk : HolderHooks {
  ReplayState* s = nullptr;
  std::size_t base = 0;
  OpRecord* op = nullptr;
};

/// One replay: the graph it keeps alive, its argument, and its ops counted down.
struct ReplayState {
  std::shared_ptr<const GraphData> graph;
  std::any arg;
  bool awaited = false;
  /// Op bodies not yet destroyed + 1 for the replaying thread while it
  /// pushes. A body is destroyed once its op has released its variables
  /// (run, skipped or failed), or when its push fails; the last one to go
  /// finishes the replay. acq_rel: the finisher sees every op's writes.
  /// Without pushes, only the ops without successors (HeldRun) and the
  /// starters (StartRun) count, + 1.
  std::atomic<std::size_t> pending{1};
  /// Awaited only (ordo::replay). kPending, kReady, kAbandoned or the
  /// address of the suspended coroutine; `error` is written before kReady
  /// is published (release) and read after it is seen (acquire).
  std::atomic<std::uintptr_t> word{kPending};
  /// The ops' side (one, for all of them) + the awaitable's.
  std::atomic<int> refs{1};
  std::mutex error_mutex;
  ErrorRef error;  ///< the first error, guarded by error_mutex
  /// start_replay_notify's callback, called once by the finisher (else empty).
  std::function<void(ErrorRef)> notify;

  // The replay without pushes (push_held): the holders of the graph's
  // variables, what each recorded op still waits for, and each variable as
  // the replay sees it.
  std::vector<HoldChunk> holders;
  EngineCore* core = nullptr;
  std::unique_ptr<ReplayArrays> arrays;
  std::atomic<std::int32_t>* waits = nullptr;  ///< arrays->waits
  ReplayArrays::Held* held = nullptr;          ///< arrays->held
  /// Set (relaxed) before any error is put in `held`: an op sees it set
  /// whenever a variable's copy it reads carries one (the graph's edges
  /// order the two), and looks at its variables only then.
  std::atomic<bool> errors{false};

  ~ReplayState() {
    if (arrays == nullptr) return;
    for (std::size_t k = 0; k < graph->vars.size(); ++k) {
      release(held[k].error);
      held[k].error = nullptr;
      held[k].at_push = false;
    }
    std::lock_guard lock(graph->spare_mutex);
    graph->spare.push_back(std::move(arrays));
  }

  void unref() noexcept {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
  void fail(ErrorRef e) noexcept {
    if (e.exception() == nullptr) return;
    std::lock_guard lock(error_mutex);
    if (error.exception() == nullptr) error = std::move(e);
  }
  /// One body gone (or, n > 1, bodies never made).
  void done(std::size_t n = 1) noexcept {
    if (pending.fetch_sub(n, std::memory_order_acq_rel) != n) return;
    // Every recorded op has finished, so every hold has ended: the holders
    // complete (before a waiter hears of the replay's end).
    for (HoldChunk& h : holders) core->end_holder(h.op);
    if (notify) {
      ErrorRef e;
      {
        std::lock_guard lock(error_mutex);
        e = std::move(error);
      }
      notify(std::move(e));
    } else if (awaited) {
      const std::uintptr_t prev = word.exchange(kReady, std::memory_order_acq_rel);
      if (prev != kPending && prev != kAbandoned) resume(std::coroutine_handle<>::from_address(reinterpret_cast<void*>(prev)));
    }
    unref();
  }
};

namespace {

/// What the engine runs for one recorded op of a replay that pushes them
/// (24 bytes: inline in the op record, no allocation). Its destruction
/// counts the op done.
struct NodeRun {
  ReplayState* s;
  const GraphNode* node;
  OpRecord* self;

  NodeRun(ReplayState* st, const GraphNode* n, OpRecord* op) noexcept : s(st), node(n), self(op) {}
  NodeRun(NodeRun&& o) noexcept : s(std::exchange(o.s, nullptr)), node(o.node), self(o.self) {}
  NodeRun(const NodeRun&) = delete;
  NodeRun& operator=(const NodeRun&) = delete;
  NodeRun& operator=(NodeRun&&) = delete;
  ~NodeRun() {
    if (s == nullptr) return;
    ErrorRecord* own = self->error.exchange(nullptr, std::memory_order_acquire);  // complete() left it (kOutcomeToBody)
    if (s->awaited) {
      // Its own error (a body's, an async body's OnComplete's), or the one that skipped it.
      s->fail(own != nullptr ? ErrorRef::retained(own) : ErrorRef::skipping());
    }
    release(own);
    if (node->oper != nullptr) node->oper->engine->release_operator(node->oper);
    s->done();
  }
  [[nodiscard]] OpFn& body() const noexcept {
    return node->kind == GraphNode::Kind::oper ? node->oper->fn : const_cast<GraphNode*>(node)->fn;
  }
};

/// A sync recorded op, not awaited: run exactly as pushed.
struct SyncRun : NodeRun {
  using NodeRun::NodeRun;
  void operator()(const RunContext& rc) {
    const ArgScope arg(&s->arg);
    body().invoke_sync(rc);
  }
};

/// An async recorded op; or, awaited, a sync one whose error the awaiter
/// gets (ErrorRef::fail completes the op with it and keeps a reference).
struct AsyncRun : NodeRun {
  using NodeRun::NodeRun;
  void operator()(const RunContext& rc, OnComplete done) {
    const ArgScope arg(&s->arg);
    OpFn& fn = body();
    if (fn.is_async()) {
      fn.invoke_async(rc, done);
      return;
    }
    try {
      fn.invoke_sync(rc);
    } catch (...) {
      s->fail(ErrorRef::fail(done, std::current_exception()));
      return;
    }
    done();
  }
};

std::string node_label(const GraphNode& node, std::size_t i) {
  std::string s = "recorded op " + std::to_string(i);
  if (node.attrs.name != nullptr) s += std::string(" '") + node.attrs.name + "'";
  return s;
}

// ---------------------------------------------------------------------------
// The replay without pushes (push_held)

OpRecord* make_op(ReplayState* s, std::uint32_t i);

/// Counts one wait of each op in [p, end) down; those that reach zero are
/// made and added to `ready` (counted in flight with the replay). The last
/// decrement may let the replay finish on another thread: nothing of `s`
/// or its graph is read after it unless it made an op ready (which keeps
/// the replay alive).
void count_down(ReplayState* s, const std::uint32_t* p, const std::uint32_t* end, ReadyList& ready) {
  for (; p != end; ++p) {
    const std::uint32_t j = *p;
    if (s->waits[j].fetch_sub(1, std::memory_order_acq_rel) == 1) ready.push(make_op(s, j));
  }
}

void count_down_entries(ReplayState* s, std::size_t k, ReadyList& ready) {
  const std::vector<std::uint32_t>& entry = s->graph->vars[k].entry_ops;
  count_down(s, entry.data(), entry.data() + entry.size(), ready);
}

/// The holder's access k is granted (under the variable's lock): the
/// replay takes the error the variable carries, and the recorded ops that
/// start on it go; at push, the replaying thread lets them go once every
/// variable is unlocked (push_held).
void hold_granted(const HolderHooks* hooks, std::size_t k, VarRecord* v, ReadyList& ready, bool at_push) {
  const auto* chunk = static_cast<const HoldChunk*>(hooks);
  ReplayState* s = chunk->s;
  k += chunk->base;
  ErrorRecord* e = v->error;
  if (s->core->live_error(e)) {
    s->errors.store(true, std::memory_order_relaxed);
    s->held[k].error = retain(e);
  }
  if (at_push) {
    s->held[k].at_push = true;
  } else {
    count_down_entries(s, k, ready);
  }
}

/// The last recorded op on variable k has finished: the holder releases
/// it, leaving the last write's outcome on it.
void end_hold(ReplayState* s, std::uint32_t k) noexcept {
  const GraphData::VarUse& use = s->graph->vars[k];
  const HoldChunk& chunk = s->holders[k / EngineCore::kMaxAccess];
  s->core->release_hold(chunk.op, k - chunk.base, use.spec.write ? s->held[k].error : nullptr, use.writes);
}

/// A recorded op of a replay without pushes. Skipped, as a pushed op
/// would be, when a variable it touches carries an error (the replay's
/// copy); its destruction passes its outcome on to the variables it
/// writes, counts its successors down and ends the holds it was last on.
struct HeldRun {
  ReplayState* s;
  OpRecord* self;
  std::uint32_t i;
  ErrorRecord* skip = nullptr;  ///< the error that skipped it (a reference)

  HeldRun(ReplayState* st, OpRecord* op, std::uint32_t index) noexcept : s(st), self(op), i(index) {}
  HeldRun(HeldRun&& o) noexcept : s(std::exchange(o.s, nullptr)), self(o.self), i(o.i), skip(std::exchange(o.skip, nullptr)) {}
  HeldRun(const HeldRun&) = delete;
  HeldRun& operator=(const HeldRun&) = delete;
  HeldRun& operator=(HeldRun&&) = delete;

  [[nodiscard]] const GraphNode& node() const noexcept { return *s->graph->nodes[i]; }
  [[nodiscard]] OpFn& body() const noexcept {
    const GraphNode& n = node();
    return n.kind == GraphNode::Kind::oper ? n.oper->fn : const_cast<GraphNode&>(n).fn;
  }
  /// Whether the body is skipped: as a push inherits a variable's live error at its grant.
  bool skipped() {
    if (!s->errors.load(std::memory_order_relaxed)) return false;
    for (const std::uint32_t k : s->graph->var_index[i]) {
      ErrorRecord* e = s->held[k].error;
      if (s->core->live_error(e)) {
        skip = retain(e);
        break;
      }
    }
    return skip != nullptr && !node().attrs.always_run;
  }

  ~HeldRun() {
    if (s == nullptr) return;
    EngineCore* core = s->core;
    const GraphNode& n = node();
    const GraphData& g = *s->graph;
    const std::vector<std::uint32_t>& vars = g.var_index[i];
    ErrorRecord* own = self->error.exchange(nullptr, std::memory_order_acquire);  // complete() left it (kOutcomeToBody)
    ErrorRecord* outcome = own != nullptr ? own : n.attrs.always_run ? nullptr : skip;
    ErrorRecord* stored = own != nullptr && n.attrs.error_to_awaiter ? nullptr : outcome;
    if (s->awaited && outcome != nullptr) s->fail(ErrorRef::retained(outcome));
    for (std::size_t a = 0; a < vars.size(); ++a) {
      if (!n.access[a].write) continue;
      ErrorRecord*& e = s->held[vars[a]].error;
      if (e != stored) {
        if (stored != nullptr) s->errors.store(true, std::memory_order_relaxed);
        release(e);
        e = retain(stored);
      }
    }
    release(own);
    release(skip);
    if (n.oper != nullptr) n.oper->engine->release_operator(n.oper);
    // The holds this op is among the last on; then its successors, or, for
    // an op without any, the replay's count: the replay ends when its last
    // such op has, and every other op has counted its successors down
    // before (nothing of the replay is read after the last decrement).
    for (const std::uint32_t k : g.exits[i]) {
      if (s->held[k].left.fetch_sub(1, std::memory_order_acq_rel) == 1) end_hold(s, k);
    }
    if (n.succ.empty()) {
      s->done();
      return;
    }
    ReadyList ready;
    count_down(s, n.succ.data(), n.succ.data() + n.succ.size(), ready);
    core->dispatch_ready(ready);
  }
};

struct HeldSyncRun : HeldRun {
  using HeldRun::HeldRun;
  void operator()(const RunContext& rc) {
    if (skipped()) return;
    const ArgScope arg(&s->arg);
    body().invoke_sync(rc);
  }
};

struct HeldAsyncRun : HeldRun {
  using HeldRun::HeldRun;
  void operator()(const RunContext& rc, OnComplete done) {
    if (skipped()) {
      done();
      return;
    }
    const ArgScope arg(&s->arg);
    body().invoke_async(rc, done);
  }
};

OpRecord* make_op(ReplayState* s, std::uint32_t i) {
  const GraphNode& n = *s->graph->nodes[i];
  OpRecord* op = op_alloc();
  if (n.async) {
    op->fn.emplace(HeldAsyncRun(s, op, i));
  } else {
    op->fn.emplace(HeldSyncRun(s, op, i));
  }
  op->kind = OpKind::fn;
  op->traits = kOutcomeToBody;
  s->core->prepare(op, n.ctx, 0, n.attrs);
  op->wait.store(0, std::memory_order_relaxed);
  op->counted = true;
  return op;
}

/// Variables per starter (a size, not tuned): the replaying thread hands
/// the ops that start on them to a worker, which makes and dispatches them.
constexpr std::size_t kStartBatch = 32;
std::size_t starter_count(std::size_t vars) noexcept { return (vars + kStartBatch - 1) / kStartBatch; }

/// A starter's body: the recorded ops that start on variables [begin, end)
/// granted inside the holders' push, made and dispatched from a worker. It
/// counts in the replay's `pending` (the replay outlives it).
struct StartRun {
  ReplayState* s;
  std::uint32_t begin, end;
  StartRun(ReplayState* st, std::uint32_t b, std::uint32_t e) noexcept : s(st), begin(b), end(e) {}
  StartRun(StartRun&& o) noexcept : s(std::exchange(o.s, nullptr)), begin(o.begin), end(o.end) {}
  StartRun(const StartRun&) = delete;
  StartRun& operator=(const StartRun&) = delete;
  StartRun& operator=(StartRun&&) = delete;
  ~StartRun() {
    if (s != nullptr) s->done();
  }
  void operator()(const RunContext& /*rc*/) const {
    ReadyList ready;
    for (std::uint32_t k = begin; k < end; ++k) {
      if (s->held[k].at_push) count_down_entries(s, k, ready);
    }
    s->core->dispatch_ready(ready);
  }
};

constexpr OpAttrs kStartAttrs{.name = "ordo::replay (starts its ops)"};

constexpr OpAttrs kHoldAttrs{.name = "ordo::replay (holds its variables)"};

void hold_granted(const HolderHooks* hooks, std::size_t k, VarRecord* v, ReadyList& ready, bool at_push);

/// The replay without pushes: the holder pushed (one atomic step), then the
/// recorded ops that wait for nothing started. Throws (nothing pushed) for
/// a deleted variable.
void push_held(EngineCore* core, const GraphData& g, ReplayState* s) {
  const std::size_t n = g.nodes.size();
  const std::size_t nv = g.vars.size();
  s->core = core;
  {
    std::lock_guard lock(g.spare_mutex);
    if (!g.spare.empty()) {
      s->arrays = std::move(g.spare.back());
      g.spare.pop_back();
    }
  }
  if (s->arrays == nullptr) {
    s->arrays = std::make_unique<ReplayArrays>();
    s->arrays->waits = std::make_unique<std::atomic<std::int32_t>[]>(n);
    s->arrays->held = std::make_unique<ReplayArrays::Held[]>(nv);
  }
  s->waits = s->arrays->waits.get();
  s->held = s->arrays->held.get();
  for (std::size_t i = 0; i < n; ++i) s->waits[i].store(static_cast<std::int32_t>(g.waits[i]), std::memory_order_relaxed);
  for (std::size_t k = 0; k < nv; ++k) {
    s->held[k].left.store(static_cast<std::int32_t>(g.vars[k].exit_ops), std::memory_order_relaxed);
  }
  // The holders' records, freed again unless every one was pushed.
  s->holders.resize((nv + EngineCore::kMaxAccess - 1) / EngineCore::kMaxAccess);
  std::vector<OpRecord*> records;
  records.reserve(s->holders.size());
  std::vector<OpRecord*> starters;
  starters.reserve(starter_count(nv));
  auto free_records = [&] {
    for (OpRecord* r : records) op_free(r);
    for (OpRecord* r : starters) {
      r->fn.reset();
      op_free(r);
    }
  };
  std::size_t bad = nv;
  try {
    for (std::size_t k = 0; k < nv; k += kStartBatch) {
      OpRecord* op = op_alloc();
      starters.push_back(op);
      op->fn.emplace(StartRun(s, static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(std::min(nv, k + kStartBatch))));
      op->kind = OpKind::fn;
      op->traits = kNoTraits;
      core->prepare(op, Context::cpu(), 0, kStartAttrs);
      op->wait.store(0, std::memory_order_relaxed);
      op->counted = true;
    }
    for (std::size_t c = 0; c < s->holders.size(); ++c) {
      HoldChunk& chunk = s->holders[c];
      chunk.granted = &hold_granted;
      chunk.s = s;
      chunk.base = c * EngineCore::kMaxAccess;
      chunk.op = op_alloc();
      records.push_back(chunk.op);
      chunk.op->kind = OpKind::fn;
      chunk.op->traits = kHolder;
      chunk.op->aux = static_cast<HolderHooks*>(&chunk);
    }
    bad = core->submit_holders(records.data(), g.specs.data(), nv, kHoldAttrs, n + starters.size());
  } catch (...) {
    free_records();
    throw;
  }
  if (bad != nv) {
    free_records();
    const GraphData::VarUse& use = g.vars[bad];
    throw Error(Errc::deleted_var, "replay of a graph: var " + std::to_string(use.spec.var->id) + " of " +
                                       node_label(*g.nodes[use.first_op], use.first_op) + " was deleted");
  }

  // The ops that start on variables granted at push are made by the
  // starters, on the workers (each starter to the next worker's deque: a
  // replay that starts wide is spread at once); those without variables here.
  const EngineCore::Call call(core);  // the naive engine runs them here
  for (OpRecord* op : starters) core->dispatch(op, Origin::completion);
  ReadyList ready;
  for (const std::uint32_t i : g.free_ops) ready.push(make_op(s, i));
  core->dispatch_ready(ready);
}

}  // namespace

namespace {
ReplayState* push_replay(Engine& engine, const std::shared_ptr<const GraphData>& graph, std::any arg, bool awaited,
                         std::function<void(ErrorRef)> notify);
}  // namespace

ReplayState* start_replay(Engine& engine, const std::shared_ptr<const GraphData>& graph, std::any arg,
                          bool awaited) {
  return push_replay(engine, graph, std::move(arg), awaited, {});
}

void start_replay_notify(Engine& engine, const std::shared_ptr<const GraphData>& graph, std::any arg,
                         std::function<void(ErrorRef)> done) {
  push_replay(engine, graph, std::move(arg), true, std::move(done));
}

namespace {
ReplayState* push_replay(Engine& engine, const std::shared_ptr<const GraphData>& graph, std::any arg, bool awaited,
                         std::function<void(ErrorRef)> notify) {
  if (graph == nullptr) throw Error(Errc::invalid_argument, "replay of an empty ordo::Graph");
  if (graph->engine != &engine) {
    throw Error(Errc::invalid_argument, "replay of an ordo::Graph captured on another engine");
  }
  if (const GraphRecorder* rec = t_recorder; rec != nullptr && rec->engine() == &engine) {
    GraphRecorder::refuse("replay");
  }
  EngineCore* core = EngineExtension::core(engine);
  const std::size_t n = graph->nodes.size();
  // Every operator, then (pushing them one by one) every variable checked
  // before anything is pushed, so that a replay that fails for a deleted
  // one pushes nothing (pushed one by one, barring a delete racing with the
  // replay: then the ops before the failed one run). The replay without
  // pushes checks its variables in its one push.
  const bool held = core->profiler() == nullptr;
  for (const std::uint32_t i : graph->oper_ops) {
    const GraphNode& node = *graph->nodes[i];
    if (node.oper->gen.load(std::memory_order_acquire) != node.oper_gen) {
      throw Error(Errc::deleted_operator, "replay of a graph: the operator of " + node_label(node, i) + " was deleted");
    }
  }
  for (const GraphData::VarUse& use : graph->vars) {
    if (held) break;
    VarRecord* v = use.spec.var;
    std::lock_guard lock(v->lock);
    if (v->gen != use.spec.gen) {
      throw Error(Errc::deleted_var, "replay of a graph: var " + std::to_string(v->id) + " of " +
                                         node_label(*graph->nodes[use.first_op], use.first_op) + " was deleted");
    }
  }
  auto* s = new ReplayState;
  s->graph = graph;
  s->arg = std::move(arg);
  s->awaited = awaited;
  s->notify = std::move(notify);
  s->pending.store(n + 1, std::memory_order_relaxed);
  const bool handed = awaited && !s->notify;  // the caller gets a reference (replay_drop)
  if (handed) s->refs.store(2, std::memory_order_relaxed);
  if (held) {
    // Nothing runs before every operator is retained and every holder pushed:
    // a failure here leaves nothing behind.
    const std::vector<std::uint32_t>& opers = graph->oper_ops;
    std::size_t retained = 0;
    try {
      for (; retained < opers.size(); ++retained) {
        const GraphNode& node = *graph->nodes[opers[retained]];
        EngineExtension::retain_operator(engine, node.oper, node.oper_gen);
      }
      s->pending.store(graph->sinks + starter_count(graph->vars.size()) + 1, std::memory_order_relaxed);
      push_held(core, *graph, s);
    } catch (...) {
      for (std::size_t r = 0; r < retained; ++r) {
        const GraphNode& node = *graph->nodes[opers[r]];
        node.oper->engine->release_operator(node.oper);
      }
      delete s;
      if (retained < opers.size()) {
        throw Error(Errc::deleted_operator, "replay of a graph: the operator of " +
                                                node_label(*graph->nodes[opers[retained]], opers[retained]) +
                                                " was deleted");
      }
      throw;
    }
    s->done();
    return handed ? s : nullptr;
  }
  std::size_t i = 0;
  bool made = false;  // op i's body exists (its destruction counts it)
  try {
    for (; i < n; ++i) {
      made = false;
      const GraphNode* node = graph->nodes[i].get();
      OpRecord* op = op_alloc();
      OpGuard guard(op);
      if (node->oper != nullptr) EngineExtension::retain_operator(engine, node->oper, node->oper_gen);
      if (node->async || awaited) {
        op->fn.emplace(AsyncRun(s, node, op));
      } else {
        op->fn.emplace(SyncRun(s, node, op));
      }
      made = true;
      op->kind = OpKind::fn;
      op->traits = kOutcomeToBody;
      core->submit(op, node->ctx, node->access.data(), node->access.size(), node->attrs);
      guard.release();
    }
  } catch (...) {
    s->notify = nullptr;  // the caller gets the error from this call, not from the callback
    s->done(n - i - (made ? 1 : 0) + 1);  // the ops never made, and the replaying thread's count
    if (handed) s->unref();
    try {
      throw;
    } catch (const Error& e) {
      throw Error(e.code(), "replay of a graph: " + node_label(*graph->nodes[i], i) + ": " + e.what() +
                                (i > 0 ? " (the " + std::to_string(i) + " ops before it were pushed)" : ""));
    }
  }
  s->done();
  return handed ? s : nullptr;
}
}  // namespace

bool replay_ready(const ReplayState* s) noexcept { return s->word.load(std::memory_order_acquire) == kReady; }

bool replay_suspend(ReplayState* s, std::coroutine_handle<> h) noexcept {
  std::uintptr_t expected = kPending;
  return s->word.compare_exchange_strong(expected, reinterpret_cast<std::uintptr_t>(h.address()),
                                         std::memory_order_acq_rel);
}

void replay_result(ReplayState* s) {
  std::lock_guard lock(s->error_mutex);
  if (s->error.exception() == nullptr) return;
  s->error.observe();
  std::exception_ptr e = s->error.exception();
  s->error = ErrorRef();  // once
  std::rethrow_exception(e);
}

void replay_drop(ReplayState* s) noexcept {
  // Not awaited to the end: the ops go on; the state goes with the last of them.
  std::uintptr_t expected = kPending;
  s->word.compare_exchange_strong(expected, kAbandoned, std::memory_order_acq_rel);
  s->unref();
}

const std::any* current_replay_arg() noexcept { return t_replay_arg; }

void bad_replay_arg(const std::any* arg, const char* wanted) {
  if (arg == nullptr) {
    throw Error(Errc::invalid_argument, "ordo::replay_arg: called outside the body of a replayed op");
  }
  if (!arg->has_value()) {
    throw Error(Errc::invalid_argument, std::string("ordo::replay_arg<") + wanted +
                                            ">: this replay was given no argument (Engine::replay(graph, arg))");
  }
  throw Error(Errc::invalid_argument, std::string("ordo::replay_arg<") + wanted + ">: the replay's argument is a " +
                                          arg->type().name());
}

}  // namespace ordo::detail

namespace ordo {

void Engine::replay(const Graph& graph) { detail::start_replay(*this, graph.data_, std::any(), false); }

std::size_t Graph::size() const noexcept { return data_ != nullptr ? data_->nodes.size() : 0; }
std::size_t Graph::edges() const noexcept { return data_ != nullptr ? data_->edges : 0; }

}  // namespace ordo

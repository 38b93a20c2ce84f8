// src/graph/replay.cpp - Engine::replay and ordo::replay: the recorded ops
// pushed again in their recorded order, their accesses normalised once at
// capture, their bodies the graph's own (nothing copied per op), wrapped to
// hand each body the replay's argument and to count the replay's ops down.
#include <any>
#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <utility>

#include "core/engine_core.hpp"
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

/// One replay: the graph it keeps alive, its argument, and its ops counted down.
struct ReplayState {
  std::shared_ptr<const GraphData> graph;
  std::any arg;
  bool awaited = false;
  /// Op bodies not yet destroyed + 1 for the replaying thread while it
  /// pushes. A body is destroyed once its op has released its variables
  /// (run, skipped or failed), or when its push fails; the last one to go
  /// finishes the replay. acq_rel: the finisher sees every op's writes.
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

/// What the engine runs for one recorded op of one replay (16 bytes: inline
/// in the op record, no allocation). Its destruction counts the op done.
struct NodeRun {
  ReplayState* s;
  const GraphNode* node;

  NodeRun(ReplayState* st, const GraphNode* n) noexcept : s(st), node(n) {}
  NodeRun(NodeRun&& o) noexcept : s(std::exchange(o.s, nullptr)), node(o.node) {}
  NodeRun(const NodeRun&) = delete;
  NodeRun& operator=(const NodeRun&) = delete;
  NodeRun& operator=(NodeRun&&) = delete;
  ~NodeRun() {
    if (s == nullptr) return;
    if (s->awaited) s->fail(ErrorRef::skipping());  // skipped: the error that skipped it (else empty)
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
  // Every variable and operator checked before anything is pushed, so that
  // a replay that fails for a deleted one pushes nothing (barring a delete
  // racing with the replay: then the ops before the failed one run).
  for (const GraphData::VarUse& use : graph->vars) {
    VarRecord* v = use.spec.var;
    std::lock_guard lock(v->lock);
    if (v->gen != use.spec.gen) {
      throw Error(Errc::deleted_var, "replay of a graph: var " + std::to_string(v->id) + " of " +
                                         node_label(*graph->nodes[use.first_op], use.first_op) + " was deleted");
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    const GraphNode& node = *graph->nodes[i];
    if (node.oper != nullptr && node.oper->gen.load(std::memory_order_acquire) != node.oper_gen) {
      throw Error(Errc::deleted_operator, "replay of a graph: the operator of " + node_label(node, i) + " was deleted");
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
        op->fn.emplace(AsyncRun(s, node));
      } else {
        op->fn.emplace(SyncRun(s, node));
      }
      made = true;
      op->kind = OpKind::fn;
      op->traits = 0;
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

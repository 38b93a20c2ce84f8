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
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/engine_core.hpp"
#include "core/grants.hpp"
#include "core/thread_state.hpp"
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

/// One of what a recorded op waits for has come: true when it was the last.
bool count_down_one(std::int32_t& waits) noexcept {
  return std::atomic_ref<std::int32_t>(waits).fetch_sub(1, std::memory_order_acq_rel) == 1;
}

/// Variables per starter (a size, not tuned): the replaying thread hands
/// the ops that start on them to a worker, which makes and dispatches them.
/// A graph with fewer variables has none: the replaying thread starts its
/// ops itself, which costs less than a starter's record.
constexpr std::size_t kStartBatch = 32;
std::size_t starter_count(std::size_t vars) noexcept {
  return vars <= kStartBatch ? 0 : (vars + kStartBatch - 1) / kStartBatch;
}
/// Holders of a replay of a graph of `vars` variables.
std::size_t holder_count(std::size_t vars) noexcept {
  return (vars + EngineCore::kMaxAccess - 1) / EngineCore::kMaxAccess;
}
}  // namespace

struct ReplayState;

/// A holder of a replay: its record, and where its accesses start in the
/// holders' list (ReplayState::hold_index; at most EngineCore::kMaxAccess).
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
  /// The bodies the recorded ops run when not the graph's (start_replay_bodies).
  ReplayBodies* bodies = nullptr;

  // The replay without pushes (push_held): the holders of the graph's
  // variables, what each recorded op still waits for, and each variable as
  // the replay sees it.
  std::vector<HoldChunk> holders;
  EngineCore* core = nullptr;
  std::unique_ptr<ReplayArrays> arrays;
  std::int32_t* waits = nullptr;  ///< arrays->waits
  ReplayArrays::Held* held = nullptr;  ///< arrays->held
  /// Set (relaxed) before any error is put in `held`: an op sees it set
  /// whenever a variable's copy it reads carries one (the graph's edges
  /// order the two), and looks at its variables only then.
  std::atomic<bool> errors{false};
  /// Variables granted inside the holders' push (the replaying thread's);
  /// all_at_push when that is every one: the ops then wait only for their
  /// edges (GraphData::edges_in), and the starters start the graph's roots.
  std::size_t granted_at_push = 0;
  bool all_at_push = false;
  /// Every variable taken over from the graph's keeper: then no Held's
  /// at_push and taken are set (all are), and the replay reads this instead.
  bool all_taken = false;
  /// push_held's lists of the records it pushes (kept for the next replay).
  std::vector<OpRecord*> records, starters;
  /// The holders' accesses when the replay took some variables over from
  /// the graph's keeper: their indexes in GraphData::vars, and their specs
  /// (else the graph's own, all of them: hold_index null).
  std::vector<std::uint32_t> index;
  std::vector<AccessSpec> specs;
  const std::uint32_t* hold_index = nullptr;

  /// A state for a replay of `g`: a finished replay's, or a new one.
  static ReplayState* take(const std::shared_ptr<const GraphData>& g) {
    ReplayState* s = nullptr;
    {
      std::lock_guard lock(g->spare_lock);
      if (!g->spare.empty()) {
        s = g->spare.back().release();
        g->spare.pop_back();
      }
    }
    if (s == nullptr) s = new ReplayState;
    s->graph = g;
    return s;
  }

  void unref() noexcept {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) recycle();
  }
  /// The last reference went: back to the graph's spare states, cleared.
  void recycle() noexcept {
    std::shared_ptr<const GraphData> g = std::move(graph);
    // A replay that pushes its ops leaves the arrays as they were, and one
    // that took every variable without an error sets nothing per variable
    // (an error is put in `held` only once `errors` is set).
    if (arrays != nullptr && (!all_taken || errors.load(std::memory_order_relaxed))) {
      for (std::size_t k = 0; k < g->vars.size(); ++k) {
        ReplayArrays::Held& h = arrays->held[k];
        release(h.error);
        h.error = nullptr;
        h.at_push = false;
        h.taken = false;
      }
    }
    if (bodies != nullptr) std::exchange(bodies, nullptr)->release();
    arg.reset();
    notify = nullptr;
    error = ErrorRef();
    awaited = false;
    word.store(kPending, std::memory_order_relaxed);
    refs.store(1, std::memory_order_relaxed);
    errors.store(false, std::memory_order_relaxed);
    granted_at_push = 0;
    all_at_push = false;
    all_taken = false;
    holders.clear();  // a replay that pushes its ops has none
    try {
      std::lock_guard lock(g->spare_lock);
      g->spare.emplace_back(this);
    } catch (...) {
      delete this;  // no room to keep it
    }
    // Dropping `g` may destroy the graph, and this state with it.
  }
  void fail(ErrorRef e) noexcept {
    if (e.exception() == nullptr) return;
    std::lock_guard lock(error_mutex);
    if (error.exception() == nullptr) error = std::move(e);
  }
  /// One body gone (or n: bodies never made, ops run without records).
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

void ReplayStateFree::operator()(ReplayState* s) const noexcept { delete s; }

GraphData::~GraphData() {
  if (keeper != nullptr) EngineCore::drop_kept(*keeper, specs.data(), specs.size());
}

void make_spare_replay(const GraphData& g) {
  // Everything a replay without pushes sizes by the graph, made now: the
  // first replay allocates nothing.
  auto s = std::make_unique<ReplayState>();
  s->arrays = ReplayArrays::make(g.nodes.size(), g.vars.size());
  s->holders.reserve(holder_count(g.vars.size()));  // a replay that pushes its ops has none
  s->records.reserve(holder_count(g.vars.size()));
  s->starters.reserve(starter_count(g.vars.size()));
  g.spare.emplace_back(s.release());
}

namespace {

/// What the engine runs for one recorded op of a replay that pushes them
/// (32 bytes: inline in the op record, no allocation). Its destruction
/// counts the op done.
struct NodeRun {
  ReplayState* s;
  const GraphNode* node;
  OpRecord* self;
  OpFn* fn;  ///< its body: the operator's, or the graph's (GraphData::fns)

  NodeRun(ReplayState* st, std::uint32_t i, OpRecord* op) noexcept
      : s(st), node(st->graph->nodes[i].get()), self(op),
        fn(node->kind == GraphNode::Kind::oper ? &node->oper->fn : &st->graph->fns[i]) {}
  NodeRun(NodeRun&& o) noexcept : s(std::exchange(o.s, nullptr)), node(o.node), self(o.self), fn(o.fn) {}
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
  [[nodiscard]] OpFn& body() const noexcept { return *fn; }
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
    if (fn->is_async()) {
      fn->invoke_async(rc, done);
      return;
    }
    try {
      fn->invoke_sync(rc);
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
    if (count_down_one(s->waits[j])) ready.push(make_op(s, j));
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
  if (s->hold_index != nullptr) k = s->hold_index[k];
  ErrorRecord* e = v->error;
  if (s->core->live_error(e)) {
    s->errors.store(true, std::memory_order_relaxed);
    s->held[k].error = retain(e);
  }
  if (at_push) {
    s->held[k].at_push = true;
    ++s->granted_at_push;
  } else {
    count_down_entries(s, k, ready);
  }
}

/// The last recorded op on variable k has finished: its access ends (kept
/// for the next replay, or released), leaving the last write's outcome on it.
void end_hold(ReplayState* s, std::uint32_t k) noexcept {
  const GraphData& g = *s->graph;
  const GraphData::VarUse& use = g.vars[k];
  // An error is put in `held` only once `errors` is set, and the ops before
  // this end are ordered before it.
  ErrorRecord* outcome =
      use.spec.write && s->errors.load(std::memory_order_relaxed) ? s->held[k].error : nullptr;
  if (s->all_taken || s->held[k].taken) {
    s->core->taken_ended(use.spec.var, use.spec.write, outcome, use.writes, g.keeper.get(), k);
  } else {
    s->core->hold_ended(use.spec.var, use.spec.write, outcome, use.writes, g.keeper.get(), k);
  }
}

/// A plan that takes every variable over from the graph's keeper (none held).
std::size_t plan_all(ReplayState* s, std::size_t nv) noexcept {
  s->hold_index = nullptr;
  s->index.clear();
  s->specs.clear();
  return nv;
}

/// Which of the graph's variables the holders' push holds: all but those
/// the graph keeps now (read without a lock: TakeKept checks them under the
/// locks), in s->index/s->specs; all of them (hold_index null) when none is
/// kept or `take` is false. Returns how many it leaves to be taken over.
std::size_t plan_holds(ReplayState* s, const GraphData& g, bool take) {
  const VarKeeper& keeper = *g.keeper;
  const std::size_t nv = g.vars.size();
  s->hold_index = nullptr;
  s->index.clear();
  s->specs.clear();
  if (!take) return 0;
  std::size_t kept = 0;
  for (std::uint32_t k = 0; k < nv; ++k) {
    if (keeper.state[k].load(std::memory_order_relaxed) == VarKeeper::kKept) {
      ++kept;
    } else {
      s->index.push_back(k);
      s->specs.push_back(g.specs[k]);
    }
  }
  if (kept > 0) s->hold_index = s->index.data();
  return kept;
}

/// The replay's step inside its holders' push (every held variable locked,
/// nothing granted yet): the accesses plan_holds left out are taken over
/// from the keeper, all of them or none (one taken back since the plan:
/// declined, and the replay plans again). Taken inside the push, the whole
/// replay is one atomic step: a push on a taken variable comes after it (and
/// waits: kWanted), one on a held variable before or after it, never between.
/// Each access taken is granted at push (at_push); its error (the keeper's
/// slot) is read before any op can run.
struct TakeKept : HoldStep {
  ReplayState* s;
  const GraphData* g;
  std::size_t planned;

  TakeKept(ReplayState* st, const GraphData* graph, std::size_t n) noexcept
      : HoldStep{&run}, s(st), g(graph), planned(n) {}

  static bool run(HoldStep* self) noexcept { return static_cast<TakeKept*>(self)->take(); }

  bool take() noexcept {
    if (planned == 0) return true;
    VarKeeper& keeper = *g->keeper;
    const std::size_t nv = g->vars.size();
    const std::uint32_t* held = s->hold_index;
    const std::uint32_t* held_end = held + (nv - planned);
    const bool all = planned == nv;  // then nothing is set per variable (ReplayState::all_taken)
    auto take_one = [&](std::uint32_t k) {
      std::atomic<std::uint8_t>& state = keeper.state[k];
      // acquire: the ops of the replay that kept it come before this one's.
      if (state.load(std::memory_order_acquire) != VarKeeper::kKept) return false;
      state.store(VarKeeper::kTaken, std::memory_order_relaxed);
      return true;
    };
    {
      std::lock_guard lock(keeper.lock);
      for (std::uint32_t k = 0; k < nv; ++k) {
        if (all) {
          if (take_one(k)) continue;
        } else if (held != held_end && *held == k) {
          ++held;
          continue;
        } else if (take_one(k)) {
          s->held[k].at_push = s->held[k].taken = true;
          continue;
        }
        undo(k, all);
        return false;
      }
    }
    s->granted_at_push = planned;
    s->all_taken = all;
    // Nobody changes a taken access's slot but its replay.
    if (keeper.errors.load(std::memory_order_relaxed) > 0) {
      for (std::size_t k = 0; k < nv; ++k) {
        ErrorRecord* e = all || s->held[k].taken ? keeper.slots[k].error : nullptr;
        if (e == nullptr) continue;
        keeper.errors.fetch_sub(1, std::memory_order_relaxed);  // counted again when kept again
        if (s->core->live_error(e)) {
          s->errors.store(true, std::memory_order_relaxed);
          s->held[k].error = retain(e);
        }
      }
    }
    return true;
  }

 private:
  /// Under the keeper's lock: what this step took before variable `stop`
  /// (all of them, or those marked taken), kept again.
  void undo(std::uint32_t stop, bool all) noexcept {
    for (std::uint32_t k = 0; k < stop; ++k) {
      ReplayArrays::Held& h = s->held[k];
      if (!all && !h.taken) continue;
      g->keeper->state[k].store(VarKeeper::kKept, std::memory_order_relaxed);
      h.at_push = h.taken = false;
    }
  }
};

constexpr std::uint32_t kNone = ~std::uint32_t{0};

/// Which ready recorded ops run on this worker at once, without a record
/// (run_here): those place() makes its continuations, asked once per run
/// of ops of one shape (property and context) and counted against the
/// worker's continuation budget as it allows. It also counts what the ops
/// it let run owe the engine and the replay, paid when it goes (the ops
/// finished) and by its owner (owed(): the ops without successors, whose
/// count the replay gets from the owner's destructor, outside any body).
class Continuer {
 public:
  explicit Continuer(EngineCore* core) noexcept : core_(core) {}
  ~Continuer() {
    EngineCore::continued(used_);
    core_->finished_here(ran_);
  }
  Continuer(const Continuer&) = delete;
  Continuer& operator=(const Continuer&) = delete;

  bool take(const GraphData& g, const GraphData::Step& st) {
    if ((st.flags & GraphData::kAsync) != 0) return false;
    if (left_ == 0 || st.shape != shape_) {
      EngineCore::continued(std::exchange(used_, 0));
      shape_ = st.shape;
      const GraphData::Shape& sh = g.shapes[shape_];
      left_ = core_->continuations_here(OpShape{.traits = kOutcomeToBody, .prop = sh.prop, .ctx = sh.ctx});
      if (left_ == 0) return false;
    }
    --left_;
    ++used_;
    ++ran_;
    return true;
  }
  void sink() noexcept { ++owed_; }
  [[nodiscard]] EngineCore* core() const noexcept { return core_; }
  [[nodiscard]] std::uint32_t owed() const noexcept { return owed_; }

 private:
  EngineCore* core_;
  std::uint32_t left_ = 0;
  std::uint32_t used_ = 0;
  std::uint32_t ran_ = 0;
  std::uint32_t owed_ = 0;
  std::uint16_t shape_ = 0;  ///< GraphData::Step::shape of the ops `left_` counts for
};

/// A recorded op of a replay without pushes. Skipped, as a pushed op
/// would be, when a variable it touches carries an error (the replay's
/// copy); once it ends (finish()) its outcome passes on to the variables it
/// writes, the holds it was last on end and its successors count down.
struct HeldRun {
  ReplayState* s;  ///< null once finished
  OpRecord* self;
  std::uint32_t i;  ///< kNone: finished; `owed` ops without successors to count in the replay
  std::uint32_t owed = 0;
  ErrorRecord* skip = nullptr;  ///< the error that skipped it (a reference)

  HeldRun(ReplayState* st, OpRecord* op, std::uint32_t index) noexcept : s(st), self(op), i(index) {}
  HeldRun(HeldRun&& o) noexcept
      : s(std::exchange(o.s, nullptr)), self(o.self), i(o.i), owed(o.owed), skip(std::exchange(o.skip, nullptr)) {}
  HeldRun(const HeldRun&) = delete;
  HeldRun& operator=(const HeldRun&) = delete;
  HeldRun& operator=(HeldRun&&) = delete;

  [[nodiscard]] const GraphNode& node() const noexcept { return *s->graph->nodes[i]; }
  [[nodiscard]] OpFn& body() const noexcept {
    const GraphData& g = *s->graph;
    if ((g.steps[i].flags & GraphData::kOper) != 0) return node().oper->fn;
    return s->bodies != nullptr ? *s->bodies->fns[i] : g.fns[i];
  }
  /// Whether the body is skipped: as a push inherits a variable's live error at its grant.
  bool skipped() {
    if (!s->errors.load(std::memory_order_relaxed)) return false;
    const GraphData& g = *s->graph;
    const GraphData::Step& st = g.steps[i];
    for (const std::uint32_t* p = g.flat.data() + st.at, *end = p + st.vars; p != end; ++p) {
      ErrorRecord* e = s->held[*p & GraphData::kIndex].error;
      if (s->core->live_error(e)) {
        skip = retain(e);
        break;
      }
    }
    return skip != nullptr && (st.flags & GraphData::kAlwaysRun) == 0;
  }

  /// Not finished by its body's call (an async op; a body that threw, whose
  /// error complete() left on the record: kOutcomeToBody): finished here.
  ~HeldRun() {
    if (s == nullptr) return;
    if (i == kNone) {
      s->done(owed);
      return;
    }
    // Nobody else writes the record's error now.
    ErrorRecord* own = self != nullptr ? self->error.load(std::memory_order_acquire) : nullptr;
    if (own != nullptr) self->error.store(nullptr, std::memory_order_relaxed);
    finish(own, nullptr);
  }

  /// Op i has ended (run, failed with `own`, a reference taken over, or
  /// skipped). Its successors that become ready are made and dispatched,
  /// but for one that `here` (if any) lets run as this worker's
  /// continuation: returned, to run here without a record; else kNone, and
  /// the replay may be gone (nothing of it is read after the last
  /// decrement unless that made an op ready, which keeps it alive).
  std::uint32_t finish(ErrorRecord* own, Continuer* here) {
    EngineCore* core = s->core;
    const GraphData& g = *s->graph;
    const GraphData::Step& st = g.steps[i];
    const std::uint32_t* p = g.flat.data() + st.at;
    // Without errors in the replay (the flag is set before any is stored,
    // and the edges order the two) no variable's copy changes.
    if (own != nullptr || s->errors.load(std::memory_order_relaxed)) pass_on(st, p, own);
    if ((st.flags & GraphData::kOper) != 0) {
      const GraphNode& n = node();
      n.oper->engine->release_operator(n.oper);
    }
    // The holds this op is among the last on; then its successors, or, for
    // an op without any, the replay's count: the replay ends when its last
    // such op has, and every other op has counted its successors down before.
    p += st.vars;
    for (const std::uint32_t* end = p + st.exits; p != end; ++p) {
      const std::uint32_t k = *p & GraphData::kIndex;
      if ((*p & GraphData::kSoleExit) != 0 || s->held[k].left.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        end_hold(s, k);
      }
    }
    ReplayState* const replay = std::exchange(s, nullptr);
    if (st.succ == 0) {
      if (here != nullptr) {
        here->sink();  // counted in the replay by the owner, which keeps it alive
      } else {
        replay->done();
      }
      return kNone;
    }
    std::uint32_t next = kNone;
    ReadyList ready;
    // A successor that waits for this op alone needs no decrement.
    const std::uint32_t alone = replay->all_at_push ? GraphData::kOneEdge : GraphData::kOneWait;
    for (const std::uint32_t* end = p + st.succ; p != end; ++p) {
      const std::uint32_t j = *p & GraphData::kNodeIndex;
      if ((*p & alone) == 0 && !count_down_one(replay->waits[j])) continue;
      if (here != nullptr && next == kNone && here->take(g, g.steps[j])) {
        next = j;
      } else {
        ready.push(make_op(replay, j));
      }
    }
    if (!ready.empty()) core->dispatch_ready(ready);
    if (next != kNone) {
      s = replay;
      i = next;
    }
    return next;
  }

 private:
  /// An error (its own, or the one that skipped it): the replay's awaiter
  /// gets it, the variables it writes carry it on, as pushed.
  void pass_on(const GraphData::Step& st, const std::uint32_t* p, ErrorRecord* own) noexcept {
    const bool always_run = (st.flags & GraphData::kAlwaysRun) != 0;
    ErrorRecord* outcome = own != nullptr ? own : always_run ? nullptr : skip;
    ErrorRecord* stored = own != nullptr && (st.flags & GraphData::kErrorToAwaiter) != 0 ? nullptr : outcome;
    if (s->awaited && outcome != nullptr) s->fail(ErrorRef::retained(outcome));
    for (const std::uint32_t* end = p + st.vars; p != end; ++p) {
      if ((*p & GraphData::kWrite) == 0) continue;
      ErrorRecord*& e = s->held[*p & GraphData::kIndex].error;
      if (e != stored) {
        if (stored != nullptr) s->errors.store(true, std::memory_order_relaxed);
        release(e);
        e = retain(stored);
      }
    }
    release(own);
    release(std::exchange(skip, nullptr));
  }
};

/// Runs `next` (the op `at` stands for, which `here` let run on this
/// worker) and then each continuation it leaves, here and without an op
/// record, each as if it had been dispatched to this worker; returns when
/// one leaves none.
void run_here(HeldRun& at, std::uint32_t next, int worker, Continuer& here) {
  EngineCore* core = here.core();
  ThreadState& ts = t_state;
  const RunningOp* outer = ts.running;
  ErrorRecord* own = nullptr;
  for (; next != kNone; next = at.finish(std::exchange(own, nullptr), &here)) {
    if (at.skipped()) continue;
    const GraphData& g = *at.s->graph;
    const char* const name = g.names[next];
    const RunningOp running{core, name};  // what a wait inside the body names
    ts.running = &running;
    try {
      const ArgScope arg(&at.s->arg);
      at.body().invoke_sync(RunContext{g.shapes[g.steps[next].shape].ctx, nullptr, worker});
    } catch (...) {
      own = core->make_error(std::current_exception(), name);
    }
    ts.running = outer;
  }
}

/// A sync recorded op: its continuations run in the same call (run_here).
struct HeldSyncRun : HeldRun {
  using HeldRun::HeldRun;
  void operator()(const RunContext& rc) {
    if (!skipped()) {
      const ArgScope arg(&s->arg);
      body().invoke_sync(rc);  // a throw ends the call: complete() passes it on (the destructor)
    }
    ReplayState* const replay = s;
    Continuer here(s->core);
    run_here(*this, finish(nullptr, &here), rc.worker, here);
    if (here.owed() > 0) {
      // The replay's count of them is taken when the record is destroyed,
      // outside the body (the last one may resume the replay's awaiter).
      s = replay;
      i = kNone;
      owed = here.owed();
    }
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

/// The share of starter `c` (of `count`) in `total` items: [first, second).
std::pair<std::size_t, std::size_t> share(std::size_t c, std::size_t count, std::size_t total) noexcept {
  return {c * total / count, (c + 1) * total / count};
}

/// A starter's body, run on a worker. When every variable was granted at
/// the holders' push (ReplayState::all_at_push), the graph's roots
/// [begin, end), run here as far as place() lets (Continuer; else made and
/// dispatched); otherwise the recorded ops that start on variables
/// [begin, end) granted at that push, made and dispatched. It counts in the
/// replay's `pending` (the replay outlives it).
struct StartRun {
  ReplayState* s;
  std::uint32_t begin, end;
  std::uint32_t owed = 0;  ///< ops without successors it ran (run_here), counted in the replay with it
  StartRun(ReplayState* st, std::uint32_t b, std::uint32_t e) noexcept : s(st), begin(b), end(e) {}
  StartRun(StartRun&& o) noexcept : s(std::exchange(o.s, nullptr)), begin(o.begin), end(o.end), owed(o.owed) {}
  StartRun(const StartRun&) = delete;
  StartRun& operator=(const StartRun&) = delete;
  StartRun& operator=(StartRun&&) = delete;
  ~StartRun() {
    if (s != nullptr) s->done(1 + owed);
  }
  void operator()(const RunContext& rc) {
    ReadyList ready;
    if (s->all_at_push) {
      const GraphData& g = *s->graph;
      Continuer here(s->core);
      for (std::uint32_t r = begin; r < end; ++r) {
        const std::uint32_t i = g.roots[r];
        if (here.take(g, g.steps[i])) {
          HeldRun at(s, nullptr, i);
          run_here(at, i, rc.worker, here);
        } else {
          ready.push(make_op(s, i));
        }
      }
      owed = here.owed();
    } else {
      for (std::uint32_t k = begin; k < end; ++k) {
        if (s->held[k].at_push) count_down_entries(s, k, ready);
      }
    }
    if (!ready.empty()) s->core->dispatch_ready(ready);
  }
};

constexpr OpAttrs kStartAttrs{.name = "ordo::replay (starts its ops)"};

constexpr OpAttrs kHoldAttrs{.name = "ordo::replay (holds its variables)"};

/// The replay without pushes: the holder pushed (one atomic step), then the
/// recorded ops that wait for nothing started. Throws (nothing pushed) for
/// a deleted variable.
void push_held(EngineCore* core, const GraphData& g, ReplayState* s) {
  const std::size_t n = g.nodes.size();
  const std::size_t nv = g.vars.size();
  s->core = core;
  if (s->arrays == nullptr) s->arrays = ReplayArrays::make(n, nv);
  s->waits = s->arrays->waits.get();
  s->held = s->arrays->held.get();
  for (const std::uint32_t k : g.counted_exits) {
    s->held[k].left.store(static_cast<std::int32_t>(g.vars[k].exit_ops), std::memory_order_relaxed);
  }
  // The starters' records (freed again unless the holders' push succeeds).
  std::vector<OpRecord*>& starters = s->starters;
  starters.clear();
  starters.reserve(starter_count(nv));
  std::vector<OpRecord*>& records = s->records;
  records.clear();
  auto free_records = [&] {
    for (OpRecord* r : records) op_free(r);
    for (OpRecord* r : starters) op_free(r);
    records.clear();
  };
  // Room first, as a push waits for it: never while holding an access that
  // the ops in flight may wait on.
  core->wait_for_room();
  std::size_t nh = nv;
  std::size_t bad = nh;
  // As many starters as the plan needs: one per batch of variables, or,
  // when every variable is taken over, one per root at most.
  auto make_starters = [&](std::size_t want) {
    while (starters.size() > want) {
      op_free(starters.back());
      starters.pop_back();
    }
    while (starters.size() < want) {
      OpRecord* op = op_alloc();  // its body is emplaced once pushed (inline: cannot fail)
      starters.push_back(op);
      op->kind = OpKind::fn;
      op->traits = kNoTraits;
      core->prepare(op, Context::cpu(), 0, kStartAttrs);
      op->wait.store(0, std::memory_order_relaxed);
      op->counted = true;
    }
  };
  try {
    // The variables the graph keeps are taken over inside the holders' push,
    // which holds the rest. When the last replay took every one over, the
    // first try plans that without reading the keeper (the step checks each
    // anyway). Declined twice after a plan read from the keeper (kept
    // accesses taken back between the plan and the push), it holds every
    // variable (the push takes those still kept back, as any push does).
    bool blind = g.took_all.load(std::memory_order_relaxed);
    for (int declines = 0;;) {
      const std::size_t planned = blind ? plan_all(s, nv) : plan_holds(s, g, declines < 2);
      nh = nv - planned;
      const bool all_planned = nh == 0;  // every variable to be taken over (else the step declines)
      make_starters(all_planned ? std::min(starter_count(nv), g.roots.size()) : starter_count(nv));
      const AccessSpec* hold_specs = s->hold_index != nullptr ? s->specs.data() : g.specs.data();
      s->holders.resize(holder_count(nh));
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
      s->granted_at_push = 0;
      // What each op waits for, before anything can be granted: its edges
      // only when every variable is taken over (then granted at push),
      // else its edges and entries (the entries counted down as granted).
      std::memcpy(s->waits, all_planned ? g.edges_in.data() : g.waits.data(), n * sizeof(std::int32_t));
      TakeKept step(s, &g, planned);
      bad = core->submit_holders(records.data(), hold_specs, nh, kHoldAttrs, n + starters.size(), step);
      if (bad != EngineCore::kDeclined) break;
      if (!std::exchange(blind, false)) ++declines;
      for (OpRecord* r : records) op_free(r);
      records.clear();
    }
    g.took_all.store(s->all_taken, std::memory_order_relaxed);
    // Before any starter runs; the replaying thread's count keeps the
    // replay from ending before this.
    s->pending.fetch_add(starters.size(), std::memory_order_relaxed);
  } catch (...) {
    free_records();
    throw;
  }
  if (bad != nh) {
    free_records();
    const GraphData::VarUse& use = g.vars[s->hold_index != nullptr ? s->hold_index[bad] : bad];
    throw Error(Errc::deleted_var, "replay of a graph: var " + std::to_string(use.spec.var->id) + " of " +
                                       node_label(*g.nodes[use.first_op], use.first_op) + " was deleted");
  }

  // The ops that start on variables granted at push are made by the
  // starters, on the workers (each starter to the next worker's deque: a
  // replay that starts wide is spread at once); those without variables here.
  const EngineCore::Call call(core);  // the naive engine runs them here
  if (s->granted_at_push == nv) {
    // Nothing can have counted an op down yet (no op is ready, no grant is
    // left to come): their entries are behind them.
    s->all_at_push = true;
    if (!s->all_taken) std::memcpy(s->waits, g.edges_in.data(), n * sizeof(std::int32_t));
  }
  std::size_t idle = 0;  // starters without roots to start: not dispatched
  for (std::size_t c = 0; c < starters.size(); ++c) {
    // Its share of the roots, or its batch of variables.
    auto [first, last] = share(c, starters.size(), g.roots.size());
    if (!s->all_at_push) {
      first = c * kStartBatch;
      last = std::min(nv, first + kStartBatch);
    } else if (first == last) {
      op_free(starters[c]);
      ++idle;
      continue;
    }
    starters[c]->fn.emplace(StartRun(s, static_cast<std::uint32_t>(first), static_cast<std::uint32_t>(last)));
    core->dispatch(starters[c], Origin::completion);
  }
  if (idle > 0) {
    core->finished_here(static_cast<std::uint32_t>(idle));
    s->done(idle);
  }
  ReadyList ready;
  if (starters.empty()) {
    // Few variables: what a starter would start, started here.
    if (s->all_at_push) {
      for (const std::uint32_t i : g.roots) ready.push(make_op(s, i));
    } else {
      for (std::size_t k = 0; k < nv; ++k) {
        if (s->held[k].at_push) count_down_entries(s, k, ready);
      }
    }
  }
  for (const std::uint32_t i : g.free_ops) ready.push(make_op(s, i));
  if (!ready.empty()) core->dispatch_ready(ready);
}

}  // namespace

namespace {
ReplayState* push_replay(Engine& engine, const std::shared_ptr<const GraphData>& graph, std::any arg, bool awaited,
                         std::function<void(ErrorRef)> notify, ReplayBodies* bodies = nullptr);

/// The replay without pushes runs its ops without variable lists, which
/// the profiler's edges and a fence gate's holds need: with either, the
/// recorded ops are pushed one by one.
bool replays_without_pushes(const EngineCore* core) noexcept {
  return core->profiler() == nullptr && !core->fence_gate_installed();
}
}  // namespace

ReplayState* start_replay(Engine& engine, const std::shared_ptr<const GraphData>& graph, std::any arg,
                          bool awaited) {
  return push_replay(engine, graph, std::move(arg), awaited, {});
}

void start_replay_notify(Engine& engine, const std::shared_ptr<const GraphData>& graph, std::any arg,
                         std::function<void(ErrorRef)> done) {
  push_replay(engine, graph, std::move(arg), true, std::move(done));
}

bool start_replay_bodies(Engine& engine, const std::shared_ptr<const GraphData>& graph, ReplayBodies* bodies) {
  if (!replays_without_pushes(EngineExtension::core(engine))) return false;
  try {
    push_replay(engine, graph, std::any(), false, {}, bodies);
  } catch (...) {
    return false;  // a replay without pushes starts whole or pushes nothing; the caller's pushes fail alike
  }
  return true;
}

namespace {
ReplayState* push_replay(Engine& engine, const std::shared_ptr<const GraphData>& graph, std::any arg, bool awaited,
                         std::function<void(ErrorRef)> notify, ReplayBodies* bodies) {
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
  // Other bodies (start_replay_bodies, which asked) only without pushes.
  const bool held = bodies != nullptr || replays_without_pushes(core);
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
  ReplayState* s = ReplayState::take(graph);
  s->arg = std::move(arg);
  s->awaited = awaited;
  s->notify = std::move(notify);
  s->bodies = bodies;
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
      s->pending.store(graph->sinks + 1, std::memory_order_relaxed);  // + the starters (push_held)
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
        op->fn.emplace(AsyncRun(s, static_cast<std::uint32_t>(i), op));
      } else {
        op->fn.emplace(SyncRun(s, static_cast<std::uint32_t>(i), op));
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

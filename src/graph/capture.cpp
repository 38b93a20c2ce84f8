// src/graph/capture.cpp - Engine::capture's recorder: the pushes made in the
// scope become graph nodes, their dependencies resolved once at the end.
#include <algorithm>
#include <functional>
#include <limits>
#include <memory_resource>
#include <string>
#include <unordered_map>
#include <utility>

#include "auto_recorder.hpp"
#include "core/engine_core.hpp"
#include "graph_data.hpp"
#include "ordo/detail/extension.hpp"
#include "ordo/graph.hpp"

namespace ordo::detail {

constinit thread_local GraphRecorder* t_recorder = nullptr;

GraphRecorder::GraphRecorder(Engine& engine) : engine_(&engine), data_(std::make_shared<GraphData>()) {
  if (t_recorder != nullptr) {
    throw Error(Errc::invalid_argument, std::string("Engine::capture inside ") + t_recorder->scope() +
                                            " on the same thread: captures do not nest");
  }
  data_->engine = &engine;
  t_recorder = this;
}

GraphRecorder::GraphRecorder(Engine& engine, AutoRecorder& sink) : engine_(&engine), sink_(&sink) {
  if (t_recorder != nullptr) {
    throw Error(Errc::invalid_argument, std::string("ordo::AutoCapture::run inside ") + t_recorder->scope() +
                                            " on the same thread: they do not nest");
  }
  t_recorder = this;
}

GraphRecorder::~GraphRecorder() { t_recorder = nullptr; }

const char* GraphRecorder::scope() const noexcept {
  return sink_ != nullptr ? "ordo::AutoCapture::run" : "Engine::capture";
}

OpFn& GraphRecorder::begin_fn() {
  if (sink_ != nullptr) return sink_->begin_fn();
  pending_ = std::make_unique<GraphNode>();
  return pending_->fn;
}

void GraphRecorder::commit_fn(const char* call, Context ctx, VarSpan reads, VarSpan writes, const OpAttrs& attrs) {
  if (sink_ != nullptr) {
    sink_->commit(call, ctx, reads, writes, attrs);
    return;
  }
  commit(call, ctx, reads, writes, attrs, nullptr, 0);
}

void GraphRecorder::commit_group(const char* call, Context ctx, VarSpan reads, VarSpan writes, const OpAttrs& attrs,
                                 GraphGroup* group, std::uint64_t key) {
  if (sink_ != nullptr) sink_->refuse_group(call, attrs);
  commit(call, ctx, reads, writes, attrs, group, key);
}

void check_recordable(const char* call, Context ctx, const OpAttrs& attrs, bool group) {
  auto label = [&] { return std::string(call) + (attrs.name != nullptr ? std::string(" '") + attrs.name + "'" : ""); };
  if (attrs.prop == FnProperty::delete_var) {
    throw Error(Errc::invalid_argument, label() + ": FnProperty::delete_var is reserved for delete_variable");
  }
  if (ctx.device_id < 0 || (ctx.is_gpu() && !group)) {
    // A body on a GPU context is recorded only as an ordo::gpu op, which
    // becomes part of a CUDA graph; a plain body has no stream to capture.
    throw Error(Errc::invalid_argument, label() + " inside " + t_recorder->scope() +
                                            ": only CPU contexts and ordo::gpu::Runtime's GPU ops can be captured "
                                            "(got " +
                                            (ctx.is_gpu() ? "gpu " : "cpu ") + std::to_string(ctx.device_id) + ")");
  }
}

void check_recordable_operator(const OperatorRecord* rec, std::uint64_t gen, Context ctx) {
  if (rec->gen.load(std::memory_order_acquire) != gen || rec->refs.load(std::memory_order_acquire) == 0) {
    throw Error(Errc::deleted_operator, std::string("push of a deleted operator (inside ") + t_recorder->scope() + ")");
  }
  if (ctx.device_id < 0 || ctx.is_gpu()) {
    throw Error(Errc::invalid_argument, std::string("push(Operator) inside ") + t_recorder->scope() +
                                            ": only CPU contexts can be captured (a GPU operator: "
                                            "ordo::gpu::Runtime::push)");
  }
  if (rec->traits != 0) GraphRecorder::refuse_layer_push(rec->traits);
}

void GraphRecorder::commit(const char* call, Context ctx, VarSpan reads, VarSpan writes, const OpAttrs& attrs,
                           GraphGroup* group, std::uint64_t key) {
  std::unique_ptr<GraphNode> node = std::move(pending_);
  auto label = [&] { return std::string(call) + (attrs.name != nullptr ? std::string(" '") + attrs.name + "'" : ""); };
  check_recordable(call, ctx, attrs, group != nullptr);
  node->access.resize(reads.size() + writes.size());
  node->access.resize(EngineCore::normalize(reads, writes, node->access.data(), EngineExtension::core(*engine_)));
  if (node->access.size() > EngineCore::kMaxAccess) throw Error(Errc::invalid_argument, label() + ": too many variables");
  node->async = node->fn.is_async();
  node->body_type = node->fn.type();
  node->ctx = ctx;
  node->attrs = attrs;
  node->group = group;
  node->group_key = key;
  if (attrs.name != nullptr) {
    node->name = attrs.name;
    node->attrs.name = node->name.c_str();  // std::string's buffer does not move with the node (heap node)
  }
  data_->nodes.push_back(std::move(node));
}

void GraphRecorder::record_operator(OperatorRecord* rec, std::uint64_t gen, Context ctx, const int* priority) {
  check_recordable_operator(rec, gen, ctx);
  if (sink_ != nullptr) {
    sink_->record_operator(rec, gen, ctx, priority);
    return;
  }
  auto node = std::make_unique<GraphNode>();
  node->kind = GraphNode::Kind::oper;
  node->async = rec->fn.is_async();
  node->ctx = ctx;
  node->attrs = rec->attrs;  // its name lives in the operator record, alive while a replay holds a reference
  if (priority != nullptr) node->attrs.priority = *priority;
  node->access = rec->access;
  node->oper = rec;
  node->oper_gen = gen;
  data_->nodes.push_back(std::move(node));
}

void GraphRecorder::refuse(const char* call) {
  const char* scope = t_recorder != nullptr ? t_recorder->scope() : "Engine::capture";
  throw Error(Errc::invalid_argument, std::string(call) + " inside " + scope +
                                          ": it cannot be recorded (a capture records pushes; move the call "
                                          "before or after it)");
}

void GraphRecorder::refuse_layer_push(std::uint8_t traits) {
  if ((traits & kFenceExempt) != 0) refuse("an ordo::gpu stream op");
  if ((traits & kNoUserCode) != 0) refuse("an ordo::io request");
  refuse("a coroutine push (ordo::push, co_await engine.push or ordo::wait_for)");  // the lease form
}

namespace {
/// Per node, a list of indexes; in the capture's scratch memory.
using NodeLists = std::pmr::vector<std::pmr::vector<std::uint32_t>>;

/// GraphData::steps, flat, shapes, and the nodes' bodies and names moved
/// out to GraphData::fns and names, from the per-node lists finish() built.
void pack_steps(GraphData* data, const NodeLists& var_index, const NodeLists& exits, const NodeLists& succ,
                const std::pmr::vector<std::uint32_t>& moved_to) {
  using G = GraphData;
  const auto& nodes = data->nodes;
  std::size_t total = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) total += var_index[i].size() + exits[i].size() + succ[i].size();
  if (total > G::kIndex || data->vars.size() > G::kIndex) {
    throw Error(Errc::invalid_argument, "Engine::capture: the graph is too large (" + std::to_string(total) +
                                            " accesses and edges; at most " + std::to_string(G::kIndex) + ")");
  }
  if (nodes.size() > G::kNodeIndex) {
    throw Error(Errc::invalid_argument, "Engine::capture: the graph is too large (" + std::to_string(nodes.size()) +
                                            " ops; at most " + std::to_string(G::kNodeIndex) + ")");
  }
  data->steps.resize(nodes.size());
  data->flat.reserve(total);
  data->fns.reserve(nodes.size());
  data->names.reserve(nodes.size());
  std::unordered_map<std::uint64_t, std::uint16_t> shape_of;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    GraphNode& n = *nodes[i];
    G::Step& st = data->steps[i];
    const std::uint64_t key = static_cast<std::uint64_t>(n.attrs.prop) << 40 |
                              static_cast<std::uint64_t>(n.ctx.type) << 32 | static_cast<std::uint32_t>(n.ctx.device_id);
    const auto [shape, added] = shape_of.try_emplace(key, static_cast<std::uint16_t>(data->shapes.size()));
    if (added) {
      if (data->shapes.size() > std::numeric_limits<std::uint16_t>::max()) {
        throw Error(Errc::invalid_argument, "Engine::capture: the graph's ops use more than 65536 "
                                            "(property, context) pairs");
      }
      data->shapes.push_back({n.attrs.prop, n.ctx});
    }
    st.shape = shape->second;
    data->fns.emplace_back(std::move(n.fn));
    data->names.push_back(n.attrs.name);
    st.at = static_cast<std::uint32_t>(data->flat.size());
    st.vars = static_cast<std::uint16_t>(var_index[i].size());  // at most EngineCore::kMaxAccess (commit_fn)
    st.exits = static_cast<std::uint16_t>(exits[i].size());
    st.succ = static_cast<std::uint32_t>(succ[i].size());
    st.flags = static_cast<std::uint8_t>((n.attrs.always_run ? G::kAlwaysRun : 0) |
                                         (n.attrs.error_to_awaiter ? G::kErrorToAwaiter : 0) |
                                         (n.oper != nullptr ? G::kOper : 0) | (n.async ? G::kAsync : 0));
    for (std::size_t a = 0; a < var_index[i].size(); ++a) {
      data->flat.push_back(moved_to[var_index[i][a]] | (n.access[a].write ? G::kWrite : 0));
    }
    for (const std::uint32_t k : exits[i]) {
      const std::uint32_t to = moved_to[k];
      data->flat.push_back(to | (data->vars[to].exit_ops == 1 ? G::kSoleExit : 0));
    }
    for (const std::uint32_t j : succ[i]) {
      data->flat.push_back(j | (data->edges_in[j] == 1 ? G::kOneEdge : 0) | (data->waits[j] == 1 ? G::kOneWait : 0));
    }
  }
}

/// What finish() knows of a variable while it walks the recorded ops.
struct Last {
  using allocator_type = std::pmr::polymorphic_allocator<>;
  explicit Last(const allocator_type& a) : readers(a) {}
  std::int64_t writer = -1;
  std::pmr::vector<std::uint32_t> readers;
  std::uint32_t index = 0;  ///< in data_->vars
};

/// Whether `a` and `b` (normalised: sorted by variable) share a variable
/// that one of them writes: the later one must follow the earlier.
bool conflict(const std::vector<AccessSpec>& a, const std::vector<AccessSpec>& b) {
  auto i = a.begin();
  auto j = b.begin();
  while (i != a.end() && j != b.end()) {
    if (std::less<>{}(i->var, j->var)) {
      ++i;
    } else if (std::less<>{}(j->var, i->var)) {
      ++j;
    } else {
      if (i->write || j->write) return true;
      ++i;
      ++j;
    }
  }
  return false;
}

/// a's accesses and b's, normalised (a write wins over a read).
std::vector<AccessSpec> united(const std::vector<AccessSpec>& a, const std::vector<AccessSpec>& b) {
  std::vector<AccessSpec> out;
  out.reserve(a.size() + b.size());
  auto i = a.begin();
  auto j = b.begin();
  while (i != a.end() || j != b.end()) {
    if (j == b.end() || (i != a.end() && std::less<>{}(i->var, j->var))) {
      out.push_back(*i++);
    } else if (i == a.end() || std::less<>{}(j->var, i->var)) {
      out.push_back(*j++);
    } else {
      out.push_back({i->var, i->gen, i->write || j->write});
      ++i;
      ++j;
    }
  }
  return out;
}
}  // namespace

namespace {
/// The recorded op whose edges in come from exactly the ops `ends` (their
/// common successor), or -1. Its entries, if any, are granted by pushes
/// made before the replay, which never wait for it.
std::int64_t sole_follower(const std::pmr::vector<std::uint32_t>& ends, const NodeLists& succ,
                           const std::vector<std::uint32_t>& edges_in) {
  for (const std::uint32_t m : succ[ends.front()]) {
    if (edges_in[m] != ends.size()) continue;
    const bool follows_all = std::all_of(ends.begin() + 1, ends.end(), [&](std::uint32_t r) {
      return std::find(succ[r].begin(), succ[r].end(), m) != succ[r].end();
    });
    if (follows_all) return m;
  }
  return -1;
}

void merge_groups(GraphData* data) {
  // A group stays open for its key until a node outside it that conflicts
  // with it is recorded (that node, or one after it, may depend on the
  // group: merging past it could make a cycle). A member joining an open
  // group moves the group's node to the member's place: every node
  // recorded since the group opened commutes with the members before it,
  // and the ones the new member depends on stay before the node.
  auto& nodes = data->nodes;
  std::vector<std::unique_ptr<GraphNode>> out;
  out.reserve(nodes.size());
  std::unordered_map<std::uint64_t, std::size_t> open;  // key -> the group's node in `out`
  for (std::unique_ptr<GraphNode>& n : nodes) {
    for (auto it = open.begin(); it != open.end();) {
      const bool joins = n->group != nullptr && it->first == n->group_key;
      if (!joins && conflict(out[it->second]->access, n->access)) {
        it = open.erase(it);
      } else {
        ++it;
      }
    }
    if (n->group != nullptr) {
      if (const auto it = open.find(n->group_key); it != open.end()) {
        std::unique_ptr<GraphNode> g = std::move(out[it->second]);
        g->group->absorb(*n->group);
        g->access = united(g->access, n->access);
        g->attrs.priority = std::max(g->attrs.priority, n->attrs.priority);
        it->second = out.size();
        out.push_back(std::move(g));
        continue;  // n's node (its body, its emptied group) goes
      }
      open[n->group_key] = out.size();
    }
    out.push_back(std::move(n));
  }
  std::erase(out, nullptr);
  nodes = std::move(out);
}
}  // namespace

std::shared_ptr<GraphData> GraphRecorder::finish() {
  pending_.reset();
  return build_graph(std::move(data_));
}

std::shared_ptr<GraphData> build_graph(std::shared_ptr<GraphData> data) {
  // The temporaries below, freed at once at the end: a litter of small
  // frees would be swept by the next large allocation (a replay's).
  std::pmr::monotonic_buffer_resource scratch;
  merge_groups(data.get());
  // Each recorded op depends on the last recorded write of each variable it
  // touches and, if it writes, on the reads recorded since that write: the
  // engine's ordering rule applied once, to the recorded order.
  std::pmr::unordered_map<const VarRecord*, Last> last(&scratch);
  auto& nodes = data->nodes;
  // Per node: the index in vars of each of its accesses; the variables it
  // is among the last ops on; its successors (the recorded ops after it that
  // conflict with it with no recorded op between them on that variable: the
  // graph's edges). Packed into GraphData::flat at the end.
  NodeLists var_index(nodes.size(), &scratch);
  NodeLists exits(nodes.size(), &scratch);
  NodeLists succ(nodes.size(), &scratch);
  data->waits.assign(nodes.size(), 0);
  data->edges_in.assign(nodes.size(), 0);
  auto edge = [&](std::int64_t from, std::uint32_t to) {
    std::pmr::vector<std::uint32_t>& out = succ[static_cast<std::size_t>(from)];
    if (!out.empty() && out.back() == to) return;  // already an edge through another variable
    out.push_back(to);
    ++data->waits[to];
    ++data->edges_in[to];
    ++data->edges;
  };
  for (std::uint32_t i = 0; i < nodes.size(); ++i) {
    for (const AccessSpec& a : nodes[i]->access) {
      const auto [it, first] = last.try_emplace(a.var);
      Last& l = it->second;
      if (first) {
        l.index = static_cast<std::uint32_t>(data->vars.size());
        data->vars.push_back({a, i, 0, 0, {}});
      }
      GraphData::VarUse& use = data->vars[l.index];
      var_index[i].push_back(l.index);
      if (a.write) {
        use.spec.write = true;
        ++use.writes;
      }
      // An entry: no recorded op before it on this variable that it must
      // follow (nothing yet, or only reads before a read).
      if (l.writer < 0 && (!a.write || l.readers.empty())) {
        use.entry_ops.push_back(i);
        ++data->waits[i];
      }
      if (l.writer >= 0) edge(l.writer, i);
      if (a.write) {
        for (std::uint32_t r : l.readers) edge(r, i);
        l.readers.clear();
        l.writer = i;
      } else {
        l.readers.push_back(i);
      }
    }
  }
  // The last recorded ops on each variable: the reads after its last
  // write, or that write (every other access comes before them). Several
  // reads would count down a shared count as they end; where one op
  // follows exactly those reads (a stencil's next cell), that op ends the
  // hold alone, when it ends: no count, and no later than its run.
  for (auto& [var, l] : last) {
    GraphData::VarUse& use = data->vars[l.index];
    if (l.readers.size() > 1) {
      if (const std::int64_t m = sole_follower(l.readers, succ, data->edges_in); m >= 0) {
        exits[static_cast<std::size_t>(m)].push_back(l.index);
        use.exit_ops = 1;
        continue;
      }
    }
    if (!l.readers.empty()) {
      for (const std::uint32_t r : l.readers) exits[r].push_back(l.index);
      use.exit_ops = static_cast<std::uint32_t>(l.readers.size());
    } else {
      exits[static_cast<std::size_t>(l.writer)].push_back(l.index);
      use.exit_ops = 1;
    }
  }
  for (std::uint32_t i = 0; i < nodes.size(); ++i) {
    if (GraphGroup* g = nodes[i]->group; g != nullptr) {
      g->followed_by_groups_only = !succ[i].empty() && exits[i].empty() &&
                                   std::all_of(succ[i].begin(), succ[i].end(),
                                               [&](std::uint32_t j) { return nodes[j]->group != nullptr; });
    }
    if (data->waits[i] == 0) {
      data->free_ops.push_back(i);
    } else if (data->edges_in[i] == 0) {
      data->roots.push_back(i);
    }
    if (succ[i].empty()) ++data->sinks;
    if (nodes[i]->oper != nullptr) data->oper_ops.push_back(i);
  }
  // The variables in address order, the order a replay locks them in.
  std::pmr::vector<std::uint32_t> order(data->vars.size(), &scratch);
  for (std::uint32_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    return std::less<>{}(data->vars[a].spec.var, data->vars[b].spec.var);
  });
  std::pmr::vector<std::uint32_t> moved_to(order.size(), &scratch);
  std::vector<GraphData::VarUse> sorted;
  sorted.reserve(order.size());
  for (std::uint32_t k = 0; k < order.size(); ++k) {
    moved_to[order[k]] = k;
    sorted.push_back(std::move(data->vars[order[k]]));
  }
  data->vars = std::move(sorted);
  for (std::uint32_t k = 0; k < data->vars.size(); ++k) {
    if (data->vars[k].exit_ops > 1) data->counted_exits.push_back(k);
  }
  pack_steps(data.get(), var_index, exits, succ, moved_to);
  // The first replay's state, made here: a replay then allocates only when
  // replays of the graph overlap.
  make_spare_replay(*data);
  data->specs.reserve(data->vars.size());
  for (const GraphData::VarUse& use : data->vars) data->specs.push_back(use.spec);
  data->keeper = std::make_unique<VarKeeper>(data->vars.size(), EngineExtension::core(*data->engine)->keepers());
  const std::size_t kept = EngineCore::keep_idle(*data->keeper, data->specs.data(), data->specs.size());
  data->took_all.store(kept == data->specs.size(), std::memory_order_relaxed);  // the first replay plans as later ones
  return data;
}

}  // namespace ordo::detail

// src/graph/capture.cpp - Engine::capture's recorder: the pushes made in the
// scope become graph nodes, their dependencies resolved once at the end.
#include <string>
#include <unordered_map>
#include <utility>

#include "core/engine_core.hpp"
#include "graph_data.hpp"
#include "ordo/detail/extension.hpp"
#include "ordo/graph.hpp"

namespace ordo::detail {

constinit thread_local GraphRecorder* t_recorder = nullptr;

GraphRecorder::GraphRecorder(Engine& engine) : engine_(&engine), data_(std::make_shared<GraphData>()) {
  if (t_recorder != nullptr) {
    throw Error(Errc::invalid_argument,
                "Engine::capture inside another capture on the same thread: captures do not nest");
  }
  data_->engine = &engine;
  t_recorder = this;
}

GraphRecorder::~GraphRecorder() { t_recorder = nullptr; }

OpFn& GraphRecorder::begin_fn() {
  pending_ = std::make_unique<GraphNode>();
  return pending_->fn;
}

void GraphRecorder::commit_fn(const char* call, Context ctx, VarSpan reads, VarSpan writes, const OpAttrs& attrs) {
  std::unique_ptr<GraphNode> node = std::move(pending_);
  const std::string label = std::string(call) + (attrs.name != nullptr ? std::string(" '") + attrs.name + "'" : "");
  if (attrs.prop == FnProperty::delete_var) {
    throw Error(Errc::invalid_argument, label + ": FnProperty::delete_var is reserved for delete_variable");
  }
  if (ctx.device_id < 0 || ctx.is_gpu()) {
    // GPU ops in a capture are to become CUDA graphs (docs/graphs.md): not yet.
    throw Error(Errc::invalid_argument,
                label + " inside Engine::capture: only CPU contexts can be captured (got " +
                    (ctx.is_gpu() ? "gpu " : "cpu ") + std::to_string(ctx.device_id) + ")");
  }
  node->access.resize(reads.size() + writes.size());
  node->access.resize(EngineCore::normalize(reads, writes, node->access.data(), EngineExtension::core(*engine_)));
  node->async = node->fn.is_async();
  node->ctx = ctx;
  node->attrs = attrs;
  if (attrs.name != nullptr) {
    node->name = attrs.name;
    node->attrs.name = node->name.c_str();  // std::string's buffer does not move with the node (heap node)
  }
  data_->nodes.push_back(std::move(node));
}

void GraphRecorder::record_operator(OperatorRecord* rec, std::uint64_t gen, Context ctx, const int* priority) {
  if (rec->gen.load(std::memory_order_acquire) != gen || rec->refs.load(std::memory_order_acquire) == 0) {
    throw Error(Errc::deleted_operator, "push of a deleted operator (inside Engine::capture)");
  }
  if (ctx.device_id < 0 || ctx.is_gpu()) {
    throw Error(Errc::invalid_argument, "push(Operator) inside Engine::capture: only CPU contexts can be captured");
  }
  if (rec->traits != 0) refuse_layer_push(rec->traits);
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
  throw Error(Errc::invalid_argument,
              std::string(call) +
                  " inside Engine::capture: it cannot be recorded (a capture records pushes; move the call "
                  "before or after the capture)");
}

void GraphRecorder::refuse_layer_push(std::uint8_t traits) {
  if ((traits & kFenceExempt) != 0) refuse("an ordo::gpu stream op");
  if ((traits & kNoUserCode) != 0) refuse("an ordo::io request");
  refuse("a coroutine push (ordo::push, co_await engine.push or ordo::wait_for)");  // the lease form
}

std::shared_ptr<GraphData> GraphRecorder::finish() {
  // Each recorded op depends on the last recorded write of each variable it
  // touches and, if it writes, on the reads recorded since that write: the
  // engine's ordering rule applied once, to the recorded order.
  struct Last {
    std::int64_t writer = -1;
    std::vector<std::uint32_t> readers;
  };
  std::unordered_map<const VarRecord*, Last> last;
  auto& nodes = data_->nodes;
  auto edge = [&](std::int64_t from, std::uint32_t to) {
    std::vector<std::uint32_t>& succ = nodes[static_cast<std::size_t>(from)]->succ;
    if (!succ.empty() && succ.back() == to) return;  // already an edge through another variable
    succ.push_back(to);
    ++nodes[to]->preds;
    ++data_->edges;
  };
  for (std::uint32_t i = 0; i < nodes.size(); ++i) {
    for (const AccessSpec& a : nodes[i]->access) {
      const auto [it, first] = last.try_emplace(a.var);
      if (first) data_->vars.push_back({a, i});
      Last& l = it->second;
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
  pending_.reset();
  return std::move(data_);
}

}  // namespace ordo::detail

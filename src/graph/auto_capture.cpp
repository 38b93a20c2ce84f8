// src/graph/auto_capture.cpp - ordo::AutoCapture: an iteration's pushes
// recorded (GraphRecorder hands them here), compared op for op with the
// graph learned from an earlier iteration while they are recorded, then
// replayed with the iteration's own bodies (a closure's per-iteration
// values stay right) or pushed one by one and learned.
#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <utility>

#include "auto_recorder.hpp"
#include "core/engine_core.hpp"
#include "ordo/detail/extension.hpp"
#include "ordo/graph.hpp"

namespace ordo::detail {

OpFn& BodySet::slot(std::size_t i) {
  if (i >= ptrs.size()) [[unlikely]] {
    ptrs.reserve(ptrs.size() + kChunk);  // first: nothing to undo if it throws
    chunks.push_back(std::make_unique<OpFn[]>(kChunk));
    for (std::size_t k = 0; k < kChunk; ++k) ptrs.push_back(&chunks.back()[k]);
  }
  touched = std::max(touched, i + 1);
  OpFn& f = *ptrs[i];
  f.reset();
  return f;
}

void BodySet::release() noexcept {
  if (users.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  for (std::size_t i = 0; i < touched; ++i) ptrs[i]->reset();
  used = touched = 0;
  pool->put(this);
}

BodySet* BodyPool::take() {
  {
    std::lock_guard l(lock);
    if (free != nullptr) {
      BodySet* s = std::exchange(free, free->next);
      ++out;
      return s;
    }
  }
  auto* s = new BodySet;
  s->pool = this;
  std::lock_guard l(lock);
  ++out;
  return s;
}

void BodyPool::put(BodySet* s) noexcept {
  bool last = false;
  {
    std::lock_guard l(lock);
    --out;
    if (!closed) {
      s->next = std::exchange(free, s);
      return;
    }
    last = out == 0;
  }
  delete s;
  if (last) delete this;
}

void BodyPool::close() noexcept {
  BodySet* list = nullptr;
  bool last = false;
  {
    std::lock_guard l(lock);
    closed = true;
    list = std::exchange(free, nullptr);
    last = out == 0;
  }
  while (list != nullptr) delete std::exchange(list, list->next);
  if (last) delete this;
}

namespace {

/// The body of an op of a pushed iteration: calls the iteration's body in
/// its slot, and destroys it when the op goes, as a pushed body would be.
struct PushedBody {
  BodySet* set;
  std::size_t k;
  PushedBody(BodySet* s, std::size_t i) noexcept : set(s), k(i) {}
  PushedBody(PushedBody&& o) noexcept : set(std::exchange(o.set, nullptr)), k(o.k) {}
  PushedBody(const PushedBody&) = delete;
  PushedBody& operator=(const PushedBody&) = delete;
  PushedBody& operator=(PushedBody&&) = delete;
  ~PushedBody() {
    if (set == nullptr) return;
    set->ptrs[k]->reset();
    set->release();
  }
};
struct PushedSync : PushedBody {
  using PushedBody::PushedBody;
  void operator()(const RunContext& rc) { set->ptrs[k]->invoke_sync(rc); }
};
struct PushedAsync : PushedBody {
  using PushedBody::PushedBody;
  void operator()(const RunContext& rc, OnComplete done) { set->ptrs[k]->invoke_async(rc, done); }
};

bool same_name(const char* a, const char* b) noexcept {
  return a == b || (a != nullptr && b != nullptr && std::strcmp(a, b) == 0);
}

bool same_access(const AccessSpec& a, const AccessSpec& b) noexcept {
  return a.var == b.var && a.gen == b.gen && a.write == b.write;
}

}  // namespace

AutoRecorder::AutoRecorder(Engine& engine) : engine_(&engine), pool_(new BodyPool) {}

AutoRecorder::~AutoRecorder() { pool_->close(); }

void AutoRecorder::begin() {
  if (scope_.has_value()) {
    throw Error(Errc::invalid_argument, "ordo::AutoCapture::run inside a run of the same AutoCapture: it does not nest");
  }
  scope_.emplace(*engine_, *this);  // throws inside a capture
  try {
    set_ = pool_->take();
  } catch (...) {
    scope_.reset();
    throw;
  }
  matching_ = learned_ != nullptr;
}

OpFn& AutoRecorder::begin_fn() { return set_->slot(set_->used); }

void AutoRecorder::commit(const char* call, Context ctx, VarSpan reads, VarSpan writes, const OpAttrs& attrs) {
  OpFn& fn = *set_->ptrs[set_->used];
  const std::size_t at = access_.size();
  try {
    check_recordable(call, ctx, attrs, false);
    access_.resize(at + reads.size() + writes.size());
    const std::size_t n =
        EngineCore::normalize(reads, writes, access_.data() + at, EngineExtension::core(*engine_));
    access_.resize(at + n);
    if (n > EngineCore::kMaxAccess) {
      throw Error(Errc::invalid_argument, std::string(call) + (attrs.name != nullptr ? std::string(" '") + attrs.name + "'" : "") +
                                              ": too many variables");
    }
    Op op{call,
          ctx,
          attrs,
          static_cast<std::uint32_t>(at),
          static_cast<std::uint32_t>(n),
          static_cast<std::uint32_t>(vars_.size()),
          static_cast<std::uint32_t>(reads.size()),
          static_cast<std::uint32_t>(writes.size()),
          nullptr,
          0,
          false,
          fn.is_async(),
          fn.type()};
    vars_.insert(vars_.end(), reads.begin(), reads.end());
    vars_.insert(vars_.end(), writes.begin(), writes.end());
    if (matching_) compare(ops_.size(), op);
    ops_.push_back(op);
  } catch (...) {
    // As a push that throws: its body goes, nothing of it stays.
    access_.resize(at);
    fn.reset();
    throw;
  }
  ++set_->used;
}

void AutoRecorder::record_operator(OperatorRecord* rec, std::uint64_t gen, Context ctx, const int* priority) {
  set_->slot(set_->used);  // stays empty: the operator has its body
  OpAttrs attrs = rec->attrs;
  if (priority != nullptr) attrs.priority = *priority;
  const Op op{"push(Operator)", ctx, attrs, 0, 0, 0, 0, 0, rec, gen, priority != nullptr, rec->fn.is_async(), nullptr};
  if (matching_) compare(ops_.size(), op);
  ops_.push_back(op);
  ++set_->used;
}

void AutoRecorder::refuse_group(const char* call, const OpAttrs& attrs) {
  // A GPU op would have to be pushed again through its runtime, which
  // records it into a CUDA graph group instead while a recorder is on.
  throw Error(Errc::invalid_argument,
              std::string(call) + (attrs.name != nullptr ? std::string(" '") + attrs.name + "'" : "") +
                  " inside ordo::AutoCapture::run: GPU ops are not supported there (push them outside run(), or "
                  "capture the step with Engine::capture)");
}

void AutoRecorder::differ(std::size_t i, const Op* op, const char* what) {
  matching_ = false;
  mismatch = "op " + std::to_string(i);
  if (op != nullptr) {
    mismatch += std::string(" (") + op->call + (op->attrs.name != nullptr ? std::string(" '") + op->attrs.name + "'" : "") + ")";
  }
  mismatch += ": ";
  mismatch += what;
}

void AutoRecorder::compare(std::size_t i, const Op& op) {
  const auto& nodes = learned_->nodes;
  if (i >= nodes.size()) return differ(i, &op, "an op more than the learned graph has");
  const GraphNode& n = *nodes[i];
  if (op.oper != nullptr) {
    if (n.kind != GraphNode::Kind::oper || n.oper != op.oper || n.oper_gen != op.oper_gen) {
      return differ(i, &op, "another operator, or an operator where a body was pushed");
    }
  } else if (n.kind != GraphNode::Kind::fn || n.body_type != op.type) {
    return differ(i, &op, "another body type, or a body where an operator was pushed");
  }
  if (n.async != op.async) return differ(i, &op, "sync where async was pushed, or the reverse");
  if (n.ctx != op.ctx) return differ(i, &op, "another context");
  const OpAttrs& a = n.attrs;
  const OpAttrs& b = op.attrs;
  if (a.prop != b.prop || a.priority != b.priority || a.always_run != b.always_run ||
      a.error_to_awaiter != b.error_to_awaiter || a.inline_ok != b.inline_ok) {
    return differ(i, &op, "other attributes (property, priority or flags)");
  }
  if (!same_name(a.name, b.name)) return differ(i, &op, "another name");
  if (op.oper != nullptr) return;  // same operator: same variables
  const std::span<const AccessSpec> mine(access_.data() + op.access_at, op.access_n);
  if (!std::equal(mine.begin(), mine.end(), n.access.begin(), n.access.end(), same_access)) {
    differ(i, &op, "other variables or access modes");
  }
}

void AutoRecorder::end() {
  scope_.reset();
  BodySet* set = std::exchange(set_, nullptr);
  const std::size_t n = ops_.size();
  if (matching_ && n < learned_->nodes.size()) differ(n, nullptr, "fewer ops than the learned graph has");
  bool relearn = !matching_;
  if (matching_) {
    set->fns = set->ptrs.data();
    set->users.store(1, std::memory_order_relaxed);  // the replay's (release(): when it is done)
    if (start_replay_bodies(*engine_, learned_, set)) {
      ++replayed;
      clear();
      return;
    }
    set->users.store(0, std::memory_order_relaxed);
    mismatch = "the learned graph was not replayed (the engine pushes a replay's ops one by one with a profiler "
               "or a GPU fence gate on, or a variable or operator was deleted): pushed";
  } else if (learned_ == nullptr) {
    mismatch = "no graph learned yet";
  }
  push_recorded(set);
  if (relearn) learn();
  clear();
}

void AutoRecorder::fail() {
  scope_.reset();
  mismatch = "the iteration threw: the ops recorded before the throw were pushed";
  push_recorded(std::exchange(set_, nullptr));
  clear();
}

void AutoRecorder::push_recorded(BodySet* set) {
  try {
    push_all(set);
  } catch (...) {
    clear();
    throw;
  }
  ++pushed;
}

void AutoRecorder::push_all(BodySet* set) {
  const std::size_t n = ops_.size();
  std::size_t bodies = 0;
  for (const Op& op : ops_) bodies += op.oper == nullptr ? 1 : 0;
  set->users.store(bodies + 1, std::memory_order_relaxed);  // + this call's
  std::size_t k = 0;
  try {
    for (; k < n; ++k) {
      const Op& op = ops_[k];
      if (op.oper != nullptr) {
        const Operator handle(op.oper, op.oper_gen);
        if (op.priority_set) {
          engine_->push(handle, op.ctx, op.attrs.priority);
        } else {
          engine_->push(handle, op.ctx);
        }
        continue;
      }
      const VarSpan reads(std::span<const Var>(vars_.data() + op.vars_at, op.reads));
      const VarSpan writes(std::span<const Var>(vars_.data() + op.vars_at + op.reads, op.writes));
      // A PushedBody given to a push is released with its op, or here if the push throws.
      if (op.async) {
        engine_->push_async(PushedAsync(set, k), op.ctx, reads, writes, op.attrs);
      } else {
        engine_->push_sync(PushedSync(set, k), op.ctx, reads, writes, op.attrs);
      }
    }
  } catch (...) {
    // The ops after the one that threw are never pushed, as after a push
    // that throws in the program: their bodies go.
    std::size_t left = 0;
    for (std::size_t j = k + 1; j < n; ++j) {
      if (ops_[j].oper != nullptr) continue;
      set->ptrs[j]->reset();
      ++left;
    }
    if (left > 0) set->users.fetch_sub(left, std::memory_order_acq_rel);
    set->release();
    throw;
  }
  set->release();
}

void AutoRecorder::learn() {
  if (ops_.empty()) {
    learned_.reset();
    return;
  }
  try {
    auto data = std::make_shared<GraphData>();
    data->engine = engine_;
    data->nodes.reserve(ops_.size());
    for (const Op& op : ops_) {
      auto node = std::make_unique<GraphNode>();
      node->async = op.async;
      node->ctx = op.ctx;
      node->attrs = op.attrs;
      if (op.oper != nullptr) {
        node->kind = GraphNode::Kind::oper;
        node->oper = op.oper;
        node->oper_gen = op.oper_gen;
        node->access = op.oper->access;
      } else {
        node->body_type = op.type;
        node->access.assign(access_.begin() + op.access_at, access_.begin() + op.access_at + op.access_n);
        if (op.attrs.name != nullptr) {
          node->name = op.attrs.name;
          node->attrs.name = node->name.c_str();  // the graph outlives the caller's string
        }
      }
      data->nodes.push_back(std::move(node));
    }
    learned_ = build_graph(std::move(data));
  } catch (const std::exception& e) {
    // The iteration was pushed; the next ones are pushed too until one is learned.
    learned_.reset();
    mismatch += std::string("; not learned: ") + e.what();
  }
}

void AutoRecorder::clear() noexcept {
  ops_.clear();
  access_.clear();
  vars_.clear();
  matching_ = false;
}

}  // namespace ordo::detail

namespace ordo {

AutoCapture::AutoCapture(Engine& engine) : rec_(std::make_unique<detail::AutoRecorder>(engine)) {}
AutoCapture::~AutoCapture() = default;
void AutoCapture::begin() { rec_->begin(); }
void AutoCapture::end() { rec_->end(); }
void AutoCapture::fail() { rec_->fail(); }
std::uint64_t AutoCapture::replayed() const noexcept { return rec_->replayed; }
std::uint64_t AutoCapture::pushed() const noexcept { return rec_->pushed; }
const std::string& AutoCapture::last_mismatch() const noexcept { return rec_->mismatch; }
std::size_t AutoCapture::learned_size() const noexcept { return rec_->learned_size(); }

}  // namespace ordo

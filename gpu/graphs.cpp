// gpu/graphs.cpp - GPU ops inside Engine::capture: each is recorded as a
// group of one (a GraphGroup the recorder merges with the next ones of its
// device and stream, src/graph/capture.cpp); a group is one engine op whose
// body launches one backend graph (a CUDA graph), captured from the members'
// bodies at the group's first run. docs/gpu.md, "Captured".
#include <algorithm>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "runtime_impl.hpp"

namespace ordo::gpu {
namespace detail {

/// Consecutive recorded GPU ops of one logical device and stream kind, run
/// as one engine op. Built by the capturing thread; from the end of the
/// capture on, `calls`, `plan`, `device` and `prop` are immutable.
struct CapturedGroup final : ordo::detail::GraphGroup {
  CapturedGroup(Runtime* r, std::shared_ptr<GraphLinks> l, int dev, FnProperty p)
      : rt(r), links(std::move(l)), device(dev), prop(p) {
    std::lock_guard lock(links->mutex);
    links->live.insert(this);
  }
  ~CapturedGroup() override {
    std::lock_guard lock(links->mutex);
    links->live.erase(this);
    if (exec != nullptr && links->backend != nullptr) links->backend->destroy_graph(exec);
  }
  CapturedGroup(const CapturedGroup&) = delete;
  CapturedGroup& operator=(const CapturedGroup&) = delete;

  void absorb(ordo::detail::GraphGroup& later) override {
    auto& g = static_cast<CapturedGroup&>(later);
    for (auto& c : g.calls) calls.push_back(std::move(c));
    g.calls.clear();
    plan.access.insert(plan.access.end(), g.plan.access.begin(), g.plan.access.end());
    plan.normalize();
  }

  Runtime* rt;
  std::shared_ptr<GraphLinks> links;
  int device;
  FnProperty prop;  ///< the stream kind (Runtime::Impl::pick): compute, h2d or d2h
  std::vector<std::shared_ptr<GpuCall>> calls;  ///< the members' bodies, in recorded order
  OpPlan plan;                                  ///< the members' variables, united

  /// Guards `stream` and `exec`, and makes each launch (its numbering
  /// host task and the graph) one step on the stream.
  std::mutex mutex;
  /// The stream every launch goes to, picked at the first run: launches of
  /// one group stay in order on one stream, which the numbering relies on.
  StreamState* stream = nullptr;
  /// The backend graph, captured at the first run that succeeded. Destroyed
  /// by the group, or by ~Runtime if the group outlives it (links->mutex).
  GraphHandle exec = nullptr;
  /// The launch running on `stream` and the number its numbering host task
  /// got: a captured host task that throws fails `stream` from there on, as
  /// a pushed one fails it from its own number. Written by that host task,
  /// read by the graph's host tasks after it: one stream, in order.
  StreamState* launch_st = nullptr;
  std::uint64_t launch_k = 0;
};

/// A group's node body: one launch per run; completes (async) at enqueue
/// or once the launched work has finished (Runtime::run_group says when).
struct GroupRun {
  std::shared_ptr<CapturedGroup> g;
  void operator()(const RunContext& rc, OnComplete done) const { g->rt->run_group(*g, rc, std::move(done)); }
};

}  // namespace detail

using detail::CapturedGroup;

namespace {
/// The stream kind of a GPU op, as Runtime::Impl::pick reads its property.
int stream_kind(FnProperty prop) noexcept {
  if (prop == FnProperty::copy_to_device) return 1;
  if (prop == FnProperty::copy_from_device) return 2;
  return 0;
}
}  // namespace

// ------------------------------------------------------------------ recording

void Runtime::record(std::shared_ptr<detail::GpuCall> call, Context ctx, VarSpan reads, VarSpan writes,
                     const OpAttrs& attrs) {
  Impl& m = *impl_;
  m.check_device(ctx);
  const int kind = stream_kind(attrs.prop);
  auto group = std::make_shared<CapturedGroup>(this, m.links, ctx.device_id,
                                               kind == 0 ? FnProperty::normal : attrs.prop);
  group->calls.push_back(std::move(call));
  fill_plan(group->plan, reads, writes, attrs);
  group->plan.name = nullptr;  // the caller's string; groups have no slice in the trace
  // One key per runtime, logical device and stream kind (user-space
  // addresses leave the top 16 bits free).
  const std::uint64_t key = reinterpret_cast<std::uintptr_t>(this) |
                            (static_cast<std::uint64_t>(ctx.device_id * 3 + kind + 1) << 48);
  CapturedGroup* raw = group.get();
  ordo::detail::GraphRecorder& rec = *ordo::detail::t_recorder;
  rec.begin_fn().emplace(detail::GroupRun{std::move(group)});
  rec.commit_group("ordo::gpu::Runtime::push", ctx, reads, writes, attrs, raw, key);
}

std::uint64_t Runtime::keep_operator(ordo::Operator op, std::shared_ptr<detail::GpuCall> call, VarSpan reads,
                                     VarSpan writes, const OpAttrs& attrs) {
  Impl& m = *impl_;
  try {
    Impl::OperatorEntry e{std::move(call), {reads.begin(), reads.end()}, {writes.begin(), writes.end()}, attrs, {}};
    if (attrs.name != nullptr) {
      e.name = attrs.name;
      e.attrs.name = nullptr;  // set once the entry sits in the map (a string's buffer may move with it)
    }
    std::lock_guard lock(m.operators_mutex);
    const std::uint64_t id = ++m.next_operator;
    Impl::OperatorEntry& kept = m.operators.emplace(id, std::move(e)).first->second;
    if (!kept.name.empty()) kept.attrs.name = kept.name.c_str();
    return id;
  } catch (...) {
    engine_.delete_operator(op);
    throw;
  }
}

void Runtime::record_operator(Operator op, Context ctx, const int* priority) {
  Impl& m = *impl_;
  std::shared_ptr<detail::GpuCall> call;
  std::vector<Var> reads, writes;
  OpAttrs attrs;
  std::string name;
  {
    std::lock_guard lock(m.operators_mutex);
    const auto it = m.operators.find(op.id_);
    if (op.id_ == 0 || it == m.operators.end()) {
      throw Error(Errc::deleted_operator, "push of a deleted or empty ordo::gpu::Operator (inside Engine::capture)");
    }
    call = it->second.call;
    reads = it->second.reads;
    writes = it->second.writes;
    attrs = it->second.attrs;
    name = it->second.name;
  }
  attrs.name = name.empty() ? nullptr : name.c_str();  // copied by the recorder
  if (priority != nullptr) attrs.priority = *priority;
  record(std::move(call), ctx, reads, writes, attrs);
}

// ------------------------------------------------------------------ running a group

void Runtime::run_group(CapturedGroup& g, const RunContext& rc, OnComplete done) {
  Impl& m = *impl_;
  std::exception_ptr error;
  StreamState* s = nullptr;
  std::vector<Event*> waits;
  try {
    std::lock_guard lock(g.mutex);
    if (g.stream == nullptr) g.stream = m.pick(g.device, g.prop, rc.worker);
    s = g.stream;
    m.backend->before_body(s->phys);
    m.wait_fences(s, g.plan, waits);
    if (g.exec == nullptr) capture_group(g);
    m.enqueue_host(s, [&g, s](std::uint64_t k) {
      g.launch_st = s;
      g.launch_k = k;
    });
    m.backend->launch(g.exec, s->handle);
    m.n_ops.fetch_add(g.calls.size(), std::memory_order_relaxed);
  } catch (...) {
    error = std::current_exception();
  }
  for (Event* e : waits) m.unref(e);
  if (!error && g.followed_by_groups_only) {
    // Only groups follow it in the graph: they wait for its fences on the
    // device, as pushed GPU ops do, and a failure reaches them along those
    // waits; it completes at enqueue, as a pushed GPU op does.
    detail::OpSlice none;
    end_op(Stream(this, s), g.plan, none, error);
  } else if (!error) {
    // Complete once the work has finished: inside a replay the recorded ops
    // after the group wait for it only through its completion (no fence
    // holds them), and a failure then reaches the group's writes and the
    // replay's awaiter as a pushed op's would.
    try {
      complete_when_done(Stream(this, s), done);
      return;
    } catch (...) {
      error = std::current_exception();
      try {
        m.backend->synchronize_stream(s->handle);  // no event to watch: wait here rather than complete early
      } catch (...) {
      }
    }
  }
  done(std::move(error));
}

void Runtime::capture_group(CapturedGroup& g) {
  Impl& m = *impl_;
  std::lock_guard lock(m.capture_mutex);
  StreamState* cs = m.capture_stream(g.device);
  m.backend->before_body(cs->phys);
  m.backend->begin_capture(cs->handle);
  cs->capturing = &g;
  try {
    const Stream st(this, cs);
    for (const auto& call : g.calls) {
      (*call)(st);
      m.backend->after_body();  // a launch error fails the capture, named as a pushed op's would be
    }
  } catch (...) {
    cs->capturing = nullptr;
    try {
      m.backend->destroy_graph(m.backend->end_capture(cs->handle));
    } catch (...) {
      // the capture itself failed: nothing to keep
    }
    throw;
  }
  cs->capturing = nullptr;
  const GraphHandle h = m.backend->end_capture(cs->handle);
  std::lock_guard links(g.links->mutex);
  g.exec = h;
}

// ------------------------------------------------------------------ the runtime's side

detail::StreamState* Runtime::Impl::capture_stream(int logical_device) {
  if (capture_streams.empty()) capture_streams.resize(devices.size());
  std::unique_ptr<StreamState>& cs = capture_streams[static_cast<std::size_t>(logical_device)];
  if (cs == nullptr) {
    auto st = std::make_unique<StreamState>();
    st->phys = logical_device % physical;
    st->logical = logical_device;
    st->handle = backend->create_stream(st->phys);
    cs = std::move(st);
  }
  return cs.get();
}

void Runtime::Impl::captured_host_task(StreamState* st, HostFn fn) {
  CapturedGroup* g = st->capturing;
  backend->host_task(st->handle, [this, g, fn = std::move(fn)] { run_host(g->launch_st, g->launch_k, fn); });
}

void Runtime::Impl::close_graphs() noexcept {
  {
    std::lock_guard lock(links->mutex);
    for (CapturedGroup* g : links->live) {
      if (g->exec != nullptr) backend->destroy_graph(g->exec);
      g->exec = nullptr;
    }
    links->backend = nullptr;
  }
  for (auto& cs : capture_streams) {
    if (cs != nullptr) backend->destroy_stream(cs->handle);
  }
}

}  // namespace ordo::gpu

// src/profiler/profiler.cpp - recording events and joining them per op.
#include "profiler.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <new>

#include "ordo/error.hpp"
#include "ordo/fence.hpp"
#include "core/worker_pool.hpp"

namespace ordo::detail {

namespace {

constexpr std::uint32_t kMaxNames = 65536;
constexpr std::uint32_t kNameUnnamed = 0;  ///< ""
constexpr std::uint32_t kNameFull = 1;     ///< stands for names past kMaxNames
constexpr std::uint64_t kNoMessage = ~std::uint64_t{0};

std::atomic<std::uint64_t> g_profiler_uid{0};
std::atomic<std::uint64_t> g_thread_uid{0};

/// This thread's process-unique number (0: not assigned yet).
thread_local std::uint64_t t_thread_uid = 0;
/// The buffer this thread used last, and the profiler it belongs to.
thread_local struct {
  std::uint64_t profiler = 0;
  ThreadBuffer* buffer = nullptr;
} t_last;

// Packed attributes of a push event.
std::uint64_t pack(ProfiledKind kind, const OpRecord* op) noexcept {
  return static_cast<std::uint64_t>(kind) | (static_cast<std::uint64_t>(op->prop) << 4) |
         (static_cast<std::uint64_t>(op->ctx.type) << 8) |
         (static_cast<std::uint64_t>(static_cast<std::uint16_t>(op->ctx.device_id)) << 16) |
         (static_cast<std::uint64_t>(static_cast<std::uint32_t>(op->priority)) << 32);
}

void unpack(std::uint64_t x, OpProfile& p) noexcept {
  p.kind = static_cast<ProfiledKind>(x & 0xF);
  p.prop = static_cast<FnProperty>((x >> 4) & 0xF);
  p.ctx.type = static_cast<DeviceType>((x >> 8) & 0xFF);
  p.ctx.device_id = static_cast<int>((x >> 16) & 0xFFFF);
  p.priority = static_cast<int>(static_cast<std::uint32_t>(x >> 32));
}

}  // namespace

ProfilerCore::ProfilerCore(const ProfileOptions& options, const void* engine)
    : opts_(options),
      engine_(engine),
      uid_(g_profiler_uid.fetch_add(1, std::memory_order_relaxed) + 1),
      epoch_(std::chrono::steady_clock::now()),
      chunks_left_(static_cast<std::int64_t>((std::max<std::size_t>(options.max_events, 1) + kChunkEvents - 1) /
                                             kChunkEvents)) {
  intern_string("");
  intern_string("<more than 65536 distinct names>");
}

// ---------------------------------------------------------------------------
// Recording

ThreadBuffer* ProfilerCore::buffer() noexcept {
  if (t_last.profiler == uid_) [[likely]] return t_last.buffer;
  return register_thread();
}

ThreadBuffer* ProfilerCore::register_thread() noexcept {
  if (t_thread_uid == 0) t_thread_uid = g_thread_uid.fetch_add(1, std::memory_order_relaxed) + 1;
  try {
    std::lock_guard lock(registry_mutex_);
    ThreadBuffer*& slot = by_thread_[t_thread_uid];
    if (slot == nullptr) {
      auto b = std::make_unique<ThreadBuffer>();
      b->index = static_cast<std::uint32_t>(buffers_.size());
      const ThreadState& ts = t_state;
      if (ts.engine == engine_ && ts.pool != nullptr) {
        b->name = ts.pool->name() + "/" + std::to_string(ts.index);
      } else {
        b->name = "thread " + std::to_string(t_thread_uid);
        if (::syscall(SYS_gettid) == ::getpid()) b->name += " (main)";
      }
      slot = b.get();
      buffers_.push_back(std::move(b));
    }
    t_last.profiler = uid_;
    t_last.buffer = slot;
    return slot;
  } catch (...) {
    return nullptr;  // out of memory: this event is lost (not counted: no buffer to count it in)
  }
}

void ProfilerCore::record(EventType type, std::uint64_t op, std::int64_t t, std::uint64_t x, std::uint32_t y,
                          std::uint8_t flags) noexcept {
  ThreadBuffer* b = buffer();
  if (b == nullptr) return;
  std::lock_guard lock(b->lock);
  append(b, Event{t, op, x, y, type, flags});
}

bool ProfilerCore::grow(ThreadBuffer* b) noexcept {
  // A new chunk, if the budget has one (relaxed: a counter, nothing to publish).
  if (chunks_left_.fetch_sub(1, std::memory_order_relaxed) <= 0) {
    chunks_left_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  try {
    b->chunks.emplace_back(new EventChunk);
  } catch (...) {
    chunks_left_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  b->next = b->chunks.back()->ev;
  b->limit = b->next + kChunkEvents;
  return true;
}

std::uint32_t ProfilerCore::intern_string(std::string_view s) noexcept {
  try {
    std::lock_guard lock(names_mutex_);
    if (auto it = name_ids_.find(s); it != name_ids_.end()) return it->second;
    if (names_.size() >= kMaxNames) return kNameFull;
    names_.push_back(std::make_unique<std::string>(s));
    const auto id = static_cast<std::uint32_t>(names_.size() - 1);
    name_ids_.emplace(*names_.back(), id);
    return id;
  } catch (...) {
    return kNameFull;
  }
}

std::uint32_t ProfilerCore::intern(ThreadBuffer* b, const char* name) noexcept {
  if (name == nullptr) return kNameUnnamed;
  // A small per-thread cache keyed by the pointer, checked by content: a
  // pointer may be reused for another name (an operator's name freed with it).
  ThreadBuffer::NameCache& c = b->names[(reinterpret_cast<std::uintptr_t>(name) >> 3) & 15];
  if (c.ptr == name && std::strcmp(name, c.interned) == 0) return c.id;
  const std::uint32_t id = intern_string(name);
  if (id == kNameFull) return id;
  std::lock_guard lock(names_mutex_);  // the strings never move; the vector may
  c.ptr = name;
  c.interned = names_[id]->c_str();
  c.id = id;
  return id;
}

std::uint32_t ProfilerCore::new_id(ThreadBuffer* b) noexcept {
  if (b->next_id == b->id_limit) {
    // relaxed: a counter; ids only need to be distinct.
    b->next_id = next_id_block_.fetch_add(kIdBlock, std::memory_order_relaxed);
    if (b->next_id == 0) b->next_id = 1;  // wrapped around (after 4 G ops): 0 means "no id"
    b->id_limit = b->next_id + kIdBlock - 1;
  }
  return b->next_id++;
}

void ProfilerCore::on_push(OpRecord* op, const AccessSpec* specs, std::size_t n) noexcept {
  const std::int64_t t = now();
  ThreadBuffer* b = buffer();
  if (b == nullptr) {
    op->prof_id = 0;
    return;
  }
  op->prof_id = new_id(b);
  ProfiledKind kind = ProfiledKind::sync;
  switch (op->kind) {
    case OpKind::fn:
      kind = op->prop == FnProperty::delete_var ? ProfiledKind::delete_variable
             : op->fn.is_async()                ? ProfiledKind::async
                                                : ProfiledKind::sync;
      break;
    case OpKind::oper:
      kind = op->oper->fn.is_async() ? ProfiledKind::async : ProfiledKind::sync;
      break;
    case OpKind::wait_var:
      kind = ProfiledKind::wait_for_var;
      break;
    case OpKind::posted:
      kind = ProfiledKind::post;
      break;
  }
  const std::uint32_t name = intern(b, op->name);
  std::lock_guard lock(b->lock);  // once for the push and its accesses
  append(b, Event{t, op->prof_id, pack(kind, op), name, EventType::push, 0});
  if (b->releasing != 0) append(b, Event{t, op->prof_id, b->releasing, 0, EventType::slice_link, kLinkPush});
  for (std::size_t i = 0; i < n; ++i) {
    append(b, Event{t, op->prof_id, specs[i].var->id, specs[i].write ? 1U : 0U, EventType::access, 0});
  }
}

void ProfilerCore::on_push_failed(const OpRecord* op) noexcept {
  record(EventType::push_failed, op->prof_id, now(), 0, 0, 0);
}

void ProfilerCore::on_start(const OpRecord* op) noexcept {
  const std::int64_t t = now();
  ThreadBuffer* b = buffer();
  if (b == nullptr) return;
  b->running = op->prof_id;  // slices begun here until it ends (or another op starts) are its own
  std::lock_guard lock(b->lock);
  append(b, Event{t, op->prof_id, 0, 0, EventType::start, 0});
}

void ProfilerCore::on_body_end(std::uint32_t id) noexcept {
  const std::int64_t t = now();
  ThreadBuffer* b = buffer();
  if (b == nullptr) return;
  // `running` stays: a coroutine holding a lease goes on here once its
  // body has returned, and what it submits is the lease's (until its end).
  std::lock_guard lock(b->lock);
  append(b, Event{t, id, 0, 0, EventType::body_end, 0});
}

bool ProfilerCore::on_grant_access(const OpRecord* from, OpRecord* to, const VarRecord* var) noexcept {
  // Read to's id before the decrement, after which another grant may run,
  // finish and recycle it.
  const std::uint64_t to_id = to->prof_id;
  const bool released = to->wait.fetch_sub(1, std::memory_order_acq_rel) == 1;
  // Stamped with from's end (on_end just ran on this thread): one clock
  // read less per dependency; the grant is part of that completion.
  ThreadBuffer* b = buffer();
  if (b != nullptr) {
    std::lock_guard lock(b->lock);
    append(b, Event{b->last_end, to_id, from->prof_id, var->id, EventType::edge, released ? std::uint8_t{1} : std::uint8_t{0}});
  }
  return released;
}

void ProfilerCore::on_end(const OpRecord* op, const ErrorRecord* own_error) noexcept {
  const std::int64_t t = now();
  ProfiledStatus status = ProfiledStatus::ok;
  std::uint64_t message = kNoMessage;
  if (own_error != nullptr) {
    status = ProfiledStatus::failed;
    try {
      message = intern_string(describe(own_error->exception));
    } catch (...) {
      message = kNoMessage;
    }
  } else if (const ErrorRecord* inherited = op->error.load(std::memory_order_acquire);
             inherited != nullptr && !op->always_run) {
    // Skipped because of this error; a wait_for_var is not skipped: it
    // finished, and its caller rethrows the error.
    status = op->kind == OpKind::wait_var ? ProfiledStatus::ok : ProfiledStatus::skipped;
    try {
      message = intern_string(describe(inherited->exception));
    } catch (...) {
      message = kNoMessage;
    }
  }
  ThreadBuffer* b = buffer();
  if (b == nullptr) return;
  b->last_end = t;  // the time of the grants this completion makes next (on_grant_access)
  if (b->running == op->prof_id) b->running = 0;
  std::lock_guard lock(b->lock);
  append(b, Event{t, op->prof_id, message, static_cast<std::uint32_t>(status), EventType::end, 0});
  if (b->releasing != 0) append(b, Event{t, op->prof_id, b->releasing, 0, EventType::slice_link, kLinkEnd});
}

void ProfilerCore::on_wait_all(std::int64_t called) noexcept {
  ThreadBuffer* b = buffer();
  if (b == nullptr) return;
  const std::uint64_t id = new_id(b);
  record(EventType::wait_all, id, called, static_cast<std::uint64_t>(now()), 0, 0);
}

std::uint64_t ProfilerCore::slice_begin(SliceCategory category, const char* name, const char* track,
                                        std::uint64_t bytes, std::int32_t peer, std::uint64_t key,
                                        std::uint64_t var) noexcept {
  const std::int64_t t = now();
  ThreadBuffer* b = buffer();
  if (b == nullptr) return 0;
  // Slices share the ops' ids (one counter): both are joined by id in data().
  const std::uint64_t id = new_id(b);
  const std::uint32_t name_id = intern(b, name);
  const std::uint32_t track_id = intern(b, track);
  std::lock_guard lock(b->lock);
  append(b, Event{t, id, bytes, name_id, EventType::slice_begin, static_cast<std::uint8_t>(category)});
  append(b, Event{t, id, b->running, track_id, EventType::slice_info, 0});
  if (peer >= 0) append(b, Event{t, id, key, static_cast<std::uint32_t>(peer), EventType::slice_peer, 0});
  if (var != 0) append(b, Event{t, id, var, 0, EventType::slice_var, 0});
  return id;
}

void ProfilerCore::slice_end(std::uint64_t slice, std::int64_t result) noexcept {
  if (slice == 0) return;
  record(EventType::slice_end, slice, now(), static_cast<std::uint64_t>(result), 0, 0);
}

void ProfilerCore::slice_end_at(std::uint64_t slice, std::chrono::steady_clock::time_point begin,
                                std::chrono::steady_clock::time_point end, std::uint64_t bytes,
                                std::int64_t result) noexcept {
  if (slice == 0) return;
  auto since_epoch = [&](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t - epoch_).count();
  };
  ThreadBuffer* b = buffer();
  if (b == nullptr) return;
  std::lock_guard lock(b->lock);
  append(b, Event{since_epoch(begin), slice, bytes, 0, EventType::slice_span, 0});
  append(b, Event{since_epoch(end), slice, static_cast<std::uint64_t>(result), 0, EventType::slice_end, 0});
}

void ProfilerCore::slice_after(std::uint64_t slice, std::uint64_t before, bool same_stream) noexcept {
  if (slice == 0 || before == 0) return;
  record(EventType::slice_after, slice, 0, before, 0, same_stream ? std::uint8_t{1} : std::uint8_t{0});
}

void ProfilerCore::fence_release(std::uint64_t slice, const HeldOp& op) noexcept {
  // Read before the release: the op may run, finish and be recycled after it.
  if (slice != 0) record(EventType::slice_link, op.op_->prof_id, now(), slice, 0, kLinkFence);
}

void ProfilerCore::release_begin(std::uint64_t slice) noexcept {
  if (ThreadBuffer* b = buffer(); b != nullptr) b->releasing = slice;
}

void ProfilerCore::release_end() noexcept {
  if (ThreadBuffer* b = buffer(); b != nullptr) b->releasing = 0;
}

std::uint64_t profile_slice_begin(ProfilerCore* p, SliceCategory category, const char* name, const char* track,
                                  std::uint64_t bytes, std::int32_t peer, std::uint64_t key,
                                  std::uint64_t var) noexcept {
  return p->slice_begin(category, name, track, bytes, peer, key, var);
}
void profile_slice_end(ProfilerCore* p, std::uint64_t slice, std::int64_t result) noexcept {
  p->slice_end(slice, result);
}
void profile_slice_end_at(ProfilerCore* p, std::uint64_t slice, std::chrono::steady_clock::time_point begin,
                          std::chrono::steady_clock::time_point end, std::uint64_t bytes,
                          std::int64_t result) noexcept {
  p->slice_end_at(slice, begin, end, bytes, result);
}
void profile_slice_after(ProfilerCore* p, std::uint64_t slice, std::uint64_t before, bool same_stream) noexcept {
  p->slice_after(slice, before, same_stream);
}
void profile_fence_release(ProfilerCore* p, std::uint64_t slice, const HeldOp& op) noexcept {
  p->fence_release(slice, op);
}
void profile_release_begin(ProfilerCore* p, std::uint64_t slice) noexcept { p->release_begin(slice); }
void profile_release_end(ProfilerCore* p) noexcept { p->release_end(); }

// ---------------------------------------------------------------------------
// Reading

std::uint64_t ProfilerCore::dropped() const {
  std::lock_guard lock(registry_mutex_);
  std::uint64_t n = 0;
  for (const auto& b : buffers_) {
    std::lock_guard block(b->lock);
    n += b->dropped;
  }
  return n;
}

void ProfilerCore::clear() {
  std::lock_guard lock(registry_mutex_);
  for (const auto& b : buffers_) {
    std::vector<std::unique_ptr<EventChunk>> chunks;
    {
      std::lock_guard block(b->lock);
      chunks.swap(b->chunks);
      b->count = 0;
      b->dropped = 0;
      b->next = b->limit = nullptr;
    }
    chunks_left_.fetch_add(static_cast<std::int64_t>(chunks.size()), std::memory_order_relaxed);
  }
}

ProfileData ProfilerCore::data() const {
  ProfileData out;
  out.clock_origin_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(epoch_.time_since_epoch()).count();
  struct Tagged {
    Event e;
    std::uint32_t thread;
  };
  std::vector<Tagged> events;
  {
    std::lock_guard lock(registry_mutex_);
    for (const auto& b : buffers_) {
      out.threads.push_back(b->name);
      std::lock_guard block(b->lock);
      out.dropped_events += b->dropped;
      events.reserve(events.size() + b->count);
      for (std::size_t i = 0; i < b->count; ++i) {
        events.push_back({b->chunks[i / kChunkEvents]->ev[i % kChunkEvents], b->index});
      }
    }
  }
  std::vector<std::string> names;
  {
    std::lock_guard lock(names_mutex_);
    names.reserve(names_.size());
    for (const auto& s : names_) names.push_back(*s);
  }
  auto name_of = [&](std::uint64_t id) -> std::string { return id < names.size() ? names[id] : std::string(); };

  // Pass 1: one OpProfile per push (or wait_for_all).
  std::unordered_map<std::uint64_t, std::size_t> index;
  std::vector<OpProfile> ops;
  for (const Tagged& te : events) {
    const Event& e = te.e;
    if (e.op == 0 || (e.type != EventType::push && e.type != EventType::wait_all)) continue;
    OpProfile p;
    p.id = e.op;
    p.push_thread = static_cast<int>(te.thread);
    if (e.type == EventType::push) {
      unpack(e.x, p);
      p.name = name_of(e.y);
      p.push_ns = e.t;
    } else {
      p.kind = ProfiledKind::wait_for_all;
      p.name = "wait_for_all";
      p.push_ns = p.grant_ns = p.start_ns = e.t;
      p.end_ns = static_cast<std::int64_t>(e.x);
      p.run_thread = p.end_thread = static_cast<int>(te.thread);
      p.status = ProfiledStatus::ok;
    }
    index.emplace(e.op, ops.size());
    ops.push_back(std::move(p));
  }
  // Slices: their begin events, then the rest of theirs.
  std::unordered_map<std::uint64_t, std::size_t> slice_index;
  std::vector<SliceProfile> slices;
  std::vector<SliceRelease> links;  // ids as recorded, renumbered below
  std::vector<SliceWait> waits;     // the same
  for (const Tagged& te : events) {
    const Event& e = te.e;
    if (e.type != EventType::slice_begin || e.op == 0) continue;
    SliceProfile sp;
    sp.id = e.op;
    sp.category = e.flags == static_cast<std::uint8_t>(SliceCategory::gpu)        ? "gpu"
                  : e.flags == static_cast<std::uint8_t>(SliceCategory::transfer) ? "transfer"
                                                                                   : "io";
    sp.name = name_of(e.y);
    sp.begin_ns = e.t;
    sp.bytes = e.x;
    sp.thread = static_cast<int>(te.thread);
    slice_index.emplace(e.op, slices.size());
    slices.push_back(std::move(sp));
  }
  for (const Tagged& te : events) {
    const Event& e = te.e;
    if (e.type == EventType::slice_link) {
      links.push_back({e.x, e.op, e.flags == kLinkEnd, e.flags == kLinkFence});
      continue;
    }
    if (e.type == EventType::slice_after) {
      waits.push_back({e.x, e.op, e.flags != 0});
      continue;
    }
    if (e.type != EventType::slice_info && e.type != EventType::slice_peer && e.type != EventType::slice_var &&
        e.type != EventType::slice_end && e.type != EventType::slice_span) {
      continue;
    }
    auto it = slice_index.find(e.op);
    if (it == slice_index.end()) continue;  // begun before clear(), or its begin was dropped
    SliceProfile& sp = slices[it->second];
    if (e.type == EventType::slice_info) {
      sp.launched_by = e.x;
      sp.track = name_of(e.y);
    } else if (e.type == EventType::slice_peer) {
      sp.key = e.x;
      sp.peer = static_cast<std::int32_t>(e.y);
    } else if (e.type == EventType::slice_var) {
      sp.var = e.x;
    } else if (e.type == EventType::slice_span) {
      sp.begin_ns = e.t;
      sp.bytes = e.x;
    } else {
      sp.end_ns = e.t;
      sp.result = static_cast<std::int64_t>(e.x);
      sp.end_thread = static_cast<int>(te.thread);
    }
  }

  // Pass 2: the other events of known ops.
  std::vector<bool> failed_push(ops.size(), false);
  std::vector<DependencyEdge> edges;
  for (const Tagged& te : events) {
    const Event& e = te.e;
    auto it = index.find(e.op);
    if (it == index.end()) continue;  // pushed before clear() (or its push was dropped)
    OpProfile& p = ops[it->second];
    switch (e.type) {
      case EventType::push:
      case EventType::wait_all:
        break;
      case EventType::access:
        p.accesses.push_back({static_cast<std::uint32_t>(e.x), e.y != 0});
        break;
      case EventType::start:
        p.start_ns = e.t;
        p.run_thread = static_cast<int>(te.thread);
        break;
      case EventType::body_end:
        p.body_end_ns = e.t;
        break;
      case EventType::end:
        p.end_ns = e.t;
        p.end_thread = static_cast<int>(te.thread);
        p.status = static_cast<ProfiledStatus>(e.y);
        if (e.x != kNoMessage) p.error = name_of(e.x);
        break;
      case EventType::edge:
        if (index.count(e.x) != 0) edges.push_back({e.x, e.op, e.y, e.flags != 0, e.t});
        break;
      case EventType::push_failed:
        failed_push[it->second] = true;
        break;
      case EventType::slice_begin:
      case EventType::slice_info:
      case EventType::slice_peer:
      case EventType::slice_var:
      case EventType::slice_end:
      case EventType::slice_link:
      case EventType::slice_span:
      case EventType::slice_after:
        break;  // joined above
    }
  }
  // An op whose push threw never existed for the engine; an op missing one
  // of its events (dropped) stays unfinished.
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (failed_push[i]) continue;
    OpProfile& p = ops[i];
    if (p.status != ProfiledStatus::unfinished && (p.start_ns < 0 || p.end_ns < 0)) {
      p.status = ProfiledStatus::unfinished;
    }
    order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return ops[a].push_ns != ops[b].push_ns ? ops[a].push_ns < ops[b].push_ns : ops[a].id < ops[b].id;
  });
  std::unordered_map<std::uint64_t, std::uint64_t> renumber;
  out.ops.reserve(order.size());
  for (std::size_t i : order) {
    renumber.emplace(ops[i].id, out.ops.size() + 1);
    out.ops.push_back(std::move(ops[i]));
    out.ops.back().id = out.ops.size();
  }
  for (DependencyEdge& d : edges) {
    auto f = renumber.find(d.from);
    auto t = renumber.find(d.to);
    if (f == renumber.end() || t == renumber.end()) continue;
    d.from = f->second;
    d.to = t->second;
    out.edges.push_back(d);
  }
  std::sort(out.edges.begin(), out.edges.end(), [](const DependencyEdge& a, const DependencyEdge& b) {
    return a.to != b.to ? a.to < b.to : a.time_ns < b.time_ns;
  });
  // An op became ready at its last grant: at its push (every access granted
  // at once) or at the edge that released it. When a grant raced with the
  // push (the push's own decrement made it ready), no edge says "released":
  // the latest one is what the op waited for.
  for (OpProfile& p : out.ops) {
    if (p.kind != ProfiledKind::wait_for_all) p.grant_ns = p.push_ns;
  }
  for (std::size_t first = 0; first < out.edges.size();) {
    std::size_t last = first;
    std::size_t released = out.edges.size();
    for (; last < out.edges.size() && out.edges[last].to == out.edges[first].to; ++last) {
      if (out.edges[last].released) released = last;
    }
    if (released == out.edges.size()) {
      released = last - 1;  // sorted by time
      out.edges[released].released = true;
    }
    OpProfile& to = out.ops[out.edges[first].to - 1];
    to.grant_ns = std::max(to.grant_ns, out.edges[released].time_ns);
    first = last;
  }
  for (OpProfile& p : out.ops) {
    // Clocks are read just after the events they stamp: keep the order the
    // events had (start is taken after the op was dispatched).
    if (p.start_ns >= 0) p.grant_ns = std::min(p.grant_ns, p.start_ns);
  }
  // Slices numbered by begin time; the ops they name, as renumbered.
  std::sort(slices.begin(), slices.end(), [](const SliceProfile& a, const SliceProfile& b) {
    return a.begin_ns != b.begin_ns ? a.begin_ns < b.begin_ns : a.id < b.id;
  });
  std::unordered_map<std::uint64_t, std::uint64_t> slice_number;
  for (SliceProfile& sp : slices) {
    slice_number.emplace(sp.id, out.slices.size() + 1);
    sp.id = out.slices.size() + 1;
    auto op = renumber.find(sp.launched_by);
    sp.launched_by = op != renumber.end() ? op->second : 0;
    out.slices.push_back(std::move(sp));
  }
  for (SliceRelease& l : links) {
    auto sl = slice_number.find(l.slice);
    auto op = renumber.find(l.op);
    if (sl == slice_number.end() || op == renumber.end()) continue;
    out.slice_releases.push_back({sl->second, op->second, l.at_end, l.fence});
  }
  for (const SliceWait& w : waits) {
    auto before = slice_number.find(w.before);
    auto after = slice_number.find(w.after);
    if (before == slice_number.end() || after == slice_number.end()) continue;
    out.slice_waits.push_back({before->second, after->second, w.same_stream});
  }
  return out;
}

}  // namespace ordo::detail

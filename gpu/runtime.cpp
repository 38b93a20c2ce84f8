// gpu/runtime.cpp - ordo::gpu::Runtime: streams, the event pool, fences on
// variables (the engine's FenceGate), the watcher thread and the memory pool.
// See ordo/gpu.hpp for the model and docs/gpu.md for the reasoning.
#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ordo/detail/coro_runtime.hpp"
#include "ordo/detail/extension.hpp"
#include "ordo/fence.hpp"
#include "ordo/gpu.hpp"

namespace ordo::gpu {
namespace detail {

/// Failure of a stream's host tasks (Stream::host_task), kept by the runtime
/// because cudaLaunchHostFunc has no way to fail a stream. Host tasks of a
/// stream are numbered in enqueue order; the first that throws fails the
/// stream from its number on (sticky, as a device fault): later host tasks
/// are skipped, events recorded after it fail with its exception.
struct HostState {
  static constexpr std::uint64_t none = ~std::uint64_t{0};
  std::atomic<std::uint64_t> enqueued{0};   ///< host tasks numbered so far
  /// Number of the failed host task (none: not failed). Written once, by the
  /// stream's own host-task sequence (serial), release after `error`.
  std::atomic<std::uint64_t> failed_at{none};
  std::exception_ptr error;
};

struct StreamState {
  void* handle = nullptr;
  int logical = 0;
  int phys = 0;
  std::unique_ptr<HostState> host = std::make_unique<HostState>();
};

/// A pooled backend event. One recording per use: an event goes back to the
/// pool only when no fence, waiter or op refers to it any more, and is
/// recorded again by its next user.
struct Event {
  void* handle = nullptr;
  int phys = 0;
  /// Stream of the recording (a wait on the same stream is unnecessary).
  /// Written before the event is shared (under the fence mutex or before the
  /// watcher sees it).
  const StreamState* stream = nullptr;
  /// Host tasks enqueued on `stream` before the recording: the event fails
  /// if one of them failed (HostState). Written with `stream`.
  std::uint64_t host_count = 0;
  std::atomic<int> refs{0};
  /// 0 pending, 1 done, 2 failed (error set), 3 being marked failed. Moves
  /// forward only (until the event is recycled); acquire/release with `error`.
  std::atomic<int> state{0};
  std::exception_ptr error;
  Event* next_free = nullptr;  ///< pool free list (guarded by the pool mutex)
};

/// What a variable's fence slot points to: the unfinished events of the last
/// GPU write and of the GPU reads since. Owned by the Runtime; guarded by its
/// fence mutex. Holds one reference per event.
struct Fence {
  Event* writer = nullptr;
  std::vector<Event*> readers;
};

/// A GPU op's variables (their fence slots, normalised) and routing.
struct OpPlan {
  struct Access {
    FenceSlot* slot;
    bool write;
  };
  std::vector<Access> access;
  FnProperty prop = FnProperty::normal;
};

void PlanDeleter::operator()(OpPlan* p) const noexcept { delete p; }

/// A GPU operator (Runtime::new_operator). Records are kept in a deque and
/// recycled, never freed before the Runtime, so a stale handle is detected
/// by `gen` (as the engine's operators).
struct OperatorState {
  /// Bumped by delete_operator; a handle must match it (acquire in push,
  /// acq_rel CAS in delete).
  std::atomic<std::uint64_t> gen{0};
  /// 1 for the live handle + 1 per push not yet finished; incremented only
  /// while non-zero, so a recycled record is never resurrected.
  std::atomic<std::int64_t> refs{0};
  const void* owner = nullptr;  ///< the Runtime::Impl it belongs to
  OpPlan plan;
  std::vector<Var> reads, writes;
  OpAttrs attrs;
  std::string name;
  std::unique_ptr<OperatorFnBase> fn;
  OperatorState* free_next = nullptr;  ///< guarded by the runtime's oper_mutex
};

}  // namespace detail

using detail::Event;
using detail::Fence;
using detail::HostState;
using detail::OpPlan;
using detail::StreamState;

struct Runtime::Impl final : FenceGate {
  struct DeviceStreams {
    std::vector<StreamState> compute;
    StreamState h2d, d2h;
  };
  /// A waiter of the watcher: a held op (held non-empty) or a callback.
  struct Pending {
    std::vector<Event*> events;  ///< one reference each
    std::size_t next = 0;        ///< events before it are known finished
    HeldOp held;
    std::function<void(std::exception_ptr)> then;
    std::exception_ptr error;
  };

  Impl(Runtime& rt, Engine& e, std::unique_ptr<Backend> b, RuntimeOptions o)
      : owner(rt), engine(e), backend(std::move(b)), opts(o) {}

  Runtime& owner;
  Engine& engine;
  std::unique_ptr<Backend> backend;
  RuntimeOptions opts;
  int logical = 0;
  int physical = 0;
  std::vector<DeviceStreams> devices;  ///< immutable after construction

  // Event pool (per physical device).
  std::mutex pool_mutex;
  std::vector<Event*> free_events;           ///< heads, per physical device (guarded)
  std::vector<std::unique_ptr<Event>> all_events;  ///< guarded by pool_mutex

  // Fences.
  std::mutex fence_mutex;
  std::unordered_set<FenceSlot*> fenced;  ///< slots holding a Fence (guarded by fence_mutex)

  // Watcher.
  std::mutex watch_mutex;
  std::condition_variable watch_cv;
  std::condition_variable drained_cv;
  std::vector<Pending> incoming;  ///< guarded by watch_mutex
  std::size_t pending = 0;        ///< incoming + being watched (guarded by watch_mutex)
  bool stop = false;              ///< guarded by watch_mutex
  std::thread watcher;

  // Memory pool.
  std::mutex mem_mutex;
  std::map<std::pair<int, std::size_t>, std::vector<void*>> free_mem;  ///< (phys or -1, capacity)
  std::vector<std::pair<int, void*>> all_mem;

  // Device failures seen (events that failed, host tasks that threw), each
  // once (the same exception_ptr travels along a stream and its waits), and
  // whether a consumer was given it. Leaf lock.
  struct DeviceError {
    std::exception_ptr error;
    bool observed = false;
  };
  std::mutex error_mutex;
  std::vector<DeviceError> device_errors;  ///< guarded by error_mutex

  // GPU operators.
  std::mutex oper_mutex;
  std::deque<detail::OperatorState> oper_storage;  ///< stable addresses (guarded by oper_mutex)
  detail::OperatorState* oper_free = nullptr;      ///< guarded by oper_mutex

  void release_operator(detail::OperatorState* st) noexcept {
    if (st->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    st->fn.reset();  // the last push finished: destroy the body here
    std::lock_guard lock(oper_mutex);
    st->free_next = oper_free;
    oper_free = st;
  }

  // Stats (relaxed counters).
  std::atomic<std::uint64_t> n_ops{0}, n_waits{0}, n_events{0}, n_held{0};

  // ---------------------------------------------------------------- events
  Event* acquire(int phys) {
    {
      std::lock_guard lock(pool_mutex);
      if (Event* e = free_events[phys]; e != nullptr) {
        free_events[phys] = e->next_free;
        e->next_free = nullptr;
        e->refs.store(1, std::memory_order_relaxed);
        e->state.store(0, std::memory_order_relaxed);
        e->error = nullptr;
        e->stream = nullptr;
        e->host_count = 0;
        return e;
      }
    }
    auto ev = std::make_unique<Event>();
    ev->handle = backend->create_event(phys, opts.watch == WatchMode::blocking_sync);
    ev->phys = phys;
    ev->refs.store(1, std::memory_order_relaxed);
    n_events.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard lock(pool_mutex);
    all_events.push_back(std::move(ev));
    return all_events.back().get();
  }
  static Event* ref(Event* e) noexcept {
    e->refs.fetch_add(1, std::memory_order_relaxed);
    return e;
  }
  void unref(Event* e) noexcept {
    // acq_rel: the last owner sees every write made through other references.
    if (e->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    std::lock_guard lock(pool_mutex);
    e->next_free = free_events[e->phys];
    free_events[e->phys] = e;
  }
  /// 0 pending, 1 done, 2 failed. Queries the backend unless already known.
  int status(Event* e) noexcept {
    int s = e->state.load(std::memory_order_acquire);
    if (s == 1 || s == 2) return s;
    if (s == 3) {
      while ((s = e->state.load(std::memory_order_acquire)) == 3) std::this_thread::yield();
      return s;
    }
    std::exception_ptr failure;
    try {
      if (!backend->query(e->handle)) return 0;
      failure = host_failure(*e);
    } catch (...) {
      failure = std::current_exception();
    }
    int expected = 0;
    if (!failure) {
      e->state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel);
    } else if (e->state.compare_exchange_strong(expected, 3, std::memory_order_acq_rel)) {
      e->error = failure;
      e->state.store(2, std::memory_order_release);
      note_error(failure);
    }
    return status_cached(e);
  }
  /// The host-task failure an event recorded on a stream carries, if any
  /// (the event completed, so the host tasks before it have run).
  static std::exception_ptr host_failure(const Event& e) noexcept {
    if (e.stream == nullptr) return nullptr;
    const HostState& h = *e.stream->host;
    const std::uint64_t at = h.failed_at.load(std::memory_order_acquire);
    return at < e.host_count ? h.error : nullptr;
  }
  /// Records `e` on `st`, remembering how many host tasks precede it.
  void record_on(StreamState* st, Event* e) {
    e->stream = st;
    e->host_count = st->host->enqueued.load(std::memory_order_acquire);
    backend->record(e->handle, st->handle);
  }

  // ---------------------------------------------------------------- device errors
  void note_error(const std::exception_ptr& error) noexcept {
    try {
      std::lock_guard lock(error_mutex);
      for (const DeviceError& d : device_errors) {
        if (d.error == error) return;
      }
      device_errors.push_back({error, false});
    } catch (...) {
      // out of memory: the error still reaches its consumers, not wait_for_all
    }
  }
  /// A consumer was given `error` (a held op, a callback, a rethrow).
  void observe(const std::exception_ptr& error) noexcept {
    if (!error) return;
    note_error(error);
    std::lock_guard lock(error_mutex);
    for (DeviceError& d : device_errors) {
      if (d.error == error) d.observed = true;
    }
  }
  /// FenceGate: the first failure no consumer was given, now claimed.
  std::exception_ptr take_error() noexcept override {
    std::lock_guard lock(error_mutex);
    for (DeviceError& d : device_errors) {
      if (!d.observed) {
        d.observed = true;
        return d.error;
      }
    }
    return nullptr;
  }

  /// FenceGate (Engine::wait_for_all), Runtime::synchronize and ~Runtime:
  /// records an event on every stream and waits, asleep, until the watcher
  /// has seen them all finish (and noted their failures).
  void wait_idle() override {
    std::vector<Event*> events;
    events.reserve(devices.size() * 4);
    auto mark = [&](StreamState& st) {
      Event* e = acquire(st.phys);
      try {
        record_on(&st, e);
        events.push_back(e);
      } catch (...) {
        unref(e);
        try {
          backend->synchronize_stream(st.handle);  // a sticky CUDA error refuses the record: report that
        } catch (...) {
          note_error(std::current_exception());
        }
      }
    };
    try {
      for (auto& ds : devices) {
        for (auto& st : ds.compute) mark(st);
        mark(ds.h2d);
        mark(ds.d2h);
      }
    } catch (...) {
      for (Event* e : events) unref(e);
      throw;
    }
    if (events.empty()) return;
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
    Pending p;
    p.events = std::move(events);
    p.then = [&](const std::exception_ptr&) {
      std::lock_guard lock(mutex);
      done = true;
      cv.notify_all();  // under the lock: the waiter's frame goes away once it is released
    };
    watch(std::move(p));
    std::unique_lock lock(mutex);
    cv.wait(lock, [&] { return done; });
  }

  // ---------------------------------------------------------------- host tasks
  /// Runs a host task numbered `k` on its stream (stream order): skipped once
  /// the stream failed; a throw fails the stream from `k` on.
  void run_host(StreamState* st, std::uint64_t k, const HostFn& fn) noexcept {
    HostState& h = *st->host;
    if (h.failed_at.load(std::memory_order_acquire) != HostState::none) return;
    try {
      fn();
    } catch (...) {
      fail_stream(h, k, std::current_exception());
    }
  }
  void fail_stream(HostState& h, std::uint64_t k, std::exception_ptr error) noexcept {
    if (h.failed_at.load(std::memory_order_relaxed) != HostState::none) return;  // only the stream's tasks write it
    note_error(error);
    h.error = std::move(error);
    h.failed_at.store(k, std::memory_order_release);
  }
  /// Enqueues a numbered host task on `st`.
  void enqueue_host(StreamState* st, std::function<void(std::uint64_t)> body) {
    const std::uint64_t k = st->host->enqueued.fetch_add(1, std::memory_order_acq_rel);
    backend->host_task(st->handle, [k, body = std::move(body)] { body(k); });
  }
  /// After `dst` was made to wait for `e` (recorded on another stream after
  /// host tasks): a host task on `dst` that fails it if `e`'s stream had
  /// failed before `e` (a failure travels along stream waits, as on the device).
  void propagate_host_failure(StreamState* dst, const Event& e) {
    if (e.stream == nullptr || e.host_count == 0) return;
    const HostState* src = e.stream->host.get();
    const std::uint64_t before = e.host_count;
    enqueue_host(dst, [this, dst, src, before](std::uint64_t k) {
      const std::uint64_t at = src->failed_at.load(std::memory_order_acquire);
      if (at < before) fail_stream(*dst->host, k, src->error);
    });
  }
  static int status_cached(const Event* e) noexcept {
    int s;
    while ((s = e->state.load(std::memory_order_acquire)) == 3) std::this_thread::yield();
    return s;
  }

  // ---------------------------------------------------------------- fences
  static Fence* fence_of(FenceSlot* slot) noexcept { return static_cast<Fence*>(slot->load(std::memory_order_relaxed)); }

  /// Drops the finished (not failed) events of a fence; frees it when empty.
  /// fence_mutex held. `query`: ask the backend about pending ones.
  void prune(FenceSlot* slot, Fence* f, bool query) noexcept {
    auto finished = [&](Event* e) { return (query ? status(e) : status_cached(e)) == 1; };
    if (f->writer != nullptr && finished(f->writer)) {
      unref(f->writer);
      f->writer = nullptr;
    }
    std::erase_if(f->readers, [&](Event* e) {
      if (!finished(e)) return false;
      unref(e);
      return true;
    });
    if (f->writer == nullptr && f->readers.empty()) drop(slot, f);
  }
  void drop(FenceSlot* slot, Fence* f) noexcept {
    if (f->writer != nullptr) unref(f->writer);
    for (Event* e : f->readers) unref(e);
    delete f;
    slot->store(nullptr, std::memory_order_relaxed);
    fenced.erase(slot);
  }

  /// FenceGate: an op that is not stream ordered became ready and one of its
  /// variables carries a fence. Bookkeeping only (may query the backend).
  bool hold(HeldOp op) noexcept override {
    std::vector<Event*> waits;
    try {
      std::lock_guard lock(fence_mutex);
      for (std::size_t i = 0; i < op.size(); ++i) {
        FenceSlot* slot = &op.slot(i);
        Fence* f = fence_of(slot);
        if (f == nullptr) continue;
        prune(slot, f, /*query=*/true);
        if ((f = fence_of(slot)) == nullptr) continue;
        if (f->writer != nullptr) waits.push_back(ref(f->writer));
        if (op.writes(i)) {
          for (Event* e : f->readers) waits.push_back(ref(e));
        }
      }
    } catch (...) {
      // Out of memory building the list: hold on to what is known and let
      // the watcher release it (it then waits for everything referenced).
    }
    if (waits.empty()) return false;
    n_held.fetch_add(1, std::memory_order_relaxed);
    Pending p;
    p.events = std::move(waits);
    p.held = op;
    watch(std::move(p));
    return true;
  }

  /// A held op's events have all finished: its written variables' fences
  /// are spent (nothing else can have touched them: the op holds them).
  void release_held(const HeldOp& op, std::exception_ptr error) noexcept {
    {
      std::lock_guard lock(fence_mutex);
      for (std::size_t i = 0; i < op.size(); ++i) {
        FenceSlot* slot = &op.slot(i);
        Fence* f = fence_of(slot);
        if (f == nullptr) continue;
        if (op.writes(i)) {
          drop(slot, f);
        } else {
          prune(slot, f, /*query=*/false);
        }
      }
    }
    observe(error);  // the engine owns it now (the op's error, then its outputs')
    try {
      op.release(std::move(error));
    } catch (...) {
      // release() only allocates the error record; nothing else can fail.
    }
  }

  // ---------------------------------------------------------------- watcher
  void watch(Pending p) noexcept {
    try {
      std::lock_guard lock(watch_mutex);
      incoming.push_back(std::move(p));
      ++pending;
      // Under the lock: once it is released the item may be finished and the
      // Runtime destroyed by the thread that waited for it.
      watch_cv.notify_one();
    } catch (...) {
      std::terminate();  // losing a held op would hang the engine; out of memory here is fatal
    }
  }

  void finish(Pending& p) noexcept {
    for (Event* e : p.events) unref(e);
    p.events.clear();
    if (!p.held.empty()) {
      release_held(p.held, std::move(p.error));
    } else if (p.then) {
      try {
        p.then(std::move(p.error));
      } catch (...) {
      }
    }
  }

  void watcher_main() {
    const CompletionThread scope;  // releases dispatch to workers, never run user code here
    std::vector<Pending> local;
    unsigned idle_rounds = 0;
    for (;;) {
      {
        std::unique_lock lock(watch_mutex);
        if (local.empty()) watch_cv.wait(lock, [&] { return stop || !incoming.empty(); });
        for (auto& p : incoming) local.push_back(std::move(p));
        incoming.clear();
        if (stop && local.empty()) return;
      }
      std::size_t done = 0;
      for (std::size_t i = 0; i < local.size();) {
        Pending& p = local[i];
        while (p.next < p.events.size()) {
          Event* e = p.events[p.next];
          const int s = status(e);
          if (s == 0) break;
          if (s == 2 && !p.error) p.error = e->error;
          ++p.next;
        }
        if (p.next == p.events.size()) {
          finish(p);
          if (i + 1 != local.size()) local[i] = std::move(local.back());
          local.pop_back();
          ++done;
        } else {
          ++i;
        }
      }
      if (done > 0) {
        idle_rounds = 0;
        std::lock_guard lock(watch_mutex);
        pending -= done;
        if (pending == 0) drained_cv.notify_all();
        continue;
      }
      if (local.empty()) continue;
      // Nothing finished this round.
      if (opts.watch == WatchMode::blocking_sync) {
        Pending& p = local.front();
        try {
          backend->synchronize(p.events[p.next]->handle);  // yields the CPU until it completes
        } catch (...) {
          // the failure is picked up by the next status() query
        }
        continue;
      }
      ++idle_rounds;
      if (idle_rounds < 32) {
        std::this_thread::yield();
        continue;
      }
      const auto nap = std::chrono::microseconds(std::min(50U, 1U << std::min(idle_rounds - 32, 6U)));
      std::unique_lock lock(watch_mutex);
      watch_cv.wait_for(lock, nap, [&] { return stop || !incoming.empty(); });
    }
  }

  // ---------------------------------------------------------------- streams
  DeviceStreams& dev(int logical_device) { return devices[static_cast<std::size_t>(logical_device)]; }
  StreamState* pick(int logical_device, FnProperty prop, int index) {
    DeviceStreams& d = dev(logical_device);
    if (prop == FnProperty::copy_to_device) return &d.h2d;
    if (prop == FnProperty::copy_from_device) return &d.d2h;
    const auto n = static_cast<int>(d.compute.size());
    return &d.compute[static_cast<std::size_t>((index < 0 ? 0 : index) % n)];
  }
  void check_device(Context ctx) const {
    if (!ctx.is_gpu()) {
      throw Error(Errc::invalid_argument, "ordo::gpu: a GPU op needs a GPU context (Context::gpu(n))");
    }
    if (logical == 0) {
      throw GpuError(100, "cudaErrorNoDevice",
                     "no GPU for Context::gpu(" + std::to_string(ctx.device_id) + "): backend '" + backend->name() +
                         "' has no device (" + backend->unavailable_reason() + ")");
    }
    if (ctx.device_id >= logical) {
      throw GpuError(101, "cudaErrorInvalidDevice",
                     "Context::gpu(" + std::to_string(ctx.device_id) + "): the runtime has " +
                         std::to_string(logical) + " logical device(s)");
    }
  }
};

// ------------------------------------------------------------------ Runtime

Runtime::Runtime(Engine& engine, std::unique_ptr<Backend> backend, RuntimeOptions options)
    : engine_(engine), impl_(std::make_unique<Impl>(*this, engine, std::move(backend), options)) {
  Impl& m = *impl_;
  if (!m.backend) throw Error(Errc::invalid_argument, "ordo::gpu::Runtime: null backend");
  m.physical = m.backend->device_count();
  m.logical = m.physical == 0 ? 0 : (options.devices > 0 ? options.devices : m.physical);
  unsigned n = options.compute_streams != 0 ? options.compute_streams : engine.options().gpu_compute_workers;
  n = std::clamp(n, 1U, 16U);
  m.free_events.assign(static_cast<std::size_t>(m.physical), nullptr);
  m.devices.resize(static_cast<std::size_t>(m.logical));
  try {
    for (int d = 0; d < m.logical; ++d) {
      const int phys = d % m.physical;
      auto make = [&] { return StreamState{m.backend->create_stream(phys), d, phys}; };
      Impl::DeviceStreams& ds = m.devices[static_cast<std::size_t>(d)];
      for (unsigned i = 0; i < n; ++i) ds.compute.push_back(make());
      ds.h2d = make();
      ds.d2h = make();
    }
  } catch (...) {
    for (auto& ds : m.devices) {
      for (auto& s : ds.compute) m.backend->destroy_stream(s.handle);
      if (ds.h2d.handle != nullptr) m.backend->destroy_stream(ds.h2d.handle);
      if (ds.d2h.handle != nullptr) m.backend->destroy_stream(ds.d2h.handle);
    }
    throw;
  }
  m.watcher = std::thread([&m] { m.watcher_main(); });
  engine.set_fence_gate(&m);
}

Runtime::~Runtime() {
  Impl& m = *impl_;
  // Device work nobody waited for: wait, and report failures no consumer
  // was given, as the engine reports its unobserved errors.
  try {
    m.wait_idle();
  } catch (...) {
    // out of memory for the events: destroy_stream below still waits
  }
  for (std::exception_ptr e = m.take_error(); e; e = m.take_error()) {
    ErrorReport r{"ordo::gpu device work", "unknown exception"};
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      r.message = x.what();
    } catch (...) {
    }
    try {
      if (const auto& report = engine_.options().on_unobserved_error) {
        report(r);
      } else {
        std::fprintf(stderr, "ordo: unobserved error from %s: %s\n", r.op_name.c_str(), r.message.c_str());
      }
    } catch (...) {
      // the destructor never throws
    }
  }
  for (auto& ds : m.devices) {
    for (auto& s : ds.compute) m.backend->destroy_stream(s.handle);  // waits for its work
    m.backend->destroy_stream(ds.h2d.handle);
    m.backend->destroy_stream(ds.d2h.handle);
  }
  {
    std::unique_lock lock(m.watch_mutex);
    m.drained_cv.wait(lock, [&] { return m.pending == 0; });
    m.stop = true;
  }
  m.watch_cv.notify_all();
  m.watcher.join();
  engine_.set_fence_gate(nullptr);
  {
    std::lock_guard lock(m.fence_mutex);
    while (!m.fenced.empty()) {
      FenceSlot* slot = *m.fenced.begin();
      m.drop(slot, Impl::fence_of(slot));
    }
  }
  for (auto& e : m.all_events) m.backend->destroy_event(e->handle);
  for (auto& [dev, p] : m.all_mem) {
    if (dev < 0) {
      m.backend->free_pinned(p);
    } else {
      m.backend->free_device(dev, p);
    }
  }
}

Backend& Runtime::backend() const noexcept { return *impl_->backend; }
const RuntimeOptions& Runtime::options() const noexcept { return impl_->opts; }
int Runtime::device_count() const noexcept { return impl_->logical; }
std::string Runtime::unavailable_reason() const {
  return impl_->logical > 0 ? std::string() : impl_->backend->unavailable_reason();
}

RuntimeStats Runtime::stats() const noexcept {
  const Impl& m = *impl_;
  return RuntimeStats{m.n_ops.load(std::memory_order_relaxed), m.n_waits.load(std::memory_order_relaxed),
                      m.n_events.load(std::memory_order_relaxed), m.n_held.load(std::memory_order_relaxed)};
}

detail::PlanPtr Runtime::make_plan(Context ctx, VarSpan reads, VarSpan writes, const OpAttrs& attrs) {
  impl_->check_device(ctx);
  detail::PlanPtr plan(new OpPlan);
  fill_plan(*plan, reads, writes, attrs);
  return plan;
}

void Runtime::fill_plan(OpPlan& plan, VarSpan reads, VarSpan writes, const OpAttrs& attrs) {
  plan.prop = attrs.prop;
  plan.access.clear();
  plan.access.reserve(reads.size() + writes.size());
  for (const Var& v : writes) plan.access.push_back({&engine_.fence_slot(v), true});
  for (const Var& v : reads) plan.access.push_back({&engine_.fence_slot(v), false});
  auto& a = plan.access;
  std::sort(a.begin(), a.end(), [](const OpPlan::Access& x, const OpPlan::Access& y) {
    return x.slot != y.slot ? std::less<>{}(x.slot, y.slot) : x.write > y.write;  // a write first
  });
  a.erase(std::unique(a.begin(), a.end(), [](const OpPlan::Access& x, const OpPlan::Access& y) { return x.slot == y.slot; }),
          a.end());
}

// ------------------------------------------------------------------ operators

/// The engine op body of one push of a GPU operator: two words (inline in
/// the op record), holding a reference to the operator until destroyed.
struct Runtime::OperatorBody {
  Runtime* rt;
  detail::OperatorState* st;
  OperatorBody(Runtime* r, detail::OperatorState* s) noexcept : rt(r), st(s) {}
  OperatorBody(OperatorBody&& o) noexcept : rt(o.rt), st(std::exchange(o.st, nullptr)) {}
  OperatorBody(const OperatorBody&) = delete;
  OperatorBody& operator=(const OperatorBody&) = delete;
  OperatorBody& operator=(OperatorBody&&) = delete;
  ~OperatorBody() {
    if (st != nullptr) rt->impl_->release_operator(st);
  }
  void operator()(const RunContext& rc, OnComplete done) { rt->run_operator(rc, *st, done); }
};

Operator Runtime::init_operator(std::unique_ptr<detail::OperatorFnBase> fn, VarSpan reads, VarSpan writes,
                                const OpAttrs& attrs) {
  Impl& m = *impl_;
  if (attrs.prop == FnProperty::delete_var) {
    throw Error(Errc::invalid_argument, "FnProperty::delete_var is reserved for delete_variable");
  }
  detail::OperatorState* st = nullptr;
  {
    std::lock_guard lock(m.oper_mutex);
    if (m.oper_free != nullptr) {
      st = std::exchange(m.oper_free, m.oper_free->free_next);
    } else {
      st = &m.oper_storage.emplace_back();
    }
  }
  try {
    fill_plan(st->plan, reads, writes, attrs);  // checks the variables (throws like a push)
    st->reads.assign(reads.begin(), reads.end());
    st->writes.assign(writes.begin(), writes.end());
    st->name = attrs.name != nullptr ? attrs.name : "";
    st->attrs = attrs;
    st->attrs.name = attrs.name != nullptr ? st->name.c_str() : nullptr;
  } catch (...) {
    std::lock_guard lock(m.oper_mutex);
    st->free_next = m.oper_free;
    m.oper_free = st;
    throw;
  }
  st->owner = &m;
  st->fn = std::move(fn);
  st->refs.store(1, std::memory_order_release);
  return Operator{st, st->gen.load(std::memory_order_acquire)};
}

void Runtime::push(Operator op, Context ctx) { push(op, ctx, op.st_ != nullptr ? op.st_->attrs.priority : 0); }

void Runtime::push(Operator op, Context ctx, int priority) {
  detail::OperatorState* st = op.st_;
  Impl& m = *impl_;
  if (st == nullptr) throw Error(Errc::deleted_operator, "push of an empty gpu::Operator handle");
  if (st->owner != &m) throw Error(Errc::deleted_operator, "push of a gpu::Operator of another runtime");
  std::int64_t refs = st->refs.load(std::memory_order_relaxed);
  do {
    if (refs == 0) throw Error(Errc::deleted_operator, "push of a deleted gpu::Operator");
  } while (!st->refs.compare_exchange_weak(refs, refs + 1, std::memory_order_acq_rel));
  OperatorBody body(this, st);  // owns the reference from here on
  if (st->gen.load(std::memory_order_acquire) != op.gen_) {
    throw Error(Errc::deleted_operator, "push of a deleted gpu::Operator");
  }
  m.check_device(ctx);
  OpAttrs attrs = st->attrs;
  attrs.priority = priority;
  ordo::detail::EngineExtension::push(engine_, std::move(body), ctx, st->reads, st->writes, attrs,
                                      ordo::detail::kFenceExempt);
}

void Runtime::delete_operator(Operator op) {
  detail::OperatorState* st = op.st_;
  if (st == nullptr || st->owner != impl_.get()) {
    throw Error(Errc::deleted_operator, "delete_operator: empty handle or gpu::Operator of another runtime");
  }
  std::uint64_t gen = op.gen_;
  if (!st->gen.compare_exchange_strong(gen, gen + 1, std::memory_order_acq_rel)) {
    throw Error(Errc::deleted_operator, "delete_operator: the gpu::Operator was already deleted");
  }
  impl_->release_operator(st);
}

void Runtime::run_operator(const RunContext& rc, detail::OperatorState& st, const OnComplete& done) {
  std::exception_ptr error;
  const Stream s = begin_op(rc, st.plan, error);
  if (!error) {
    try {
      (*st.fn)(s);
    } catch (...) {
      error = std::current_exception();
    }
    end_op(s, st.plan, error);
  }
  done(error);
}

Stream Runtime::begin_op(const RunContext& rc, const OpPlan& plan, std::exception_ptr& error) noexcept {
  Impl& m = *impl_;
  StreamState* s = m.pick(rc.ctx.device_id, plan.prop, rc.worker);
  m.n_ops.fetch_add(1, std::memory_order_relaxed);
  std::vector<Event*> waits;
  try {
    m.backend->before_body(s->phys);
    {
      std::lock_guard lock(m.fence_mutex);
      auto want = [&](Event* e) {
        if (e->stream != s && Impl::status_cached(e) != 1) waits.push_back(Impl::ref(e));
      };
      for (const auto& a : plan.access) {
        Fence* f = Impl::fence_of(a.slot);
        if (f == nullptr) continue;
        if (f->writer != nullptr) want(f->writer);
        if (a.write) {
          for (Event* e : f->readers) want(e);
        }
      }
    }
    if (!m.opts.unsafe_skip_stream_waits) {
      for (Event* e : waits) {
        m.backend->wait(s->handle, e->handle);  // cudaStreamWaitEvent: ordered on the device, no host round trip
        m.n_waits.fetch_add(1, std::memory_order_relaxed);
        m.propagate_host_failure(s, *e);        // only after host tasks on e's stream
      }
    }
  } catch (...) {
    error = std::current_exception();
  }
  for (Event* e : waits) m.unref(e);
  return Stream(this, s);
}

void Runtime::end_op(const Stream& s, const OpPlan& plan, std::exception_ptr& error) noexcept {
  Impl& m = *impl_;
  // A launch that failed enqueued nothing; what else the body enqueued is
  // fenced as usual below, and the op fails with the launch's error.
  try {
    m.backend->after_body();
  } catch (...) {
    if (!error) error = std::current_exception();
  }
  Event* ev = nullptr;
  try {
    ev = m.acquire(s.st_->phys);
    m.record_on(s.st_, ev);
    std::lock_guard lock(m.fence_mutex);
    for (const auto& a : plan.access) {
      Fence* f = Impl::fence_of(a.slot);
      if (f == nullptr) {
        f = new Fence;
        m.fenced.insert(a.slot);
        a.slot->store(f, std::memory_order_relaxed);
      }
      if (a.write) {
        // This op's stream waited for every earlier fence of the variable:
        // its event stands for all of them.
        if (f->writer != nullptr) m.unref(f->writer);
        for (Event* e : f->readers) m.unref(e);
        f->readers.clear();
        f->writer = Impl::ref(ev);
      } else {
        std::erase_if(f->readers, [&](Event* e) {
          if (Impl::status_cached(e) != 1) return false;
          m.unref(e);
          return true;
        });
        f->readers.push_back(Impl::ref(ev));
      }
    }
  } catch (...) {
    // The work may be enqueued without a fence: wait for it here rather than
    // let a CPU consumer read unfinished results.
    if (!error) error = std::current_exception();
    try {
      m.backend->synchronize_stream(s.st_->handle);
    } catch (...) {
    }
  }
  if (ev != nullptr) m.unref(ev);
}

Stream Runtime::stream(Context ctx, FnProperty prop, unsigned index) {
  impl_->check_device(ctx);
  return Stream(this, impl_->pick(ctx.device_id, prop, static_cast<int>(index % 1024U)));
}

void Runtime::complete_when_done(const Stream& s, OnComplete done) {
  Impl& m = *impl_;
  Event* ev = m.acquire(s.st_->phys);
  try {
    m.record_on(s.st_, ev);
  } catch (...) {
    m.unref(ev);
    throw;
  }
  Impl::Pending p;
  p.events.push_back(ev);
  p.then = [&m, done](std::exception_ptr e) {
    m.observe(e);  // the async op's error from here on
    done(std::move(e));
  };
  m.watch(std::move(p));
}

// ------------------------------------------------------------------ memory

namespace {
std::size_t capacity_for(std::size_t bytes) { return std::bit_ceil(std::max<std::size_t>(bytes, 256)); }
}  // namespace

Buffer Runtime::alloc_device(int device, std::size_t bytes) {
  impl_->check_device(Context::gpu(device));
  Impl& m = *impl_;
  const int phys = device % m.physical;
  Buffer b;
  b.capacity_ = capacity_for(bytes);
  b.bytes_ = bytes;
  b.device_ = phys;
  {
    std::lock_guard lock(m.mem_mutex);
    auto& list = m.free_mem[{phys, b.capacity_}];
    if (!list.empty()) {
      b.p_ = list.back();
      list.pop_back();
      return b;
    }
  }
  b.p_ = m.backend->alloc_device(phys, b.capacity_);
  std::lock_guard lock(m.mem_mutex);
  m.all_mem.emplace_back(phys, b.p_);
  return b;
}

Buffer Runtime::alloc_host(std::size_t bytes) {
  Impl& m = *impl_;
  Buffer b;
  b.capacity_ = capacity_for(bytes);
  b.bytes_ = bytes;
  b.device_ = -1;
  {
    std::lock_guard lock(m.mem_mutex);
    auto& list = m.free_mem[{-1, b.capacity_}];
    if (!list.empty()) {
      b.p_ = list.back();
      list.pop_back();
      return b;
    }
  }
  b.p_ = m.backend->alloc_pinned(b.capacity_);
  std::lock_guard lock(m.mem_mutex);
  m.all_mem.emplace_back(-1, b.p_);
  return b;
}

void Runtime::free(Buffer b) noexcept {
  if (!b) return;
  Impl& m = *impl_;
  try {
    std::lock_guard lock(m.mem_mutex);
    m.free_mem[{b.device_, b.capacity_}].push_back(b.p_);
  } catch (...) {
    // Out of memory growing the free list: the block stays owned by all_mem.
  }
}

namespace {
/// Returns its buffer to the pool when run, or, if the engine skips the
/// delete, when destroyed (a skipped deleter is destroyed after the same
/// fences were waited for).
struct BufferDeleter {
  Runtime* rt;
  Buffer b;
  BufferDeleter(Runtime* r, Buffer buf) noexcept : rt(r), b(buf) {}
  BufferDeleter(BufferDeleter&& o) noexcept : rt(o.rt), b(std::exchange(o.b, Buffer{})) {}
  BufferDeleter(const BufferDeleter&) = delete;
  BufferDeleter& operator=(const BufferDeleter&) = delete;
  BufferDeleter& operator=(BufferDeleter&&) = delete;
  ~BufferDeleter() {
    if (b) rt->free(b);
  }
  void operator()() noexcept { rt->free(std::exchange(b, Buffer{})); }
};
}  // namespace

void Runtime::delete_variable(Var var, Buffer b) { engine_.delete_variable(BufferDeleter(this, b), Context::cpu(), var); }

void Runtime::synchronize() {
  Impl& m = *impl_;
  m.wait_idle();
  if (std::exception_ptr e = m.take_error()) std::rethrow_exception(e);
}

// ------------------------------------------------------------------ Stream

void* Stream::handle() const noexcept { return st_->handle; }
int Stream::device() const noexcept { return st_->logical; }
int Stream::physical_device() const noexcept { return st_->phys; }
void Stream::host_task(HostFn fn) const {
  Runtime::Impl& m = *rt_->impl_;
  StreamState* st = st_;
  m.enqueue_host(st, [&m, st, fn = std::move(fn)](std::uint64_t k) { m.run_host(st, k, fn); });
}
void Stream::copy(void* dst, const void* src, std::size_t bytes) const {
  rt_->impl_->backend->copy(dst, src, bytes, st_->handle);
}

// ------------------------------------------------------------------ StreamAwaitable

StreamAwaitable::~StreamAwaitable() {
  if (ev_ != nullptr) s_.rt_->impl_->unref(ev_);
}

bool StreamAwaitable::await_ready() {
  Runtime::Impl& m = *s_.rt_->impl_;
  try {
    m.backend->after_body();  // a launch the coroutine made before this await failed: rethrown at once
  } catch (...) {
    error_ = std::current_exception();
    return true;
  }
  ev_ = m.acquire(s_.st_->phys);
  m.record_on(s_.st_, ev_);
  const int st = m.status(ev_);
  if (st == 2) {
    error_ = ev_->error;
    m.observe(error_);
  }
  return st != 0;
}

void StreamAwaitable::await_suspend(std::coroutine_handle<> h) {
  Runtime::Impl& m = *s_.rt_->impl_;
  Runtime::Impl::Pending p;
  p.events.push_back(Runtime::Impl::ref(ev_));
  Engine* engine = &m.engine;
  const Context ctx = m.opts.resume_ctx;
  StreamAwaitable* self = this;
  p.then = [&m, self, h, engine, ctx](std::exception_ptr e) {
    m.observe(e);
    self->error_ = std::move(e);
    try {
      engine->post([h] { ordo::detail::resume(h); }, ctx, {.name = "ordo::gpu resume"});
    } catch (...) {
      ordo::detail::resume(h);  // out of memory for the post: resuming here is the only way not to lose it
    }
  };
  m.watch(std::move(p));
}

}  // namespace ordo::gpu

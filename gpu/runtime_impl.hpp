// gpu/runtime_impl.hpp - internal: the records behind ordo::gpu::Runtime and
// its Impl, shared by the gpu/*.cpp files. Each member says where it is
// defined; see ordo/gpu.hpp for the model and docs/gpu.md for the reasoning.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

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

/// A stream's track in the engine's trace (gpu/trace.cpp); made only when
/// profiling is on.
struct StreamTrace {
  std::string track;         ///< "gpu0 compute 1", "gpu0 copy h2d", ...
  const char* work;          ///< what an unnamed op's work is called: "kernel" or "copy"
  /// The slice of the op that began on the stream last: the work before
  /// the next one's (relaxed: the profiler's only, exchanged by each op).
  std::atomic<std::uint64_t> last_slice{0};
};

struct CapturedGroup;

struct StreamState {
  void* handle = nullptr;
  int logical = 0;
  int phys = 0;
  /// A capture stream's group while its bodies are captured (gpu/graphs.cpp);
  /// null otherwise, and always on the streams GPU ops run on. Written and
  /// read by the capturing thread, under the runtime's capture_mutex.
  CapturedGroup* capturing = nullptr;
  std::unique_ptr<HostState> host = std::make_unique<HostState>();
  std::unique_ptr<StreamTrace> trace;  ///< profiling only; immutable after construction
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
  /// The trace's slice of the GPU op this event ends (profiling; 0: none).
  /// Written with `stream`.
  std::uint64_t slice = 0;
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
  /// Sorts `access` by slot and merges duplicates (a write wins).
  void normalize();
  FnProperty prop = FnProperty::normal;
  /// OpAttrs::name, for the trace: the pushed op's own (it outlives the
  /// op), or an operator's copy in `owned_name`.
  const char* name = nullptr;
  std::string owned_name;
};

/// What a captured graph's groups share with their runtime (gpu/graphs.cpp):
/// the backend, while the runtime lives, and the groups alive, whose backend
/// graphs ~Runtime destroys (a graph may outlive its runtime). Leaf lock.
struct GraphLinks {
  std::mutex mutex;
  Backend* backend = nullptr;                ///< null once the runtime is gone (guarded)
  std::unordered_set<CapturedGroup*> live;  ///< guarded
};

}  // namespace detail

using detail::Event;
using detail::Fence;
using detail::HostState;
using detail::OpPlan;
using detail::OpSlice;
using detail::StreamState;
using detail::StreamTrace;

/// The runtime's state, and the FenceGate it installs on its engine.
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
    /// Profiling: a GPU op's slice, timed by events[0] (its start) and
    /// events[1] (its end); `then` and `held` are empty.
    std::uint64_t slice = 0;
    std::uint64_t bytes = 0;
    std::uint64_t seq = 0;  ///< watch() order
    bool barrier = false;   ///< wait_idle's: finished only after every older item
  };

  Impl(Runtime& rt, Engine& e, std::unique_ptr<Backend> b, RuntimeOptions o)
      : owner(rt), engine(e), backend(std::move(b)), opts(o) {}

  Runtime& owner;
  Engine& engine;
  std::unique_ptr<Backend> backend;
  RuntimeOptions opts;
  /// The engine's profiler (null: off), fixed for the engine's life.
  ordo::detail::ProfilerCore* const prof = ordo::detail::EngineExtension::profiler(engine);
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
  std::uint64_t watch_seq = 0;    ///< Pending::seq handed out (guarded by watch_mutex)
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

  // Captured graphs (gpu/graphs.cpp).
  /// One capture at a time (they run once per group, at its first replay).
  std::mutex capture_mutex;
  /// Per logical device, the stream groups are captured on, made by the
  /// first capture there (guarded by capture_mutex): never one GPU ops run
  /// on, so that no other thread's work lands in a capture.
  std::vector<std::unique_ptr<StreamState>> capture_streams;
  std::shared_ptr<detail::GraphLinks> links = std::make_shared<detail::GraphLinks>();
  /// Each live gpu::Operator's body and lists, by id: a push of it inside
  /// Engine::capture records them (guarded by operators_mutex).
  struct OperatorEntry {
    std::shared_ptr<detail::GpuCall> call;
    std::vector<Var> reads, writes;
    OpAttrs attrs;
    std::string name;  ///< attrs.name points here
  };
  std::mutex operators_mutex;
  std::unordered_map<std::uint64_t, OperatorEntry> operators;
  std::uint64_t next_operator = 0;  ///< guarded by operators_mutex
  StreamState* capture_stream(int logical_device);  ///< capture_mutex held
  /// Stream::host_task on a capture stream: the task runs at each launch,
  /// numbered as the launch's (CapturedGroup::launch_k).
  void captured_host_task(StreamState* st, HostFn fn);
  /// ~Runtime: destroys the backend graphs of the groups still alive.
  void close_graphs() noexcept;

  // Stats (relaxed counters).
  std::atomic<std::uint64_t> n_ops{0}, n_waits{0}, n_events{0}, n_held{0};

  // ---- events (gpu/events.cpp; the small ones here: hot, under the fence mutex)
  Event* acquire(int phys);
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
  int status(Event* e) noexcept;
  /// The state without asking the backend (waits out a concurrent "being marked failed").
  static int status_cached(const Event* e) noexcept {
    int s;
    while ((s = e->state.load(std::memory_order_acquire)) == 3) std::this_thread::yield();
    return s;
  }
  /// The host-task failure an event recorded on a stream carries, if any
  /// (the event completed, so the host tasks before it have run).
  static std::exception_ptr host_failure(const Event& e) noexcept;
  /// Records `e` on `st`, remembering how many host tasks precede it.
  void record_on(StreamState* st, Event* e);

  // ---- device errors (gpu/events.cpp)
  void note_error(const std::exception_ptr& error) noexcept;
  /// A consumer was given `error` (a held op, a callback, a rethrow).
  void observe(const std::exception_ptr& error) noexcept;
  /// FenceGate: the first failure no consumer was given, now claimed.
  std::exception_ptr take_error() noexcept override;

  // ---- host tasks (gpu/events.cpp)
  /// Runs a host task numbered `k` on its stream (stream order): skipped once
  /// the stream failed; a throw fails the stream from `k` on.
  void run_host(StreamState* st, std::uint64_t k, const HostFn& fn) noexcept;
  void fail_stream(HostState& h, std::uint64_t k, std::exception_ptr error) noexcept;
  /// Enqueues a numbered host task on `st`.
  void enqueue_host(StreamState* st, std::function<void(std::uint64_t)> body);
  /// After `dst` was made to wait for `e` (recorded on another stream after
  /// host tasks): a host task on `dst` that fails it if `e`'s stream had
  /// failed before `e` (a failure travels along stream waits, as on the device).
  void propagate_host_failure(StreamState* dst, const Event& e);

  // ---- fences (gpu/fences.cpp)
  /// Makes `s` wait (on the device) for the events fencing `plan`'s
  /// variables that are not finished: the last write's, and the reads'
  /// for a write. Each is also in `waits`, with a reference the caller drops.
  void wait_fences(StreamState* s, const OpPlan& plan, std::vector<Event*>& waits);
  static Fence* fence_of(FenceSlot* slot) noexcept { return static_cast<Fence*>(slot->load(std::memory_order_relaxed)); }
  /// Drops the finished (not failed) events of a fence; frees it when empty.
  /// fence_mutex held. `query`: ask the backend about pending ones.
  void prune(FenceSlot* slot, Fence* f, bool query) noexcept;
  void drop(FenceSlot* slot, Fence* f) noexcept;
  /// FenceGate: an op that is not stream ordered became ready and one of its
  /// variables carries a fence. Bookkeeping only (may query the backend).
  bool hold(HeldOp op) noexcept override;
  /// A held op's events have all finished: its written variables' fences
  /// are spent (nothing else can have touched them: the op holds them).
  void release_held(const HeldOp& op, std::exception_ptr error) noexcept;

  // ---- watcher (gpu/watcher.cpp)
  void watch(Pending p) noexcept;
  void finish(Pending& p) noexcept;
  void watcher_main();
  /// FenceGate (Engine::wait_for_all), Runtime::synchronize and ~Runtime:
  /// records an event on every stream and waits, asleep, until the watcher
  /// has seen them all finish (and noted their failures).
  void wait_idle() override;

  // ---- the trace (gpu/trace.cpp; profiling on only)
  /// After `s` was made to wait for `waits`: begins the op's slice and
  /// records its start event.
  void begin_slice(StreamState* s, const OpPlan& plan, const std::vector<Event*>& waits, OpSlice& slice) noexcept;
  /// After the op's end event `end` was recorded (null: it was not):
  /// hands the slice to the watcher, which times it once `end` completed.
  void end_slice(OpSlice& slice, Event* end) noexcept;
  /// A finished watcher item: its slice's times, or arrows from the GPU
  /// work whose fences held an op to that op. Before its events are unref'd.
  void trace_finished(const Pending& p) noexcept;
  /// Stream::copy during a GPU op's body: counted as the op's bytes.
  static void note_copy(std::size_t bytes) noexcept;

  // ---- streams (gpu/runtime.cpp creates them)
  DeviceStreams& dev(int logical_device) { return devices[static_cast<std::size_t>(logical_device)]; }
  StreamState* pick(int logical_device, FnProperty prop, int index) {
    DeviceStreams& d = dev(logical_device);
    if (prop == FnProperty::copy_to_device) return &d.h2d;
    if (prop == FnProperty::copy_from_device) return &d.d2h;
    const auto n = static_cast<int>(d.compute.size());
    return &d.compute[static_cast<std::size_t>((index < 0 ? 0 : index) % n)];
  }
  /// Throws unless `ctx` is a GPU context of an existing logical device.
  void check_device(Context ctx) const;
};

}  // namespace ordo::gpu

// ordo/gpu.hpp - GPU streams and events as engine completions (target ordo::gpu).
//
//   ordo::gpu::Runtime gpu(engine, ordo::gpu::make_cuda_backend());
//   gpu.push([=](const ordo::gpu::Stream& s) {  // a GPU op: enqueue on s, return
//     scale<<<blocks, threads, 0, s.native<cudaStream_t>()>>>(x, n);
//   }, ordo::Context::gpu(0), {}, {x_var});
//   engine.push_sync([&] { use(host_copy_of_x); }, ordo::Context::cpu(), {x_var}, {});  // after it *finished*
//
// A GPU op completes for the engine once its body has enqueued its work; the
// event recorded after it becomes a fence on its variables (ordo/fence.hpp).
// A GPU op on another stream waits for the fences on the device; any other
// consumer is held by the engine until they finish, watched by one thread, so
// no worker waits for the GPU. Routing, errors, coroutines (co_await on(s)),
// waiting for everything: docs/gpu.md, a section each.
#pragma once

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <type_traits>
#include <utility>

#include "ordo/detail/extension.hpp"
#include "ordo/engine.hpp"
#include "ordo/gpu/backend.hpp"

namespace ordo {
class HostAllocator;  // ordo/storage.hpp
}  // namespace ordo

namespace ordo::gpu {

/// How the watcher thread observes event completion. poll is the default:
/// the faster of the two in docs/gpu.md's benchmarks.
enum class WatchMode {
  poll,           ///< default: cudaEventQuery over every pending event, backing off to sleeps of up to 50 us
  blocking_sync,  ///< events created with cudaEventBlockingSync; the watcher blocks on the oldest pending one
};

struct RuntimeOptions {
  /// Logical devices (Context::gpu(0 .. devices-1)); 0: one per physical
  /// device. More than the physical ones map round robin onto them.
  int devices = 0;
  /// Compute streams per logical device; 0: the engine's gpu_compute_workers
  /// (one stream per GPU compute worker). At most 16.
  unsigned compute_streams = 0;
  WatchMode watch = WatchMode::poll;
  /// Where coroutines awaiting ordo::gpu::on resume.
  Context resume_ctx = Context::cpu();
  /// Testing only: GPU ops skip their cross-stream waits, so that a test can
  /// prove it would catch a missing cudaStreamWaitEvent. Never in real code.
  bool unsafe_skip_stream_waits = false;
};

/// Counters, for tests and tuning (monotonic, relaxed).
struct RuntimeStats {
  std::uint64_t gpu_ops = 0;         ///< bodies run by Runtime::push
  std::uint64_t stream_waits = 0;    ///< cross-stream waits enqueued
  std::uint64_t events_created = 0;  ///< backend events ever created (the pool reuses them)
  std::uint64_t held_ops = 0;        ///< engine ops held until fences completed
};

class Runtime;
class Buffer;
class Stream;
namespace detail {
struct StreamState;
struct Event;
struct OpPlan;
struct CapturedGroup;
struct GroupRun;
/// A GPU op's work in the engine's trace; zero (and untouched) when
/// profiling is off. Lives on the stack of the op's body.
struct OpSlice {
  std::uint64_t id = 0;       ///< the profiler's slice, 0: none
  Event* start = nullptr;     ///< recorded on the op's stream before its work
  std::uint64_t bytes = 0;    ///< copied by Stream::copy during the body
  OpSlice* outer = nullptr;   ///< an enclosing op's, restored at the end (the naive engine nests bodies)
};
struct PlanDeleter {
  void operator()(OpPlan* p) const noexcept;
};
using PlanPtr = std::unique_ptr<OpPlan, PlanDeleter>;

/// A GPU op's body as a captured graph keeps it (gpu/graphs.cpp): called
/// when the graph's group is captured into a backend graph.
struct GpuCall {
  virtual ~GpuCall() = default;
  virtual void operator()(const Stream& s) = 0;
};
template <class D>
struct GpuCallOf final : GpuCall {
  template <class F>
  explicit GpuCallOf(F&& f) : fn(std::forward<F>(f)) {}
  void operator()(const Stream& s) override { fn(s); }
  D fn;
};
/// A GPU operator's body, shared by its pushes and the graphs that capture it.
struct SharedCall {
  std::shared_ptr<GpuCall> call;
  void operator()(const Stream& s) const { (*call)(s); }
};
}  // namespace detail

/// A pre-built GPU op (Runtime::new_operator): body, variable lists and
/// routing prepared once, then pushed many times. A cheap handle (three
/// words); a handle to a deleted operator is detected.
class Operator {
 public:
  constexpr Operator() noexcept = default;
  [[nodiscard]] constexpr bool empty() const noexcept { return op_.empty(); }

 private:
  friend class Runtime;
  constexpr Operator(ordo::Operator op, std::uint64_t id) noexcept : op_(op), id_(id) {}
  ordo::Operator op_;
  std::uint64_t id_ = 0;  ///< its entry in the runtime's list (a push inside Engine::capture reads it)
};

/// A stream of a logical device, handed to GPU op bodies. Cheap handle.
class Stream {
 public:
  Stream() noexcept = default;
  /// The backend's stream (cudaStream_t for the CUDA backend).
  [[nodiscard]] void* handle() const noexcept;
  template <class T>
  [[nodiscard]] T native() const noexcept {
    return reinterpret_cast<T>(handle());
  }
  [[nodiscard]] int device() const noexcept;           ///< logical device
  [[nodiscard]] int physical_device() const noexcept;  ///< backend device
  [[nodiscard]] Runtime& runtime() const noexcept { return *rt_; }
  /// Enqueues a host function in stream order (the simulated backend's
  /// kernels; on CUDA, cudaLaunchHostFunc: no CUDA call inside). If it
  /// throws, the runtime keeps the exception and fails the stream from there
  /// on, as a device fault: later host tasks of the stream are skipped,
  /// consumers of later events (and of GPU ops that waited for them) get it.
  void host_task(HostFn fn) const;
  /// Enqueues an asynchronous copy (pinned host memory for real overlap).
  void copy(void* dst, const void* src, std::size_t bytes) const;
  [[nodiscard]] explicit operator bool() const noexcept { return st_ != nullptr; }

 private:
  friend class Runtime;
  friend class StreamAwaitable;
  Stream(Runtime* rt, detail::StreamState* st) noexcept : rt_(rt), st_(st) {}
  Runtime* rt_ = nullptr;
  detail::StreamState* st_ = nullptr;
};

/// Device or pinned host memory from a Runtime's pool. A plain value: it
/// does not free itself (Runtime::free, or Runtime::delete_variable).
class Buffer {
 public:
  Buffer() noexcept = default;
  [[nodiscard]] void* data() const noexcept { return p_; }
  template <class T>
  [[nodiscard]] T* as() const noexcept {
    return static_cast<T*>(p_);
  }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }
  /// Physical device, or -1 for pinned host memory.
  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] explicit operator bool() const noexcept { return p_ != nullptr; }

 private:
  friend class Runtime;
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
  std::size_t capacity_ = 0;
  int device_ = -1;
};

/// `co_await on(stream)`: records an event on the stream and resumes, on a
/// worker of the runtime's resume_ctx, once all work enqueued on the stream
/// before it has finished. Rethrows a device failure. Does not hold a worker.
class [[nodiscard]] StreamAwaitable {
 public:
  explicit StreamAwaitable(const Stream& s) : s_(s) {}
  StreamAwaitable(StreamAwaitable&& o) noexcept : s_(o.s_), ev_(std::exchange(o.ev_, nullptr)) {}
  StreamAwaitable(const StreamAwaitable&) = delete;
  StreamAwaitable& operator=(const StreamAwaitable&) = delete;
  ~StreamAwaitable();
  bool await_ready();
  void await_suspend(std::coroutine_handle<> h);
  void await_resume() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  Stream s_;
  detail::Event* ev_ = nullptr;
  std::exception_ptr error_;
};
[[nodiscard]] inline StreamAwaitable on(const Stream& s) { return StreamAwaitable(s); }

/// The GPU layer of one engine: streams per logical device, an event pool,
/// the fences on variables, the watcher thread and a memory pool.
///
/// @par Thread safety
/// Every member may be called from any thread. Destroy the Runtime only
/// after the engine has finished every op that uses it (wait_for_all), and
/// before the engine.
class Runtime {
 public:
  Runtime(Engine& engine, std::unique_ptr<Backend> backend, RuntimeOptions options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  [[nodiscard]] Engine& engine() const noexcept { return engine_; }
  [[nodiscard]] Backend& backend() const noexcept;
  [[nodiscard]] const RuntimeOptions& options() const noexcept;
  /// Logical devices (0 when the backend has none: GPU pushes then throw).
  [[nodiscard]] int device_count() const noexcept;
  /// Why there is no device (empty when there is one).
  [[nodiscard]] std::string unavailable_reason() const;

  /// Pushes a GPU op: `fn(const Stream&)` enqueues work on the stream and
  /// returns; when it is done: the head of this file. `ctx` must be a GPU context
  /// of an existing logical device (else ordo::gpu::GpuError, named
  /// "cudaErrorNoDevice" / "cudaErrorInvalidDevice", from this call).
  template <class F>
  void push(F&& fn, Context ctx, VarSpan reads, VarSpan writes, OpAttrs attrs = {}) {
    using D = std::decay_t<F>;
    static_assert(std::is_invocable_v<D&, const Stream&>, "a GPU op body is callable as void(const gpu::Stream&)");
    if (capturing()) [[unlikely]] {
      record(std::make_shared<detail::GpuCallOf<D>>(std::forward<F>(fn)), ctx, reads, writes, attrs);
      return;
    }
    detail::PlanPtr plan = make_plan(ctx, reads, writes, attrs);
    ordo::detail::EngineExtension::push(engine_, Body<D>{this, std::move(plan), std::forward<F>(fn)}, ctx, reads, writes,
                                        attrs, ordo::detail::kFenceExempt);
  }

  /// Prepares a GPU operator: `fn(const Stream&)` as for push, with its
  /// variable lists, attributes and fence plan built once. Each push(op, ctx)
  /// then costs the engine's push of a pre-built operator (lists normalised
  /// once) and nothing more from the runtime (no allocation; Runtime::push
  /// allocates the op's plan). The body may run concurrently with itself if
  /// pushes do not conflict. It is an engine Operator whose pushes are
  /// fence-exempt (detail::kFenceExempt): it orders itself on the device.
  template <class F>
  [[nodiscard]] Operator new_operator(F&& fn, VarSpan reads, VarSpan writes, OpAttrs attrs = {}) {
    using D = std::decay_t<F>;
    static_assert(std::is_invocable_v<D&, const Stream&>, "a GPU op body is callable as void(const gpu::Stream&)");
    detail::PlanPtr plan = operator_plan(reads, writes, attrs);
    // Shared: a graph that captures a push of it keeps the body (gpu/graphs.cpp).
    auto call = std::make_shared<detail::GpuCallOf<D>>(std::forward<F>(fn));
    const ordo::Operator op = ordo::detail::EngineExtension::new_operator(
        engine_, Body<detail::SharedCall>{this, std::move(plan), detail::SharedCall{call}}, reads, writes, attrs,
        ordo::detail::kFenceExempt);
    return Operator(op, keep_operator(op, std::move(call), reads, writes, attrs));
  }
  /// Pushes a GPU operator on `ctx` (a GPU context, checked as for push);
  /// `priority` overrides the operator's. Throws ordo::Error
  /// {Errc::deleted_operator} for an empty, deleted or foreign handle.
  void push(Operator op, Context ctx);
  void push(Operator op, Context ctx, int priority);
  /// Pushes already made still run; later pushes throw Errc::deleted_operator;
  /// the body is destroyed when the last push has finished.
  void delete_operator(Operator op);

  /// A stream of `ctx`'s logical device, for code outside GPU ops (a
  /// coroutine holding a lease): compute stream `index` (modulo their
  /// number), or the copy stream of `prop`.
  [[nodiscard]] Stream stream(Context ctx, FnProperty prop = FnProperty::normal, unsigned index = 0);
  /// Calls `done` (an async op's completion) once the work enqueued on `s`
  /// so far has finished, with its failure if any. From the watcher thread.
  void complete_when_done(const Stream& s, OnComplete done);

  /// Pooled memory: device memory of logical device `device`, or pinned host memory.
  [[nodiscard]] Buffer alloc_device(int device, std::size_t bytes);
  [[nodiscard]] Buffer alloc_host(std::size_t bytes);
  /// Returns memory to the pool now: nothing may still use it.
  void free(Buffer b) noexcept;
  /// Pinned host memory for an ordo::BufferPool (ordo/storage.hpp), which
  /// then pools it, in its size classes, behind its buffers' variables:
  /// `ordo::BufferPool staging(engine, {.allocator = rt.pinned_allocator()})`.
  /// Blocks come straight from the backend (cudaMallocHost: page aligned;
  /// the simulated backend: 256-byte aligned) and go back to it. The
  /// allocator refers to this runtime: release the pool's buffers, let
  /// their releases run (Engine::wait_for_all) and destroy the pool before
  /// the runtime.
  [[nodiscard]] std::shared_ptr<HostAllocator> pinned_allocator();
  /// Engine::delete_variable(var) whose deleter returns `b` to the pool: the
  /// memory is reused only after every op pushed on var and every GPU event
  /// fencing var has completed.
  void delete_variable(Var var, Buffer b);

  /// Waits (blocking, asleep) for all work enqueued on every stream so far,
  /// then rethrows the first device failure no consumer was given yet (a
  /// GpuError with the error's name, or a host task's exception), once.
  /// Engine::wait_for_all does the same after its ops (ordo/fence.hpp).
  /// Not from a complete_when_done callback (the watcher thread).
  void synchronize();
  [[nodiscard]] RuntimeStats stats() const noexcept;

  struct Impl;  // internal

 private:
  friend class Stream;
  friend class StreamAwaitable;
  friend struct detail::GroupRun;

  template <class D>
  struct Body {
    Runtime* rt;
    detail::PlanPtr plan;
    D fn;
    void operator()(const RunContext& rc, OnComplete done) {
      std::exception_ptr error;
      detail::OpSlice slice;
      const Stream s = rt->begin_op(rc, *plan, slice, error);
      if (!error) {
        try {
          fn(s);
        } catch (...) {
          error = std::current_exception();
        }
        rt->end_op(s, *plan, slice, error);
      }
      done(error);
    }
  };

  /// Whether this thread captures a graph of the engine (Engine::capture):
  /// GPU ops are then recorded (gpu/graphs.cpp), not pushed.
  [[nodiscard]] bool capturing() const noexcept {
    const ordo::detail::GraphRecorder* rec = ordo::detail::t_recorder;
    return rec != nullptr && rec->engine() == &engine_;
  }
  void record(std::shared_ptr<detail::GpuCall> call, Context ctx, VarSpan reads, VarSpan writes, const OpAttrs& attrs);
  /// A push of `op` inside a capture: records its body and lists.
  void record_operator(Operator op, Context ctx, const int* priority);
  /// A captured group's run (a node of a replayed graph): launches its
  /// backend graph, captured first if not yet.
  void run_group(detail::CapturedGroup& g, const RunContext& rc, OnComplete done);
  void capture_group(detail::CapturedGroup& g);
  /// The operator's body and lists, for pushes of it inside a capture; its id.
  std::uint64_t keep_operator(ordo::Operator op, std::shared_ptr<detail::GpuCall> call, VarSpan reads, VarSpan writes,
                              const OpAttrs& attrs);
  detail::PlanPtr make_plan(Context ctx, VarSpan reads, VarSpan writes, const OpAttrs& attrs);
  detail::PlanPtr operator_plan(VarSpan reads, VarSpan writes, const OpAttrs& attrs);
  void fill_plan(detail::OpPlan& plan, VarSpan reads, VarSpan writes, const OpAttrs& attrs);
  Stream begin_op(const RunContext& rc, const detail::OpPlan& plan, detail::OpSlice& slice,
                  std::exception_ptr& error) noexcept;
  void end_op(const Stream& s, const detail::OpPlan& plan, detail::OpSlice& slice, std::exception_ptr& error) noexcept;

  Engine& engine_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ordo::gpu

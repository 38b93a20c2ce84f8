// ordo/gpu/backend.hpp - the small stream/event interface the gpu layer runs
// on, with two implementations: CUDA (cudart; gpu/cuda_backend.cpp, built when
// the toolkit is found) and a simulated one (gpu/sim_backend.cpp: each stream
// a FIFO run by a thread, events completion flags, optional random delays), so
// that the layer's logic (event bookkeeping, cross-stream waits, completion
// ordering) is tested on machines without a GPU.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

namespace ordo::gpu {

/// A device-side failure: a CUDA error (name() is e.g. "cudaErrorIllegalAddress",
/// code() the cudaError_t value), a simulated one (name() "simError...") or
/// "no device". what() is "<name>: <where/what>".
///
/// @par Thread safety
/// An immutable exception object.
class GpuError : public std::runtime_error {
 public:
  GpuError(int code, const std::string& name, const std::string& where)
      : std::runtime_error(name + ": " + where), code_(code), name_(name) {}
  [[nodiscard]] int code() const noexcept { return code_; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }

 private:
  int code_;
  std::string name_;
};

using StreamHandle = void*;  ///< cudaStream_t for the CUDA backend
using EventHandle = void*;   ///< cudaEvent_t for the CUDA backend
using GraphHandle = void*;   ///< cudaGraphExec_t for the CUDA backend
using HostFn = std::function<void()>;

/// Streams and events of one process. Semantics are CUDA's: work enqueued on
/// a stream runs in order; record() marks the point an event completes at;
/// wait() makes later work of a stream wait for the event's latest record
/// (as of the call); query() reports that record (an event never recorded is
/// complete). Errors are sticky per stream: once work on a stream failed,
/// later events recorded on it (and on streams that wait for them) fail too.
///
/// @par Thread safety
/// Every member may be called from any thread concurrently (as cudart allows).
class Backend {
 public:
  virtual ~Backend() = default;
  [[nodiscard]] virtual const char* name() const noexcept = 0;
  /// Physical devices usable now (0: none; see unavailable_reason()).
  [[nodiscard]] virtual int device_count() const noexcept = 0;
  /// Why device_count() is 0 (empty otherwise).
  [[nodiscard]] virtual std::string unavailable_reason() const = 0;

  /// Called on the thread that runs GPU work, just before a GPU op's body:
  /// makes `device` current for the calling thread (cudaSetDevice, so that a
  /// body's launches and allocations go to the op's device) and discards a
  /// launch error an earlier call left on the thread. Default: nothing.
  virtual void before_body(int device) { (void)device; }
  /// Just after a body (and before `co_await gpu::on`): throws GpuError for a
  /// launch error the body left on its thread (cudaGetLastError: an invalid
  /// configuration, a kernel without an image for this device...). CUDA
  /// reports such errors only to the launching thread, never through events,
  /// so without this check a failed launch would read as done. Default: nothing.
  virtual void after_body() {}

  virtual StreamHandle create_stream(int device) = 0;
  /// Waits for the stream's work, then destroys it.
  virtual void destroy_stream(StreamHandle stream) noexcept = 0;
  /// `blocking_sync`: synchronize() yields the CPU instead of spinning.
  /// `timed`: completed_at() may be asked (the engine's profiler is on).
  virtual EventHandle create_event(int device, bool blocking_sync, bool timed) = 0;
  virtual void destroy_event(EventHandle event) noexcept = 0;

  virtual void record(EventHandle event, StreamHandle stream) = 0;
  virtual void wait(StreamHandle stream, EventHandle event) = 0;
  /// True once the event's latest record completed; false while pending.
  /// Throws GpuError (or the failed work's exception) if that work failed.
  virtual bool query(EventHandle event) = 0;
  /// Blocks until the event's latest record completed; throws like query().
  virtual void synchronize(EventHandle event) = 0;
  virtual void synchronize_stream(StreamHandle stream) = 0;
  /// When the latest record of `event` (timed, on `device`, completed)
  /// completed, on the host's steady_clock: what places GPU work in the
  /// engine's trace. Throws GpuError if the backend cannot tell.
  [[nodiscard]] virtual std::chrono::steady_clock::time_point completed_at(int device, EventHandle event) = 0;

  /// Enqueues a host function in stream order (simulated kernels; CUDA:
  /// cudaLaunchHostFunc, which forbids CUDA calls inside it). On the
  /// simulated backend an exception it throws fails the stream (sticky: a
  /// simulated device fault); on CUDA it is printed. Stream::host_task wraps
  /// it so that an exception fails the stream on both (see ordo/gpu.hpp).
  virtual void host_task(StreamHandle stream, HostFn fn) = 0;
  /// Asynchronous copy in stream order, any direction (cudaMemcpyDefault).
  virtual void copy(void* dst, const void* src, std::size_t bytes, StreamHandle stream) = 0;

  /// Stream capture (CUDA graphs), for captured engine graphs (docs/gpu.md,
  /// "Captured"). From begin_capture on, the host tasks and copies enqueued
  /// on `stream` by the calling thread are kept, not run; record() and
  /// wait() on it are not allowed meanwhile. end_capture() ends the capture
  /// and returns the work as a graph ready to launch (instantiated); it
  /// throws (and discards the work) if the capture failed. launch()
  /// enqueues the whole graph on a stream, in capture order, any number of
  /// times; destroy_graph() when no launch of it is pending. Defaults:
  /// GpuError "not supported".
  virtual void begin_capture(StreamHandle stream) {
    (void)stream;
    unsupported("begin_capture");
  }
  virtual GraphHandle end_capture(StreamHandle stream) {
    (void)stream;
    unsupported("end_capture");
  }
  virtual void launch(GraphHandle graph, StreamHandle stream) {
    (void)graph;
    (void)stream;
    unsupported("launch");
  }
  virtual void destroy_graph(GraphHandle graph) noexcept { (void)graph; }

  virtual void* alloc_device(int device, std::size_t bytes) = 0;
  virtual void free_device(int device, void* p) noexcept = 0;
  /// Page-locked host memory (cudaMallocHost), so copies are truly asynchronous.
  virtual void* alloc_pinned(std::size_t bytes) = 0;
  virtual void free_pinned(void* p) noexcept = 0;

 private:
  [[noreturn]] void unsupported(const char* call) const {
    throw GpuError(801, "cudaErrorNotSupported", std::string(name()) + ": " + call + ": no stream capture");
  }
};

/// Simulated backend configuration. Device memory is host memory: host
/// code (and CPU ops) can read it, which is what the tests do to observe
/// ordering.
struct SimOptions {
  int devices = 2;
  /// Each stream item (host task, copy, record) waits a random time in
  /// [0, max_delay] before it runs, so that a missing cross-stream wait or a
  /// CPU read of unfinished work shows up as a wrong result.
  std::chrono::microseconds max_delay{0};
  std::uint64_t seed = 1;  ///< of the per-stream delay generators
};

[[nodiscard]] std::unique_ptr<Backend> make_sim_backend(SimOptions options = {});

/// The CUDA backend. Never throws for a missing driver or device: it then
/// reports device_count() == 0 and says why. Without CUDA support compiled
/// in (ORDO_WITH_CUDA=OFF or no toolkit) it is such a backend too.
[[nodiscard]] std::unique_ptr<Backend> make_cuda_backend();
/// Whether this build of ordo::gpu has the CUDA backend.
[[nodiscard]] bool cuda_compiled() noexcept;

/// Run-time probe: physical CUDA devices usable now, and why not when 0.
struct Probe {
  int devices = 0;
  std::string reason;  ///< empty when devices > 0
  [[nodiscard]] bool available() const noexcept { return devices > 0; }
};
[[nodiscard]] Probe probe_cuda();

}  // namespace ordo::gpu

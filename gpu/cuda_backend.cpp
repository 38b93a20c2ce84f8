// gpu/cuda_backend.cpp - the Backend over the CUDA runtime (cudart). Built
// only when the toolkit is found (ORDO_WITH_CUDA). Every call goes through
// check(), which turns a cudaError_t into a GpuError carrying the error's
// name and the call site.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ordo/gpu/backend.hpp"

namespace ordo::gpu {
namespace {

[[noreturn]] void fail(cudaError_t e, const char* call) {
  // The failed call also left `e` as the thread's last error: reported here,
  // so a later launch check (Backend::after_body, co_await gpu::on) must not
  // report it again as a launch's.
  (void)cudaGetLastError();
  throw GpuError(static_cast<int>(e), cudaGetErrorName(e), std::string(call) + ": " + cudaGetErrorString(e));
}

void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) fail(e, call);
}

#define ORDO_CUDA_CHECK(expr) check((expr), #expr)

/// Host function trampolines for cudaLaunchHostFunc. They run on the driver's
/// callback thread: user code only (no CUDA call may be made there, and no
/// engine logic is). ordo::gpu::Stream::host_task hands in a function that
/// never throws (the Runtime catches and keeps the exception: it fails the
/// stream, docs/gpu.md); a raw Backend::host_task that throws has nowhere to
/// go, so it is printed.
void call_host_fn(const HostFn& fn) noexcept {
  try {
    fn();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ordo::gpu: a host task threw on the CUDA callback thread: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "ordo::gpu: a host task threw on the CUDA callback thread\n");
  }
}
void CUDART_CB run_host_fn(void* p) {
  auto* fn = static_cast<HostFn*>(p);
  call_host_fn(*fn);
  delete fn;
}
/// A host task captured into a graph: its node runs at every launch, so the
/// function belongs to the graph (CudaGraph), not to one run.
void CUDART_CB run_kept_host_fn(void* p) { call_host_fn(*static_cast<const HostFn*>(p)); }

/// A captured graph (Backend::end_capture): the instantiated graph and the
/// host functions its host nodes call.
struct CudaGraph {
  cudaGraphExec_t exec = nullptr;
  std::vector<std::unique_ptr<HostFn>> fns;
};

/// The capture running on this thread (cudaStreamCaptureModeThreadLocal:
/// only this thread's calls are checked against it), and the host functions
/// it recorded so far.
struct CaptureScope {
  cudaStream_t stream = nullptr;
  std::unique_ptr<CudaGraph> graph;
};
thread_local CaptureScope t_capture;

class CudaBackend final : public Backend {
 public:
  CudaBackend() {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      reason_ = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
      (void)cudaGetLastError();  // clear it: this is a probe, not a failure
      devices_ = 0;
    } else if (n == 0) {
      reason_ = "cudaErrorNoDevice: the CUDA driver reports no device";
    } else {
      devices_ = n;
    }
  }
  ~CudaBackend() override {
    for (const Anchor& a : anchors_) {
      if (a.event != nullptr) (void)cudaEventDestroy(a.event);
    }
  }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;
  const char* name() const noexcept override { return "cuda"; }
  int device_count() const noexcept override { return devices_; }
  std::string unavailable_reason() const override { return reason_; }

  void before_body(int device) override {
    ORDO_CUDA_CHECK(cudaSetDevice(device));
    (void)cudaGetLastError();  // not this body's: a failed call before it already reported its own error
  }
  void after_body() override {
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) fail(e, "a kernel launch in the op's body (cudaGetLastError)");
  }

  StreamHandle create_stream(int device) override {
    ORDO_CUDA_CHECK(cudaSetDevice(device));
    cudaStream_t s = nullptr;
    ORDO_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  }
  void destroy_stream(StreamHandle s) noexcept override {
    (void)cudaStreamSynchronize(static_cast<cudaStream_t>(s));
    (void)cudaStreamDestroy(static_cast<cudaStream_t>(s));
  }
  EventHandle create_event(int device, bool blocking_sync, bool timed) override {
    ORDO_CUDA_CHECK(cudaSetDevice(device));
    if (timed) anchor(device);
    cudaEvent_t e = nullptr;
    // Untimed events are cheaper to record and query.
    const unsigned flags = (timed ? 0U : cudaEventDisableTiming) | (blocking_sync ? cudaEventBlockingSync : 0U);
    ORDO_CUDA_CHECK(cudaEventCreateWithFlags(&e, flags));
    return e;
  }
  void destroy_event(EventHandle e) noexcept override { (void)cudaEventDestroy(static_cast<cudaEvent_t>(e)); }

  void record(EventHandle event, StreamHandle stream) override {
    ORDO_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
  }
  void wait(StreamHandle stream, EventHandle event) override {
    ORDO_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0));
  }
  bool query(EventHandle event) override {
    const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (e == cudaSuccess) return true;
    if (e == cudaErrorNotReady) return false;
    fail_async(e, "cudaEventQuery");
  }
  void synchronize(EventHandle event) override {
    const cudaError_t e = cudaEventSynchronize(static_cast<cudaEvent_t>(event));
    if (e != cudaSuccess) fail_async(e, "cudaEventSynchronize");
  }
  void synchronize_stream(StreamHandle stream) override {
    const cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
    if (e != cudaSuccess) fail_async(e, "cudaStreamSynchronize");
  }

  std::chrono::steady_clock::time_point completed_at(int device, EventHandle event) override {
    const Anchor a = anchor(device);
    float ms = 0;
    ORDO_CUDA_CHECK(cudaEventElapsedTime(&ms, a.event, static_cast<cudaEvent_t>(event)));
    return a.at + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double, std::milli>(ms));
  }

  void host_task(StreamHandle stream, HostFn fn) override {
    if (t_capture.graph != nullptr && t_capture.stream == static_cast<cudaStream_t>(stream)) [[unlikely]] {
      auto kept = std::make_unique<HostFn>(std::move(fn));
      ORDO_CUDA_CHECK(cudaLaunchHostFunc(t_capture.stream, &run_kept_host_fn, kept.get()));
      t_capture.graph->fns.push_back(std::move(kept));
      return;
    }
    auto* p = new HostFn(std::move(fn));
    const cudaError_t e = cudaLaunchHostFunc(static_cast<cudaStream_t>(stream), &run_host_fn, p);
    if (e != cudaSuccess) {
      delete p;
      fail(e, "cudaLaunchHostFunc");
    }
  }
  void copy(void* dst, const void* src, std::size_t bytes, StreamHandle stream) override {
    ORDO_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)));
  }

  void begin_capture(StreamHandle stream) override {
    if (t_capture.graph != nullptr) {
      throw GpuError(900, "cudaErrorStreamCaptureUnsupported", "begin_capture: this thread captures already");
    }
    ORDO_CUDA_CHECK(cudaStreamBeginCapture(static_cast<cudaStream_t>(stream), cudaStreamCaptureModeThreadLocal));
    t_capture.stream = static_cast<cudaStream_t>(stream);
    t_capture.graph = std::make_unique<CudaGraph>();
  }
  GraphHandle end_capture(StreamHandle stream) override {
    std::unique_ptr<CudaGraph> g = std::move(t_capture.graph);
    t_capture.stream = nullptr;
    cudaGraph_t graph = nullptr;
    ORDO_CUDA_CHECK(cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &graph));
    const cudaError_t e = cudaGraphInstantiate(&g->exec, graph, 0);
    (void)cudaGraphDestroy(graph);  // the executable graph is independent of it
    if (e != cudaSuccess) fail(e, "cudaGraphInstantiate");
    return g.release();
  }
  void launch(GraphHandle graph, StreamHandle stream) override {
    ORDO_CUDA_CHECK(cudaGraphLaunch(static_cast<CudaGraph*>(graph)->exec, static_cast<cudaStream_t>(stream)));
  }
  void destroy_graph(GraphHandle graph) noexcept override {
    auto* g = static_cast<CudaGraph*>(graph);
    if (g == nullptr) return;
    if (g->exec != nullptr) (void)cudaGraphExecDestroy(g->exec);
    delete g;
  }

  void* alloc_device(int device, std::size_t bytes) override {
    ORDO_CUDA_CHECK(cudaSetDevice(device));
    void* p = nullptr;
    ORDO_CUDA_CHECK(cudaMalloc(&p, bytes));
    return p;
  }
  void free_device(int device, void* p) noexcept override {
    (void)cudaSetDevice(device);
    (void)cudaFree(p);
  }
  void* alloc_pinned(std::size_t bytes) override {
    void* p = nullptr;
    ORDO_CUDA_CHECK(cudaMallocHost(&p, bytes));
    return p;
  }
  void free_pinned(void* p) noexcept override { (void)cudaFreeHost(p); }

 private:
  /// A failure of work on the device, seen by a query or a synchronize. CUDA
  /// reports a sticky error again from every later call; the same code gives
  /// the same exception object, so the runtime reports one failure once.
  [[noreturn]] void fail_async(cudaError_t e, const char* call) {
    std::exception_ptr error;
    {
      std::lock_guard lock(mutex_);
      for (const auto& [code, p] : async_errors_) {
        if (code == e) error = p;
      }
      if (!error) {
        error = std::make_exception_ptr(
            GpuError(static_cast<int>(e), cudaGetErrorName(e), std::string(call) + ": " + cudaGetErrorString(e)));
        async_errors_.emplace_back(e, error);
      }
    }
    std::rethrow_exception(error);
  }

  /// A device's reference point: event times are measured from it
  /// (cudaEventElapsedTime) and placed on the host's clock by its host time.
  struct Anchor {
    cudaEvent_t event = nullptr;
    std::chrono::steady_clock::time_point at{};
  };

  /// The device's anchor, made by the first call: an event recorded on an
  /// idle stream and queried until it completed, placed midway between the
  /// record call and the query that saw it done.
  Anchor anchor(int device) {
    std::lock_guard lock(anchor_mutex_);
    if (anchors_.size() <= static_cast<std::size_t>(device)) anchors_.resize(static_cast<std::size_t>(device) + 1);
    Anchor& a = anchors_[static_cast<std::size_t>(device)];
    if (a.event != nullptr) return a;
    ORDO_CUDA_CHECK(cudaSetDevice(device));
    cudaStream_t s = nullptr;
    ORDO_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e = nullptr;
    cudaError_t rc = cudaEventCreate(&e);
    const auto before = std::chrono::steady_clock::now();
    if (rc == cudaSuccess) rc = cudaEventRecord(e, s);
    while (rc == cudaSuccess && (rc = cudaEventQuery(e)) == cudaErrorNotReady) {
    }
    const auto after = std::chrono::steady_clock::now();
    (void)cudaStreamDestroy(s);
    if (rc != cudaSuccess) {
      if (e != nullptr) (void)cudaEventDestroy(e);
      fail(rc, "the profiler's reference event (cudaEventCreate/Record/Query)");
    }
    a.event = e;
    a.at = before + (after - before) / 2;
    return a;
  }

  int devices_ = 0;
  std::string reason_;
  std::mutex mutex_;
  std::vector<std::pair<cudaError_t, std::exception_ptr>> async_errors_;  ///< guarded by mutex_
  std::mutex anchor_mutex_;
  std::vector<Anchor> anchors_;  ///< per physical device, set once (guarded by anchor_mutex_)
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<CudaBackend>(); }
bool cuda_compiled() noexcept { return true; }

Probe probe_cuda() {
  CudaBackend b;
  return Probe{b.device_count(), b.unavailable_reason()};
}

}  // namespace ordo::gpu

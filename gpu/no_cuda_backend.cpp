// gpu/no_cuda_backend.cpp - make_cuda_backend() in a build without CUDA: a
// backend with no devices that says why, so GPU contexts fail clearly and
// GPU tests skip.
#include <string>

#include "ordo/gpu/backend.hpp"

namespace ordo::gpu {
namespace {

constexpr const char* kReason =
    "ordo was built without CUDA (ORDO_WITH_CUDA=OFF, or AUTO found no CUDA toolkit)";

class NoCudaBackend final : public Backend {
 public:
  const char* name() const noexcept override { return "cuda (not built)"; }
  int device_count() const noexcept override { return 0; }
  std::string unavailable_reason() const override { return kReason; }
  StreamHandle create_stream(int) override { fail(); }
  void destroy_stream(StreamHandle) noexcept override {}
  EventHandle create_event(int, bool, bool) override { fail(); }
  void destroy_event(EventHandle) noexcept override {}
  void record(EventHandle, StreamHandle) override { fail(); }
  void wait(StreamHandle, EventHandle) override { fail(); }
  bool query(EventHandle) override { fail(); }
  void synchronize(EventHandle) override { fail(); }
  void synchronize_stream(StreamHandle) override { fail(); }
  std::chrono::steady_clock::time_point completed_at(int, EventHandle) override { fail(); }
  void host_task(StreamHandle, HostFn) override { fail(); }
  void copy(void*, const void*, std::size_t, StreamHandle) override { fail(); }
  void* alloc_device(int, std::size_t) override { fail(); }
  void free_device(int, void*) noexcept override {}
  void* alloc_pinned(std::size_t) override { fail(); }
  void free_pinned(void*) noexcept override {}

 private:
  [[noreturn]] static void fail() { throw GpuError(100, "cudaErrorNoDevice", kReason); }
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<NoCudaBackend>(); }
bool cuda_compiled() noexcept { return false; }
Probe probe_cuda() { return Probe{0, kReason}; }

}  // namespace ordo::gpu

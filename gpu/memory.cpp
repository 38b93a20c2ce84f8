// gpu/memory.cpp - the runtime's memory pool: device and pinned host blocks
// in power-of-two size classes, reused until ~Runtime, so that steady-state
// allocation never calls the backend (cudaFree synchronises the device).
#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>

#include "ordo/storage.hpp"
#include "runtime_impl.hpp"

namespace ordo::gpu {

namespace {
/// The size classes of ordo's pools (ordo/storage.hpp): powers of two from
/// 256 bytes, with no cutoff (CUDA allocations are 256-byte aligned).
constexpr SizeClasses kClasses{.page = 256, .pow2_cutoff = std::size_t{1} << 62};
std::size_t capacity_for(std::size_t bytes) { return kClasses.round(bytes); }

/// Pinned host blocks for an ordo::BufferPool, straight from the backend.
class PinnedAllocator final : public HostAllocator {
 public:
  explicit PinnedAllocator(Backend& b) noexcept : backend_(b) {}
  void* allocate(std::size_t bytes, std::size_t) override { return backend_.alloc_pinned(bytes); }
  void deallocate(void* p, std::size_t) noexcept override { backend_.free_pinned(p); }

 private:
  Backend& backend_;
};
}  // namespace

std::shared_ptr<HostAllocator> Runtime::pinned_allocator() {
  return std::make_shared<PinnedAllocator>(*impl_->backend);
}

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

}  // namespace ordo::gpu

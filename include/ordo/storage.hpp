// ordo/storage.hpp - the storage allocator: pooled host buffers recycled in
// dependency order (MXNet's storage manager, in engine terms).
//
// A Buffer from a BufferPool carries its own engine variable. Ops that touch
// the memory declare that variable (reads(buf.var()) / writes(buf.var())),
// so the engine orders them like any other data. Releasing the buffer is an
// Engine::delete_variable of that variable whose deleter puts the memory back
// in its size class: the memory is reused only after every op pushed on the
// buffer has finished, with no synchronisation written by the user.
//
//   ordo::BufferPool pool(engine, {.limit_bytes = 64 << 20});
//   ordo::Buffer buf = co_await pool.acquire(1 << 20);   // waits while at the limit
//   io.push_read(buf.var(), fd, buf.bytes(), offset);    // mutates buf.var()
//   engine.push_sync([p = buf.data()] { use(p); }, ctx, {buf.var()}, {out});
//   buf.release();  // back to its bucket once the read and the use are done
#pragma once

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <utility>

#include "ordo/engine.hpp"
#include "ordo/error.hpp"
#include "ordo/var.hpp"

namespace ordo {

/// How a request is rounded to a size class (MXNet's pooled storage managers:
/// "page" rounding for small CPU blocks, powers of two up to a cutoff, then
/// linear). A request of n bytes gets a block of
///  - the next power of two of max(n, page), when that is at most pow2_cutoff;
///  - else n rounded up to a multiple of page.
/// Powers of two make requests of nearby sizes share a bucket (more reuse,
/// at most 2x the memory); above the cutoff a block is reused only by a
/// request of the same page count (little waste for big blocks). A cutoff
/// of 0 gives page rounding everywhere. Both must be powers of two.
struct SizeClasses {
  std::size_t page = 4096;
  std::size_t pow2_cutoff = std::size_t{1} << 20;
  /// The block size (the bucket) of a request of `bytes` (0 counts as 1;
  /// over SIZE_MAX / 4, which BufferPool refuses: SIZE_MAX).
  [[nodiscard]] std::size_t round(std::size_t bytes) const noexcept;
};

/// Where a pool's blocks come from. The default gives page-aligned memory
/// from the C library (std::aligned_alloc); the gpu layer gives pinned host
/// memory (gpu::Runtime::pinned_allocator). Called without the pool's lock.
///
/// @par Thread safety
/// allocate and deallocate may be called from any thread, concurrently.
class HostAllocator {
 public:
  virtual ~HostAllocator() = default;
  /// A block of `bytes` (a multiple of `alignment`), aligned to at least
  /// `alignment` where the allocator can (the default can; pinned memory from
  /// the CUDA runtime is page aligned). Throws (std::bad_alloc or the
  /// backend's error) on failure.
  virtual void* allocate(std::size_t bytes, std::size_t alignment) = 0;
  virtual void deallocate(void* p, std::size_t bytes) noexcept = 0;
  /// The default: std::aligned_alloc / std::free.
  static std::shared_ptr<HostAllocator> system();
};

struct BufferPoolOptions {
  SizeClasses classes{};
  /// Upper bound on the memory the pool holds from its allocator (buffers
  /// handed out, buffers whose release is pending, and cached ones). An
  /// acquire that would pass it first frees cached blocks of other sizes,
  /// then waits for a release. 0: no limit (cached memory then grows to the
  /// peak in use and stays until trim() or the pool's destruction, as MXNet's).
  std::size_t limit_bytes = 0;
  /// Null: HostAllocator::system().
  std::shared_ptr<HostAllocator> allocator{};
  /// The context the release ops (the deleters) are pushed to.
  Context release_ctx = Context::cpu();
};

/// A BufferPool's figures. Byte counts are block sizes (SizeClasses::round).
struct BufferPoolStats {
  std::size_t in_use_bytes = 0;    ///< handed out, or released with ops still pending on them
  std::size_t cached_bytes = 0;    ///< in the buckets, ready for the next acquire
  std::size_t reserved_bytes = 0;  ///< in_use + cached: what the pool holds from its allocator
  std::size_t peak_in_use_bytes = 0;
  std::size_t peak_reserved_bytes = 0;
  std::size_t buffers_in_use = 0;
  std::uint64_t acquires = 0;  ///< buffers handed out
  std::uint64_t hits = 0;      ///< ... from a bucket (no allocation)
  std::uint64_t misses = 0;    ///< ... from the allocator
  std::uint64_t waits = 0;     ///< acquires that had to wait for a release (the limit)
  std::uint64_t trimmed = 0;   ///< cached blocks freed to make room under the limit, or by trim()
  [[nodiscard]] double hit_rate() const noexcept {
    return acquires == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(acquires);
  }
};

namespace detail {
struct PoolState;
struct PoolWaiter;
}  // namespace detail

/// Memory handed out by a BufferPool, with the engine variable that orders
/// its users. Move-only; owns the handout: release() (or the destructor)
/// schedules the return of the memory behind every op pushed on var().
///
/// Each handout gets a fresh variable (the previous holder's variable was
/// deleted by its release), so a stale Var kept from an earlier holder is
/// rejected by the engine (Errc::deleted_var) instead of racing the new one.
///
/// @par Thread safety
/// One owner at a time. data(), bytes() and var() may be copied into ops,
/// which run on any thread; the engine orders them by var().
class Buffer {
 public:
  Buffer() noexcept = default;
  Buffer(Buffer&& o) noexcept
      : state_(std::move(o.state_)),
        p_(std::exchange(o.p_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        capacity_(std::exchange(o.capacity_, 0)),
        var_(std::exchange(o.var_, Var{})) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      release();
      state_ = std::move(o.state_);
      p_ = std::exchange(o.p_, nullptr);
      size_ = std::exchange(o.size_, 0);
      capacity_ = std::exchange(o.capacity_, 0);
      var_ = std::exchange(o.var_, Var{});
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  /// release(): a buffer dropped without being released still goes back in order.
  ~Buffer() { release(); }

  [[nodiscard]] std::byte* data() const noexcept { return static_cast<std::byte*>(p_); }
  template <class T>
  [[nodiscard]] T* as() const noexcept {
    return static_cast<T*>(p_);
  }
  /// The size asked for.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// The block's size (its size class); usable in full.
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] std::span<std::byte> bytes() const noexcept { return {data(), size_}; }
  /// The variable ops on this memory declare. Deleted by release().
  [[nodiscard]] Var var() const noexcept { return var_; }
  [[nodiscard]] explicit operator bool() const noexcept { return p_ != nullptr; }

  /// Engine::delete_variable(var()) whose deleter returns the memory to its
  /// bucket (or to a waiting acquirer): after every op already pushed on
  /// var() has finished (failed or skipped ones included). The handle is
  /// empty afterwards; pushing the old var() throws Errc::deleted_var.
  /// No-op on an empty buffer. Never throws: if the engine refuses the
  /// delete (the variable was deleted by hand), the memory is returned at
  /// once, which is right only if nothing uses it any more.
  void release() noexcept;

 private:
  friend struct detail::PoolState;
  Buffer(std::shared_ptr<detail::PoolState> s, void* p, std::size_t size, std::size_t capacity, Var v) noexcept
      : state_(std::move(s)), p_(p), size_(size), capacity_(capacity), var_(v) {}
  std::shared_ptr<detail::PoolState> state_;
  void* p_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
  Var var_;
};

namespace detail {
/// An acquirer waiting for memory under the limit (a node of the pool's
/// FIFO, owned by the AcquireAwaitable or the blocking wait that waits).
struct PoolWaiter {
  std::size_t size = 0;
  std::size_t capacity = 0;
  PoolWaiter* next = nullptr;
  // Set by the granting thread before it signals (`h` posted, or `done`).
  void* block = nullptr;     ///< the block granted (null: allocate it, reserved)
  Buffer result;
  std::exception_ptr error;
  std::coroutine_handle<> h;  ///< a coroutine to resume (posted to the engine), or
  bool done = false;          ///< a blocked thread's flag (guarded by the pool's mutex)
};
}  // namespace detail

class BufferPool;

/// Returned by BufferPool::acquire: `co_await` yields the Buffer, suspending
/// (no thread blocked) while the pool is at its limit; wait() blocks the
/// calling thread instead. Nothing happens until one of them is called.
/// Acquirers are served in FIFO order: one that finds others waiting queues
/// behind them even if its own size would fit. A waiting coroutine is
/// resumed by a post to the engine (it runs on a worker), never inside the
/// release op that freed the memory.
///
/// @par Thread safety
/// One owner; await it (or call wait()) once.
class [[nodiscard]] AcquireAwaitable {
 public:
  AcquireAwaitable(const AcquireAwaitable&) = delete;
  AcquireAwaitable& operator=(const AcquireAwaitable&) = delete;

  bool await_ready() const noexcept { return false; }
  /// Takes a buffer if one can be had now (false: go on at once); else queues.
  bool await_suspend(std::coroutine_handle<> h) noexcept;
  Buffer await_resume();
  /// The blocking form: waits, asleep, for the memory. Throws
  /// ordo::Error{Errc::wait_inside_op} if it would wait inside an op (the
  /// release that would wake it may need this very worker).
  Buffer wait();

 private:
  friend class BufferPool;
  AcquireAwaitable(std::shared_ptr<detail::PoolState> s, std::size_t size, std::size_t capacity) noexcept
      : state_(std::move(s)) {
    w_.size = size;
    w_.capacity = capacity;
  }
  std::shared_ptr<detail::PoolState> state_;
  detail::PoolWaiter w_;
};

/// Pooled host memory in size classes (SizeClasses), whose buffers carry an
/// engine variable and return to their bucket only after every op pushed on
/// them has finished (see the header comment). With a limit, acquirers wait
/// (co_await: without blocking a thread) for releases: backpressure for a
/// loader that runs ahead of its consumers.
///
/// The engine must outlive the pool and every Buffer it handed out; the
/// allocator must outlive every block (the pool's state lives until the last
/// Buffer and release op are gone). Destroying the pool frees the cached
/// blocks; buffers still out are freed when their release runs; acquirers
/// still waiting are resumed with ordo::Error{Errc::cancelled}.
///
/// @par Thread safety
/// Every member function may be called from any thread, concurrently
/// (one mutex guards the buckets, the counters and the waiters; allocation
/// and the resumption of waiters happen outside it).
class BufferPool {
 public:
  explicit BufferPool(Engine& engine, BufferPoolOptions options = {});
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  /// A buffer of at least `size` bytes (its block is classes.round(size)).
  /// Throws ordo::Error{Errc::invalid_argument} at once if that block alone
  /// is over the limit (it could never be served) or `size` is absurd
  /// (over SIZE_MAX / 4). A coroutine waiting in it must not be destroyed
  /// before it resumes (the queue refers to its awaitable).
  [[nodiscard]] AcquireAwaitable acquire(std::size_t size);
  /// A buffer now, or an empty one where acquire would wait. Throws the
  /// allocator's failure.
  [[nodiscard]] Buffer try_acquire(std::size_t size);
  /// Frees every cached block (not those in use). Returns the bytes freed.
  std::size_t trim();

  [[nodiscard]] BufferPoolStats stats() const;
  [[nodiscard]] const BufferPoolOptions& options() const noexcept;
  [[nodiscard]] Engine& engine() const noexcept;

 private:
  std::shared_ptr<detail::PoolState> state_;
};

}  // namespace ordo

// src/storage/storage.cpp - BufferPool (ordo/storage.hpp): size classes, buckets,
// the limit and its FIFO of waiters, and the delete_variable-ordered return.
#include "ordo/storage.hpp"

#include <algorithm>
#include <bit>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ordo/detail/coro_runtime.hpp"
#include "ordo/detail/extension.hpp"
#include "ordo/detail/stats_source.hpp"

namespace ordo {

namespace {
constexpr std::size_t kMaxRequestBytes = SIZE_MAX >> 2;  ///< larger requests are refused (rounding would overflow)
}  // namespace

std::size_t SizeClasses::round(std::size_t bytes) const noexcept {
  if (bytes > kMaxRequestBytes) return SIZE_MAX;  // no class: acquire refuses such requests
  const std::size_t pages = (std::max<std::size_t>(bytes, 1) + page - 1) / page * page;
  if (pow2_cutoff != 0 && pages <= pow2_cutoff) return std::bit_ceil(pages);
  return pages;
}

namespace {
void check_request(std::size_t size) {
  if (size > kMaxRequestBytes) {
    throw Error(Errc::invalid_argument, "ordo::BufferPool::acquire(" + std::to_string(size) + "): too large");
  }
}

class SystemAllocator final : public HostAllocator {
 public:
  void* allocate(std::size_t bytes, std::size_t alignment) override {
    void* p = std::aligned_alloc(alignment, bytes);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  void deallocate(void* p, std::size_t) noexcept override { std::free(p); }
};
}  // namespace

std::shared_ptr<HostAllocator> HostAllocator::system() {
  // Stateless: one instance serves every pool (a namespace-scope constant,
  // not a function-local static with state).
  static const std::shared_ptr<HostAllocator> instance = std::make_shared<SystemAllocator>();
  return instance;
}

namespace detail {

/// The pool's state, shared by the pool, its Buffers and their release ops
/// (so that a release running after ~BufferPool is harmless).
struct PoolState : std::enable_shared_from_this<PoolState>, StatsSource {
  PoolState(Engine& e, BufferPoolOptions o) : engine(e), opts(std::move(o)) {
    if (!opts.allocator) opts.allocator = HostAllocator::system();
    if (!std::has_single_bit(opts.classes.page) ||
        (opts.classes.pow2_cutoff != 0 && !std::has_single_bit(opts.classes.pow2_cutoff))) {
      throw Error(Errc::invalid_argument, "ordo::BufferPool: SizeClasses::page and pow2_cutoff must be powers of two");
    }
  }

  PoolState(const PoolState&) = delete;
  PoolState& operator=(const PoolState&) = delete;
  ~PoolState() {
    for (auto& [c, list] : buckets) {
      for (void* p : list) opts.allocator->deallocate(p, c);
    }
  }

  /// Engine::stats(): while the BufferPool lives (registered by it).
  void add_to(EngineStats& out) const noexcept override {
    std::lock_guard lock(m);
    BufferPoolTotals& t = out.buffers;
    ++t.pools;
    t.acquires += st.acquires;
    t.hits += st.hits;
    t.misses += st.misses;
    t.in_use_bytes += st.in_use_bytes;
    t.cached_bytes += st.cached_bytes;
  }

  Engine& engine;
  BufferPoolOptions opts;  ///< immutable after construction

  /// Guards everything below. Allocation, the engine's calls and the
  /// resumption of waiters happen outside it; freeing cached blocks to make
  /// room under the limit happens inside it (rare: a change of sizes).
  mutable std::mutex m;
  /// Notified after a blocked acquirer's `done` was set (under m).
  std::condition_variable granted;
  std::unordered_map<std::size_t, std::vector<void*>> buckets;  ///< cached blocks by size class
  PoolWaiter* head = nullptr;                                   ///< FIFO of acquirers that wait
  PoolWaiter* tail = nullptr;
  BufferPoolStats st;
  bool closed = false;  ///< ~BufferPool ran: returned blocks go to the allocator

  /// A block of `cap` for an acquirer if the limit allows it now: from its
  /// bucket (`block` set), else reserved for the caller to allocate (`block`
  /// null), after freeing cached blocks of other sizes if that makes it
  /// fit. Counts the handout. False: it must wait for a release. m held.
  bool take_locked(std::size_t cap, void*& block) noexcept;
  /// Turns a taken block into a Buffer: allocates a reserved one, makes its
  /// variable. On failure undoes the handout and rethrows. m not held.
  Buffer make(void* block, std::size_t size, std::size_t cap);
  /// A release op's work: the block goes back to its bucket (after
  /// ~BufferPool: to the allocator) and the waiters that now fit are served.
  void give_back(void* p, std::size_t cap) noexcept;
  /// Undoes a handout whose block was never allocated.
  void unreserve(std::size_t cap) noexcept;
  /// Unlinks the waiters at the head that fit now, each with its block taken. m held.
  PoolWaiter* pop_served_locked() noexcept;
  /// Makes the served waiters' buffers and wakes them. m not held.
  void complete(PoolWaiter* list) noexcept;
  void wake(PoolWaiter* w) noexcept;

  void push_waiter_locked(PoolWaiter* w) noexcept {
    w->next = nullptr;
    (tail != nullptr ? tail->next : head) = w;
    tail = w;
    ++st.waits;
  }
  void count_out_locked(std::size_t cap) noexcept {
    st.in_use_bytes += cap;
    st.buffers_in_use += 1;
    st.acquires += 1;
    st.peak_in_use_bytes = std::max(st.peak_in_use_bytes, st.in_use_bytes);
    st.peak_reserved_bytes = std::max(st.peak_reserved_bytes, st.reserved_bytes);
  }
};

bool PoolState::take_locked(std::size_t cap, void*& block) noexcept {
  if (auto it = buckets.find(cap); it != buckets.end() && !it->second.empty()) {
    block = it->second.back();
    it->second.pop_back();
    st.cached_bytes -= cap;
    ++st.hits;
    count_out_locked(cap);
    return true;
  }
  const std::size_t limit = opts.limit_bytes;
  if (limit != 0 && st.reserved_bytes + cap > limit) {
    if (st.reserved_bytes - st.cached_bytes + cap > limit) return false;  // only releases can make room
    // Free cached blocks of other sizes (bucket order) until it fits.
    for (auto& [c, list] : buckets) {
      while (!list.empty() && st.reserved_bytes + cap > limit) {
        opts.allocator->deallocate(list.back(), c);
        list.pop_back();
        st.cached_bytes -= c;
        st.reserved_bytes -= c;
        ++st.trimmed;
      }
      if (st.reserved_bytes + cap <= limit) break;
    }
  }
  block = nullptr;
  st.reserved_bytes += cap;
  ++st.misses;
  count_out_locked(cap);
  return true;
}

void PoolState::unreserve(std::size_t cap) noexcept {
  PoolWaiter* served = nullptr;
  {
    std::lock_guard lock(m);
    st.in_use_bytes -= cap;
    st.reserved_bytes -= cap;
    st.buffers_in_use -= 1;
    st.acquires -= 1;
    st.misses -= 1;
    if (!closed) served = pop_served_locked();
  }
  complete(served);
}

Buffer PoolState::make(void* block, std::size_t size, std::size_t cap) {
  if (block == nullptr) {
    try {
      block = opts.allocator->allocate(cap, opts.classes.page);
    } catch (...) {
      unreserve(cap);
      throw;
    }
  }
  Var v;
  try {
    v = engine.new_variable();
  } catch (...) {
    give_back(block, cap);
    throw;
  }
  return Buffer(shared_from_this(), block, size, cap, v);
}

void PoolState::give_back(void* p, std::size_t cap) noexcept {
  PoolWaiter* served = nullptr;
  bool free_it = false;
  {
    std::lock_guard lock(m);
    st.in_use_bytes -= cap;
    st.buffers_in_use -= 1;
    if (closed) {
      free_it = true;
    } else {
      try {
        buckets[cap].push_back(p);
        st.cached_bytes += cap;
      } catch (...) {  // out of memory growing a bucket: give the block up
        free_it = true;
      }
    }
    if (free_it) st.reserved_bytes -= cap;
    if (!closed) served = pop_served_locked();
  }
  if (free_it) opts.allocator->deallocate(p, cap);
  complete(served);
}

PoolWaiter* PoolState::pop_served_locked() noexcept {
  PoolWaiter* first = nullptr;
  PoolWaiter** last = &first;
  while (head != nullptr && take_locked(head->capacity, head->block)) {
    PoolWaiter* w = head;
    head = w->next;
    if (head == nullptr) tail = nullptr;
    w->next = nullptr;
    *last = w;
    last = &w->next;
  }
  return first;
}

void PoolState::complete(PoolWaiter* list) noexcept {
  while (list != nullptr) {
    PoolWaiter* w = list;
    list = w->next;  // read before the waiter can go away (wake)
    try {
      w->result = make(w->block, w->size, w->capacity);
    } catch (...) {
      w->error = std::current_exception();
    }
    wake(w);
  }
}

void PoolState::wake(PoolWaiter* w) noexcept {
  // After the wake the waiter may be gone at once: read what is needed first.
  const std::coroutine_handle<> h = w->h;
  if (h) {
    // Resumed on a worker, not inside the release op that freed the memory.
    try {
      engine.post([h] { detail::resume(h); }, Context::cpu(), OpAttrs{.name = "BufferPool resume"});
      return;
    } catch (...) {
    }
    detail::resume(h);  // the post failed (out of memory): resume here
    return;
  }
  {
    std::lock_guard lock(m);
    w->done = true;
  }
  granted.notify_all();
}

namespace {
/// The deleter of a buffer's variable: returns the block when it runs, or,
/// if the engine skips the delete, when it is destroyed (a skipped op is
/// destroyed at its turn, after the ops before it).
struct Returner {
  std::shared_ptr<PoolState> state;
  void* p;
  std::size_t cap;
  Returner(std::shared_ptr<PoolState> s, void* block, std::size_t c) noexcept : state(std::move(s)), p(block), cap(c) {}
  Returner(Returner&& o) noexcept : state(std::move(o.state)), p(std::exchange(o.p, nullptr)), cap(o.cap) {}
  Returner(const Returner&) = delete;
  Returner& operator=(const Returner&) = delete;
  Returner& operator=(Returner&&) = delete;
  ~Returner() {
    if (p != nullptr) state->give_back(p, cap);
  }
  void operator()() noexcept { state->give_back(std::exchange(p, nullptr), cap); }
};
}  // namespace

}  // namespace detail

// ---------------------------------------------------------------- Buffer

void Buffer::release() noexcept {
  if (p_ == nullptr) return;
  std::shared_ptr<detail::PoolState> st = std::move(state_);
  void* p = std::exchange(p_, nullptr);
  const std::size_t cap = std::exchange(capacity_, 0);
  size_ = 0;
  const Var v = std::exchange(var_, Var{});
  Engine& engine = st->engine;
  const Context ctx = st->opts.release_ctx;
  try {
    // Whatever happens, the Returner gives the block back exactly once: run
    // by the engine, destroyed with a refused or skipped op, or destroyed
    // here if the call throws before taking it.
    engine.delete_variable(detail::Returner(std::move(st), p, cap), ctx, v);
  } catch (...) {
  }
}

// ---------------------------------------------------------------- AcquireAwaitable

bool AcquireAwaitable::await_suspend(std::coroutine_handle<> h) noexcept {
  detail::PoolState& s = *state_;
  void* block = nullptr;
  {
    std::lock_guard lock(s.m);
    if (s.closed) {
      try {
        throw Error(Errc::cancelled, "ordo::BufferPool::acquire: the pool was destroyed");
      } catch (...) {
        w_.error = std::current_exception();
      }
      return false;
    }
    if (s.head != nullptr || !s.take_locked(w_.capacity, block)) {
      w_.h = h;
      s.push_waiter_locked(&w_);
      return true;  // from the unlock on, a release may resume the coroutine
    }
  }
  try {
    w_.result = s.make(block, w_.size, w_.capacity);
  } catch (...) {
    w_.error = std::current_exception();
  }
  return false;
}

Buffer AcquireAwaitable::await_resume() {
  if (w_.error) std::rethrow_exception(std::exchange(w_.error, nullptr));
  return std::move(w_.result);
}

Buffer AcquireAwaitable::wait() {
  detail::PoolState& s = *state_;
  void* block = nullptr;
  {
    std::unique_lock lock(s.m);
    if (s.closed) throw Error(Errc::cancelled, "ordo::BufferPool::acquire: the pool was destroyed");
    if (s.head != nullptr || !s.take_locked(w_.capacity, block)) {
      if (Engine::inside_op()) {
        throw Error(Errc::wait_inside_op,
                    "ordo::BufferPool::acquire(" + std::to_string(w_.size) +
                        ").wait() inside an op, with the pool at its limit: the release that would end the wait "
                        "may need this worker (co_await the acquire instead)");
      }
      s.push_waiter_locked(&w_);
      s.granted.wait(lock, [&] { return w_.done; });
      lock.unlock();
      return await_resume();
    }
  }
  return s.make(block, w_.size, w_.capacity);
}

// ---------------------------------------------------------------- BufferPool

BufferPool::BufferPool(Engine& engine, BufferPoolOptions options)
    : state_(std::make_shared<detail::PoolState>(engine, std::move(options))) {
  detail::EngineExtension::add_stats_source(engine, state_.get());
}

BufferPool::~BufferPool() {
  detail::PoolState& s = *state_;
  detail::EngineExtension::remove_stats_source(s.engine, &s);
  detail::PoolWaiter* waiters = nullptr;
  {
    std::lock_guard lock(s.m);
    s.closed = true;
    waiters = std::exchange(s.head, nullptr);
    s.tail = nullptr;
  }
  try {
    trim();
  } catch (...) {  // out of memory listing them: ~PoolState frees them
  }
  while (waiters != nullptr) {
    detail::PoolWaiter* w = waiters;
    waiters = w->next;
    try {
      throw Error(Errc::cancelled, "ordo::BufferPool destroyed while an acquire(" + std::to_string(w->size) +
                                       ") was waiting for memory");
    } catch (...) {
      w->error = std::current_exception();
    }
    s.wake(w);
  }
}

AcquireAwaitable BufferPool::acquire(std::size_t size) {
  check_request(size);
  const std::size_t cap = state_->opts.classes.round(size);
  const std::size_t limit = state_->opts.limit_bytes;
  if (limit != 0 && cap > limit) {
    throw Error(Errc::invalid_argument, "ordo::BufferPool::acquire(" + std::to_string(size) + "): its block of " +
                                            std::to_string(cap) + " bytes is over the pool's limit of " +
                                            std::to_string(limit) + " bytes (BufferPoolOptions::limit_bytes)");
  }
  return AcquireAwaitable(state_, size, cap);
}

Buffer BufferPool::try_acquire(std::size_t size) {
  check_request(size);
  detail::PoolState& s = *state_;
  const std::size_t cap = s.opts.classes.round(size);
  void* block = nullptr;
  {
    std::lock_guard lock(s.m);
    if (s.head != nullptr || !s.take_locked(cap, block)) return Buffer{};
  }
  return s.make(block, size, cap);
}

std::size_t BufferPool::trim() {
  detail::PoolState& s = *state_;
  std::vector<std::pair<void*, std::size_t>> blocks;
  {
    std::lock_guard lock(s.m);
    std::size_t n = 0;
    for (const auto& [c, list] : s.buckets) n += list.size();
    blocks.reserve(n);  // may throw: nothing changed yet
    for (auto& [c, list] : s.buckets) {
      for (void* p : list) blocks.emplace_back(p, c);
      list.clear();
    }
    s.st.reserved_bytes -= s.st.cached_bytes;
    s.st.cached_bytes = 0;
    s.st.trimmed += blocks.size();
  }
  std::size_t freed = 0;
  for (const auto& [p, c] : blocks) {
    s.opts.allocator->deallocate(p, c);
    freed += c;
  }
  return freed;
}

BufferPoolStats BufferPool::stats() const {
  std::lock_guard lock(state_->m);
  return state_->st;
}

const BufferPoolOptions& BufferPool::options() const noexcept { return state_->opts; }

Engine& BufferPool::engine() const noexcept { return state_->engine; }

}  // namespace ordo

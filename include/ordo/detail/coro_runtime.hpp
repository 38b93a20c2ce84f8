// ordo/detail/coro_runtime.hpp - what ordo's coroutines run on: a per-thread
// trampoline that resumes coroutines without growing the stack, and a
// recycling allocator for coroutine frames. Internal (see ordo/task.hpp).
#pragma once

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>

namespace ordo::detail {

// ---------------------------------------------------------------------------
// Frame allocator.
//
// Coroutine frames (and the small shared states of engine awaitables) come
// from per-thread free lists, one per 64-byte size class up to 1 KiB, so the
// hot path (a Task per step, a push per op) does not call malloc. Blocks may
// be freed on any thread: they join that thread's list (bounded; the excess
// goes back to ::operator delete). A thread's lists are returned to the
// system when the thread exits. Under AddressSanitizer the cache is off so
// that ASan sees every frame's real lifetime.

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kFrameCacheEnabled = false;
#else
inline constexpr bool kFrameCacheEnabled = true;
#endif
inline constexpr std::size_t kFrameGranule = 64;
inline constexpr std::size_t kFrameClasses = 16;       ///< frames up to 1 KiB are recycled
inline constexpr std::uint32_t kFrameCacheDepth = 256;  ///< cached blocks per class and thread

/// Per-thread counters, for tests and tuning.
struct FrameCacheStats {
  std::uint64_t hits = 0;    ///< allocations served from the free lists
  std::uint64_t misses = 0;  ///< allocations that went to ::operator new
};

/// Trivially destructible on purpose: it stays usable (as "dead", so
/// everything goes straight to the system) after the thread's reaper ran.
struct FrameCache {
  struct Block {
    Block* next;
  };
  Block* head[kFrameClasses] = {};
  std::uint32_t count[kFrameClasses] = {};
  bool registered = false;  ///< the reaper is armed on this thread
  bool dead = false;        ///< the reaper ran: no more caching on this thread
  FrameCacheStats stats{};
};

inline thread_local constinit FrameCache t_frame_cache{};

/// Returns a block of n bytes from ::operator new(n) to the system. Sized
/// where the compiler declares sized deallocation (g++ in C++14 and later;
/// clang only with -fsized-deallocation, off by default in clang 14), else
/// unsized: either frees the same block.
inline void frame_release(void* p, [[maybe_unused]] std::size_t n) noexcept {
#if defined(__cpp_sized_deallocation)
  ::operator delete(p, n);
#else
  ::operator delete(p);
#endif
}

/// Frees the thread's cached blocks when the thread exits.
struct FrameCacheReaper {
  bool armed = false;
  ~FrameCacheReaper() {
    FrameCache& fc = t_frame_cache;
    for (std::size_t c = 0; c < kFrameClasses; ++c) {
      while (FrameCache::Block* b = fc.head[c]) {
        fc.head[c] = b->next;
        frame_release(b, (c + 1) * kFrameGranule);
      }
      fc.count[c] = 0;
    }
    fc.dead = true;
  }
};
inline thread_local FrameCacheReaper t_frame_reaper;

inline bool frame_cache_usable(FrameCache& fc) noexcept {
  if (fc.dead) return false;
  if (!fc.registered) {
    fc.registered = true;
    t_frame_reaper.armed = true;  // first use on this thread: registers the reaper
  }
  return true;
}

inline void* frame_alloc(std::size_t n) {
  if constexpr (!kFrameCacheEnabled) {
    return ::operator new(n);
  } else {
    const std::size_t c = n == 0 ? 0 : (n - 1) / kFrameGranule;
    if (c >= kFrameClasses) return ::operator new(n);
    FrameCache& fc = t_frame_cache;
    if (FrameCache::Block* b = fc.head[c]; b != nullptr) {
      fc.head[c] = b->next;
      --fc.count[c];
      ++fc.stats.hits;
      return b;
    }
    ++fc.stats.misses;
    return ::operator new((c + 1) * kFrameGranule);
  }
}

inline void frame_free(void* p, std::size_t n) noexcept {
  if constexpr (!kFrameCacheEnabled) {
    frame_release(p, n);
  } else {
    const std::size_t c = n == 0 ? 0 : (n - 1) / kFrameGranule;
    if (c >= kFrameClasses) {
      frame_release(p, n);
      return;
    }
    FrameCache& fc = t_frame_cache;
    if (fc.count[c] >= kFrameCacheDepth || !frame_cache_usable(fc)) {
      frame_release(p, (c + 1) * kFrameGranule);
      return;
    }
    auto* b = static_cast<FrameCache::Block*>(p);
    b->next = fc.head[c];
    fc.head[c] = b;
    ++fc.count[c];
  }
}

/// The calling thread's allocator counters.
inline FrameCacheStats frame_cache_stats() noexcept { return t_frame_cache.stats; }

/// Base for promise types whose frames use the recycling allocator.
struct FrameAllocated {
  static void* operator new(std::size_t n) { return frame_alloc(n); }
  static void operator delete(void* p, std::size_t n) noexcept { frame_free(p, n); }
};

// ---------------------------------------------------------------------------
// Trampoline.
//
// Every resumption of an ordo coroutine goes through resume() or transfer().
// The first one on a thread starts a loop (run_loop); while it runs, further
// resumptions on that thread are queued (FIFO) and run by the loop instead of
// nesting. transfer() (used by await_suspend for symmetric transfer) hands
// the next coroutine back to the compiler for a direct resume up to a budget
// of kTransferBudget in a row, then queues it: the stack unwinds to the loop,
// so a chain of any length runs in bounded stack even where the compiler does
// not turn symmetric transfer into a tail call (g++ at -O0, sanitizers).

inline constexpr int kTransferBudget = 16;

struct Trampoline {
  static constexpr std::size_t kInline = 16;
  std::coroutine_handle<>* buf = nullptr;  ///< null: `inline_buf`
  std::size_t cap = kInline;               ///< a power of two
  std::size_t head = 0;
  std::size_t size = 0;
  bool active = false;
  int budget = 0;
  std::coroutine_handle<> inline_buf[kInline] = {};

  std::coroutine_handle<>* data() noexcept { return buf != nullptr ? buf : inline_buf; }

  void push(std::coroutine_handle<> h) {
    if (size == cap) grow();
    data()[(head + size) & (cap - 1)] = h;
    ++size;
  }
  std::coroutine_handle<> pop() noexcept {
    std::coroutine_handle<> h = data()[head];
    head = (head + 1) & (cap - 1);
    --size;
    return h;
  }
  void grow() {
    auto* bigger = new std::coroutine_handle<>[cap * 2];
    for (std::size_t i = 0; i < size; ++i) bigger[i] = data()[(head + i) & (cap - 1)];
    delete[] buf;
    buf = bigger;
    cap *= 2;
    head = 0;
  }
  /// Back to the inline buffer (the queue is empty): nothing is held between loops.
  void shrink() noexcept {
    delete[] buf;
    buf = nullptr;
    cap = kInline;
    head = 0;
  }
};

inline thread_local constinit Trampoline t_trampoline{};

/// True while the calling thread runs ordo coroutines (inside a loop).
inline bool in_coroutine_loop() noexcept { return t_trampoline.active; }

/// Runs `h` and everything it queues on this thread until the queue is empty.
[[gnu::noinline]] inline void run_loop(std::coroutine_handle<> h) {
  Trampoline& t = t_trampoline;
  t.active = true;
  t.budget = kTransferBudget;
  std::exception_ptr thrown;  // only a foreign coroutine type can throw out of resume()
  auto step = [&](std::coroutine_handle<> x) {
    try {
      x.resume();
    } catch (...) {
      if (!thrown) thrown = std::current_exception();
    }
  };
  step(h);
  while (t.size != 0) {
    t.budget = kTransferBudget;
    step(t.pop());
  }
  if (t.buf != nullptr) t.shrink();
  t.active = false;
  if (thrown) std::rethrow_exception(thrown);
}

/// Resumes `h` on this thread: now if no loop runs here, else queued for the loop.
inline void resume(std::coroutine_handle<> h) {
  Trampoline& t = t_trampoline;
  if (t.active) {
    t.push(h);
  } else {
    run_loop(h);
  }
}

/// For await_suspend: the coroutine to run next (symmetric transfer), or the
/// noop coroutine when `h` was queued or already ran.
inline std::coroutine_handle<> transfer(std::coroutine_handle<> h) noexcept {
  Trampoline& t = t_trampoline;
  if (!t.active) {
    run_loop(h);  // resumed from outside any loop: this becomes the loop
    return std::noop_coroutine();
  }
  if (t.budget > 0) {
    --t.budget;
    return h;
  }
  t.push(h);
  return std::noop_coroutine();
}

}  // namespace ordo::detail

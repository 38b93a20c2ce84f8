// src/spin_lock.hpp - a test-and-test-and-set lock for very short critical
// sections (a variable's queue). Yields after a short spin so an
// oversubscribed machine (more threads than cores) does not burn a core on a
// preempted holder.
#pragma once

#include <atomic>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace ordo::detail {

/// Asks for the cache line at `p` in a writable state without waiting for it.
/// Issued for every variable of an op before the first of their locks is
/// taken: their lines, last written by another core, then arrive together
/// rather than one locked exchange after another (each miss ~100 ns on the
/// W6 workload's 2-core machine), and arrive exclusive, not shared and then
/// upgraded by the exchange. A hint only: no effect on correctness.
inline void prefetch_for_write(const void* p) noexcept {
#if defined(__x86_64__) || defined(__i386__)
  // PREFETCHW (a NOP on x86 processors without it); GCC emits it for
  // __builtin_prefetch only with -mprfchw.
  asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p, 1, 3);
#endif
}

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

class SpinLock {
 public:
  void lock() noexcept {
    // acquire pairs with the release in unlock(): the holder's writes to the
    // guarded fields are visible to the next holder.
    while (locked_.exchange(true, std::memory_order_acquire)) {
      int spins = 0;
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins < 64) {
          cpu_relax();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) &&
           !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};  ///< true while held
};

}  // namespace ordo::detail

// src/core/spin_lock.hpp - a test-and-test-and-set lock for very short critical
// sections (a variable's queue). Yields after a short spin so an
// oversubscribed machine (more threads than cores) does not burn a core on a
// preempted holder.
#pragma once

#include <atomic>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace ordo::detail {

#if defined(__x86_64__) || defined(__i386__)
/// Whether the processor has PREFETCHW (CPUID PRFCHW: Intel since Broadwell,
/// AMD always); read once at start-up. The Linux kernel, too, patches it in
/// only where the flag is set. Asked of CPUID itself (leaf 0x80000001, ECX
/// bit 8): clang 14's __builtin_cpu_supports does not know "prfchw".
inline const bool kHasPrefetchW = [] {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0x80000001U, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ecx & (1U << 8)) != 0;
}();
#endif

/// Asks for the cache line at `p` in a writable state without waiting for it.
/// Used on records that another core wrote last and this one is about to
/// write (a variable's, before its lock; an op record, before a push fills
/// it): the misses then overlap instead of coming one locked exchange after
/// another, and the line arrives exclusive, not shared and then upgraded. A
/// hint only: no effect on correctness.
inline void prefetch_for_write(const void* p) noexcept {
#if defined(__x86_64__) || defined(__i386__)
  // GCC emits PREFETCHW for __builtin_prefetch only with -mprfchw.
  if (kHasPrefetchW) [[likely]] {
    asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
  } else {
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
  }
#else
  __builtin_prefetch(p, 1, 3);
#endif
}

/// Pauses a spinning thread makes before it yields instead (SpinLock, a
/// worker spinning for an op): past a few hundred ns the thread it waits
/// for is more likely preempted than busy, and on an oversubscribed machine
/// the yield gives it the core.
inline constexpr int kPauseSpins = 32;

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
        if (++spins < kPauseSpins) {
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

// src/core/recycler.hpp - thread-caching recycling allocator for fixed-size records.
//
// Each thread keeps a free list; lists move between threads in batches of
// kBatch through one mutex-protected stack, so a thread that allocates and
// another that frees pay one lock per kBatch records. Slabs are never returned
// to the OS (a stale OnComplete may still read a record's generation), so the
// memory held is the high-water mark of records in use.
//
// T needs a `T* next` member, free for the recycler's use while T is free.
#pragma once

#include "spin_lock.hpp"

#include <algorithm>
#include <cstddef>
#include <mutex>
#include <vector>

namespace ordo::detail {

template <class T>
class Recycler {
 public:
  static T* alloc() {
    Cache* cache = t_cache;
    if (cache == nullptr || cache->head == nullptr) [[unlikely]] return alloc_slow();
    return cache->pop();
  }

  static void free(T* p) noexcept {
    Cache* cache = t_cache;
    if (cache == nullptr || cache->count + 1 >= kBatch) [[unlikely]] {
      free_slow(p);
      return;
    }
    p->next = cache->head;
    cache->head = p;
    ++cache->count;
  }

 private:
  // The slow paths stay out of line: inlined, their registers would be
  // saved and restored on every alloc and free.
  [[gnu::noinline]] static T* alloc_slow() {
    Cache* cache = t_cache != nullptr ? t_cache : make_cache();
    if (cache == nullptr) {  // during thread exit: a record of its own
      Cache temp;
      temp.refill();
      return temp.pop();  // temp's destructor hands the rest back
    }
    if (cache->head == nullptr) cache->unseal_or_refill();
    return cache->pop();
  }

  [[gnu::noinline]] static void free_slow(T* p) noexcept {
    Cache* cache = t_cache != nullptr ? t_cache : make_cache();
    if (cache == nullptr) {  // during thread exit: straight to the shared stack
      p->next = nullptr;
      Global& g = global();
      std::lock_guard lock(g.mutex);
      g.chains.push_back({p, 1});
      return;
    }
    p->next = cache->head;
    cache->head = p;
    if (++cache->count >= kBatch) cache->seal();
  }

  static constexpr std::size_t kBatch = 128;

  struct Chain {
    T* head;
    std::size_t count;
  };

  struct Global {
    std::mutex mutex;
    /// Null-terminated chains of free records, each with its length (a
    /// refill would otherwise walk one, a dependent cache miss per record:
    /// the records were freed on other threads).
    std::vector<Chain> chains;
    std::vector<T*> slabs;  ///< every slab ever made, never freed (kept reachable)
  };

  static Global& global() {
    // Deliberately leaked: records outlive every thread and every engine.
    static Global* g = new Global;
    return *g;
  }

  /// A thread's free records: the list it pops from and pushes to (fewer
  /// than kBatch records), and at most one full chain of kBatch set aside,
  /// so that a batch moves to or from the shared stack without a walk to
  /// its end (a dependent load per record).
  struct Cache {
    T* head = nullptr;
    std::size_t count = 0;
    T* sealed = nullptr;  ///< a chain of kBatch records set aside, or null

    Cache() = default;
    Cache(const Cache&) = delete;
    Cache& operator=(const Cache&) = delete;
    ~Cache() {
      // Thread exit: hand what is left to the other threads.
      if (head == nullptr && sealed == nullptr) return;
      Global& g = global();
      std::lock_guard lock(g.mutex);
      if (head != nullptr) g.chains.push_back({head, count});
      if (sealed != nullptr) g.chains.push_back({sealed, kBatch});
    }

    T* pop() noexcept {
      T* p = head;
      head = p->next;
      --count;
      p->next = nullptr;
      // The next record was most likely freed on another thread (an op
      // pushed here completes on a worker): ask for its first lines now, so
      // that they arrive before the next alloc writes them, not during it.
      if (head != nullptr) {
        constexpr std::size_t kLines = (std::min<std::size_t>(sizeof(T), 256) + 63) / 64;
        const char* c = reinterpret_cast<const char*>(head);
        for (std::size_t i = 0; i < kLines; ++i) prefetch_for_write(c + 64 * i);
      }
      return p;
    }

    /// The list has reached kBatch: set it aside whole; one set aside
    /// already goes to the shared stack.
    /// (No chain is longer than kBatch, so the list is exactly kBatch here.)
    void seal() {
      T* give = sealed;
      sealed = head;
      head = nullptr;
      count = 0;
      if (give == nullptr) return;
      Global& g = global();
      std::lock_guard lock(g.mutex);
      g.chains.push_back({give, kBatch});
    }

    /// The list is empty: take the chain set aside, or one from the shared stack.
    void unseal_or_refill() {
      if (sealed != nullptr) {
        head = sealed;
        count = kBatch;
        sealed = nullptr;
        return;
      }
      refill();
    }

    void refill() {
      Global& g = global();
      std::lock_guard lock(g.mutex);
      if (!g.chains.empty()) {
        head = g.chains.back().head;
        count = g.chains.back().count;
        g.chains.pop_back();
        return;
      }
      g.slabs.reserve(g.slabs.size() + 1);
      T* slab = new T[kBatch]();
      for (std::size_t i = 0; i + 1 < kBatch; ++i) slab[i].next = &slab[i + 1];
      slab[kBatch - 1].next = nullptr;
      head = slab;
      count = kBatch;
      g.slabs.push_back(slab);
    }
  };

  // The cache has a destructor, so touching it directly costs a TLS init
  // check on every access; the hot path goes through a trivial pointer.
  struct Holder {
    Cache cache;
    ~Holder() {
      t_cache = nullptr;
      t_gone = true;
    }
  };

  static Cache* make_cache() {
    if (t_gone) return nullptr;
    static thread_local Holder holder;
    t_cache = &holder.cache;
    return t_cache;
  }

  static inline thread_local Cache* t_cache = nullptr;  ///< this thread's cache once created
  static inline thread_local bool t_gone = false;       ///< set at thread exit
};

}  // namespace ordo::detail

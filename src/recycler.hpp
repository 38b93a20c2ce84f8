// src/recycler.hpp - thread-caching recycling allocator for fixed-size records.
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
    Cache* cache = t_cache != nullptr ? t_cache : make_cache();
    if (cache == nullptr) {  // during thread exit: a record of its own
      Cache temp;
      temp.refill();
      return temp.pop();  // temp's destructor hands the rest back
    }
    if (cache->head == nullptr) cache->refill();
    return cache->pop();
  }

  static void free(T* p) noexcept {
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
    if (++cache->count >= 2 * kBatch) cache->give_batch();
  }

 private:
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

  struct Cache {
    T* head = nullptr;
    std::size_t count = 0;

    Cache() = default;
    Cache(const Cache&) = delete;
    Cache& operator=(const Cache&) = delete;
    ~Cache() {
      // Thread exit: hand what is left to the other threads as one chain.
      if (head == nullptr) return;
      Global& g = global();
      std::lock_guard lock(g.mutex);
      g.chains.push_back({head, count});
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

    void give_batch() {
      T* chain = head;
      T* last = head;
      for (std::size_t i = 1; i < kBatch; ++i) last = last->next;
      head = last->next;
      last->next = nullptr;
      count -= kBatch;
      Global& g = global();
      std::lock_guard lock(g.mutex);
      g.chains.push_back({chain, kBatch});
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

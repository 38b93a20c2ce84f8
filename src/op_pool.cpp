// src/op_pool.cpp - recycling allocator for op records.
//
// Each thread keeps a free list; lists move between threads in batches of
// kBatch through one mutex-protected stack, so a pusher that allocates and a
// worker that frees pay one lock per kBatch ops. Slabs are never returned to
// the OS: a stale OnComplete may still read a record's generation.
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "ordo/detail/op_record.hpp"

namespace ordo::detail {
namespace {

constexpr std::size_t kBatch = 128;

struct Global {
  std::mutex mutex;
  std::vector<OpRecord*> batches;                  ///< null-terminated chains of free records
  std::vector<std::unique_ptr<OpRecord[]>> slabs;  ///< every record ever made (keeps them reachable)
};

Global& global() {
  // Deliberately leaked: records outlive every thread and every engine.
  static Global* g = new Global;
  return *g;
}

struct Cache {
  OpRecord* head = nullptr;
  std::size_t count = 0;

  Cache() = default;
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;
  ~Cache() {
    // Thread exit: hand whatever is left to the other threads as one chain
    // (refill() accepts chains of any length).
    if (head == nullptr) return;
    Global& g = global();
    std::lock_guard lock(g.mutex);
    g.batches.push_back(head);
    head = nullptr;
    count = 0;
  }

  void give_batch() {
    OpRecord* chain = head;
    OpRecord* last = head;
    for (std::size_t i = 1; i < kBatch; ++i) last = last->next;
    head = last->next;
    last->next = nullptr;
    count -= kBatch;
    Global& g = global();
    std::lock_guard lock(g.mutex);
    g.batches.push_back(chain);
  }

  void refill() {
    Global& g = global();
    std::lock_guard lock(g.mutex);
    if (!g.batches.empty()) {
      head = g.batches.back();
      g.batches.pop_back();
      count = 0;
      for (OpRecord* p = head; p != nullptr; p = p->next) ++count;
      return;
    }
    auto slab = std::make_unique<OpRecord[]>(kBatch);
    for (std::size_t i = 0; i + 1 < kBatch; ++i) slab[i].next = &slab[i + 1];
    slab[kBatch - 1].next = nullptr;
    head = &slab[0];
    count = kBatch;
    g.slabs.push_back(std::move(slab));
  }
};

// The cache object has a destructor, so touching it directly costs a TLS
// init check on every access; the hot path goes through a trivial pointer.
struct CacheHolder {
  Cache cache;
  ~CacheHolder();
};
thread_local Cache* t_cache = nullptr;  ///< this thread's cache once created
thread_local bool t_cache_gone = false;  ///< set at thread exit: records go straight to the global list

CacheHolder::~CacheHolder() {
  t_cache = nullptr;
  t_cache_gone = true;
}

Cache* make_cache() {
  if (t_cache_gone) return nullptr;
  static thread_local CacheHolder holder;
  t_cache = &holder.cache;
  return t_cache;
}

}  // namespace

OpRecord* op_alloc() {
  Cache* cache = t_cache != nullptr ? t_cache : make_cache();
  if (cache == nullptr) {  // thread exit: a record of its own, kept forever like the rest
    Cache temp;
    temp.refill();
    OpRecord* op = temp.head;
    temp.head = op->next;
    op->next = nullptr;
    return op;  // temp's destructor hands the rest back
  }
  Cache& c = *cache;
  if (c.head == nullptr) c.refill();
  OpRecord* op = c.head;
  c.head = op->next;
  --c.count;
  op->next = nullptr;
  return op;
}

void op_free(OpRecord* op) noexcept {
  if (op->access != op->inline_access) {
    delete[] op->access;
    op->access = op->inline_access;
  }
  op->engine = nullptr;
  op->oper = nullptr;
  op->aux = nullptr;
  op->name = nullptr;
  Cache* cache = t_cache != nullptr ? t_cache : make_cache();
  if (cache == nullptr) {  // thread exit: straight to the global list
    op->next = nullptr;
    Global& g = global();
    std::lock_guard lock(g.mutex);
    g.batches.push_back(op);
    return;
  }
  Cache& c = *cache;
  op->next = c.head;
  c.head = op;
  if (++c.count >= 2 * kBatch) c.give_batch();
}

}  // namespace ordo::detail

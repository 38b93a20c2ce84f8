// src/core/ready_queue.hpp - a short locked queue of ready ops: a worker's deque
// (FIFO; its owner and thieves take from the front) or a priority pool's
// shared heap. Internal.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <vector>

#include "ordo/detail/op_record.hpp"
#include "spin_lock.hpp"

namespace ordo::detail {

/// @par Thread safety
/// push(), push_list() and pop() from any thread. `size` may be read
/// without the lock: relaxed as a hint, seq_cst as the pool's wake-up
/// handshake requires (WorkerPool::notify).
class alignas(64) ReadyQueue {
 public:
  enum class Order : std::uint8_t { fifo, priority };

  ReadyQueue() { ring_.resize(kInitialSlots); }
  /// Makes this a priority queue; before any use.
  void use_priority_order() {
    order_ = Order::priority;
    ring_ = {};
  }

  /// Queues `op`.
  void push(OpRecord* op) {
    lock_.lock();
    put(op);
    publish(1);
    lock_.unlock();
  }
  /// Queues the ops linked from `head` through OpRecord::next, in order.
  void push_list(OpRecord* head) {
    lock_.lock();
    std::uint32_t n = 0;
    for (OpRecord* op = head; op != nullptr; ++n) {
      OpRecord* next = op->next;  // read first: `op` may be taken once the lock is released
      put(op);
      op = next;
    }
    publish(n);
    lock_.unlock();
  }
  /// The first op (fifo) or the one of highest priority, earliest queued
  /// first among equals; null if none is queued.
  OpRecord* pop() noexcept {
    if (size.load(std::memory_order_relaxed) == 0) return nullptr;  // a hint: the callers look again
    lock_.lock();
    OpRecord* op = nullptr;
    const std::uint32_t n = size.load(std::memory_order_relaxed);
    if (n != 0) {
      if (order_ == Order::fifo) {
        op = ring_[head_];
        head_ = (head_ + 1) & (ring_.size() - 1);
      } else {
        std::pop_heap(heap_.begin(), heap_.end(), &ReadyQueue::below);
        op = heap_.back();
        heap_.pop_back();
      }
      // Only the lock's holder writes size: a store, no locked add (a pop
      // needs no handshake: see publish()).
      size.store(n - 1, std::memory_order_relaxed);
    }
    lock_.unlock();
    if (op != nullptr) op->next = nullptr;
    return op;
  }

  /// Ops queued; written under the lock.
  std::atomic<std::uint32_t> size{0};

 private:
  /// A ring's first slots (a power of two); it doubles when full, never shrinks.
  static constexpr std::size_t kInitialSlots = 256;

  static bool below(const OpRecord* a, const OpRecord* b) noexcept {
    // Heap order: a below b when of lower priority, or of equal priority
    // and queued later (so equal priorities pop in FIFO order).
    if (a->priority != b->priority) return a->priority < b->priority;
    return a->seq > b->seq;
  }
  void put(OpRecord* op) {
    if (order_ == Order::fifo) {
      const std::uint32_t n = size.load(std::memory_order_relaxed) + pending_;
      if (n == ring_.size()) [[unlikely]] grow();
      ring_[(head_ + n) & (ring_.size() - 1)] = op;
    } else {
      op->seq = seq_++;
      heap_.push_back(op);
      std::push_heap(heap_.begin(), heap_.end(), &ReadyQueue::below);
    }
    ++pending_;
  }
  /// Makes the `n` ops put since the lock was taken count. A read-modify-
  /// write, not a store: the pool's wake-up handshake (WorkerPool::notify)
  /// orders it before the pusher's look at the sleeping and spinning
  /// counts, against a worker's look at `size` after it counted itself.
  void publish(std::uint32_t n) noexcept {
    pending_ = 0;
    size.fetch_add(n, std::memory_order_seq_cst);
  }
  void grow() {
    // Rare: only past the most ops ever queued here at once. The op being
    // queued is counted in flight already, so out of memory here ends the
    // process with a message: a lost op would hang its waiters.
    std::vector<OpRecord*> bigger;
    try {
      bigger.resize(ring_.size() * 2);
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "ordo: out of memory growing a ready queue to %zu ops\n", ring_.size() * 2);
      std::abort();
    }
    const std::size_t mask = ring_.size() - 1;
    const std::uint32_t n = size.load(std::memory_order_relaxed) + pending_;
    for (std::uint32_t i = 0; i < n; ++i) bigger[i] = ring_[(head_ + i) & mask];
    ring_.swap(bigger);
    head_ = 0;
  }

  Order order_ = Order::fifo;
  SpinLock lock_;
  std::uint32_t pending_ = 0;        ///< ops put by the holder, not yet in size (guarded by lock_)
  std::size_t head_ = 0;             ///< fifo: index of the first op (guarded by lock_)
  std::vector<OpRecord*> ring_;      ///< fifo: size ops from head_ (guarded by lock_)
  std::vector<OpRecord*> heap_;      ///< priority (guarded by lock_)
  std::uint64_t seq_ = 0;            ///< priority: FIFO tie-break (guarded by lock_)
};

}  // namespace ordo::detail

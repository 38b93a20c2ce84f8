// src/worker_pool.cpp
#include "worker_pool.hpp"

#include <algorithm>
#include <utility>

#include "engine_core.hpp"

namespace ordo::detail {

constinit thread_local ThreadState t_state;

namespace {
// Spin briefly before sleeping: long enough to catch the next op of a busy
// pusher, short enough not to steal a core from it on an oversubscribed machine.
constexpr int kSpinRounds = 256;
constexpr int kPauseRounds = 32;
// Most ops a worker takes from the queue at once.
constexpr std::int64_t kMaxBatch = 16;
}  // namespace

WorkerPool::WorkerPool(EngineCore& core, std::string name, unsigned threads, Order order)
    : core_(core), name_(std::move(name)), order_(order) {
  threads_.reserve(threads);
  for (unsigned i = 0; i < threads; ++i) {
    threads_.emplace_back([this, i] { worker_main(static_cast<int>(i)); });
  }
}

WorkerPool::~WorkerPool() { stop_and_join(); }

bool WorkerPool::before(const OpRecord* a, const OpRecord* b) noexcept {
  // Heap order: "a below b" when a has lower priority, or equal priority and
  // was queued later (so equal priorities pop in FIFO order).
  if (a->priority != b->priority) return a->priority < b->priority;
  return a->seq > b->seq;
}

void WorkerPool::enqueue(OpRecord* op) {
  lock_.lock();
  if (order_ == Order::fifo) {
    op->next = nullptr;
    if (tail_ != nullptr) {
      tail_->next = op;
    } else {
      head_ = op;
    }
    tail_ = op;
  } else {
    op->seq = seq_++;
    heap_.push_back(op);
    std::push_heap(heap_.begin(), heap_.end(), &WorkerPool::before);
  }
  size_.fetch_add(1, std::memory_order_relaxed);
  // Read the worker counts inside the critical section. A worker changes them
  // (seq_cst) before its last try_pop(), which takes this lock: if that
  // try_pop runs after this section it finds the op; if before, its change
  // happened before this section and is seen here. So a spinning worker will
  // find the op, and only when none spins is a sleeper woken: a busy pusher
  // makes no syscall per op, and no fence is needed.
  const bool wake = spinning_.load(std::memory_order_relaxed) == 0 && sleepers_.load(std::memory_order_relaxed) > 0;
  lock_.unlock();
  if (wake) wake_one();
}

void WorkerPool::wake_one() {
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  epoch_.notify_one();
}

OpRecord* WorkerPool::try_pop() {
  ThreadState& ts = t_state;
  lock_.lock();
  OpRecord* op = nullptr;
  if (order_ == Order::fifo) {
    op = head_;
    if (op != nullptr) {
      // Take a share of the queue at once (at most kMaxBatch): one lock and
      // one cache-line transfer of the queue head for several ops. The extra
      // ops go to this worker's local list, in queue order.
      const std::int64_t queued = size_.load(std::memory_order_relaxed);
      std::int64_t take = std::min<std::int64_t>(kMaxBatch, queued / static_cast<std::int64_t>(threads_.size()));
      if (take < 1) take = 1;
      OpRecord* last = op;
      for (std::int64_t i = 1; i < take && last->next != nullptr; ++i) last = last->next;
      head_ = last->next;
      if (head_ == nullptr) tail_ = nullptr;
      last->next = nullptr;
      std::int64_t n = 1;
      for (OpRecord* p = op->next; p != nullptr; p = p->next) ++n;
      size_.fetch_sub(n, std::memory_order_relaxed);
      if (op->next != nullptr && ts.pool == this) {
        if (ts.inline_tail != nullptr) {
          ts.inline_tail->next = op->next;
        } else {
          ts.inline_head = op->next;
        }
        ts.inline_tail = last;
        op->next = nullptr;
      }
    }
  } else if (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), &WorkerPool::before);
    op = heap_.back();
    heap_.pop_back();
    size_.fetch_sub(1, std::memory_order_relaxed);
  }
  lock_.unlock();
  return op;
}

void WorkerPool::worker_main(int index) {
  ThreadState& ts = t_state;
  ts.engine = &core_;
  ts.pool = this;
  ts.index = index;
  ts.depth = 1;  // ops made ready inline by this worker are queued locally, run below
  for (;;) {
    OpRecord* op = nullptr;
    if (ts.inline_head != nullptr) {
      op = ts.inline_head;
      ts.inline_head = op->next;
      if (ts.inline_head == nullptr) ts.inline_tail = nullptr;
    } else {
      op = try_pop();
      ts.continuations = 0;
      if (op == nullptr) {
        core_.flush_finished();  // out of work: publish the completions counted locally
        op = spin();
      }
      if (op == nullptr) {
        const std::uint32_t epoch = epoch_.load(std::memory_order_seq_cst);
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        op = try_pop();
        if (op == nullptr) {
          if (stop_.load(std::memory_order_acquire)) {
            sleepers_.fetch_sub(1, std::memory_order_relaxed);
            break;
          }
          core_.worker_idle();
          epoch_.wait(epoch, std::memory_order_seq_cst);
        }
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
        if (op == nullptr) continue;
      }
    }
    core_.execute(op);
  }
  ts = ThreadState{};
}

OpRecord* WorkerPool::spin() {
  spinning_.fetch_add(1, std::memory_order_seq_cst);
  OpRecord* op = nullptr;
  for (int i = 0; op == nullptr && i < kSpinRounds; ++i) {
    // Pause briefly, then yield: with more runnable threads than cores (a
    // pusher beside one worker per core) the pusher may be waiting for this
    // core, and it is the one that makes work.
    if (i < kPauseRounds) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
    if (size_.load(std::memory_order_relaxed) > 0) op = try_pop();
  }
  spinning_.fetch_sub(1, std::memory_order_seq_cst);
  // Found work and more is queued while nobody else looks: bring a sleeper in.
  if (op != nullptr && size_.load(std::memory_order_relaxed) > 0 &&
      spinning_.load(std::memory_order_seq_cst) == 0 && sleepers_.load(std::memory_order_seq_cst) > 0) {
    wake_one();
  }
  return op;
}

void WorkerPool::stop_and_join() {
  if (!stop_.exchange(true, std::memory_order_acq_rel)) {
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    epoch_.notify_all();
  }
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

}  // namespace ordo::detail

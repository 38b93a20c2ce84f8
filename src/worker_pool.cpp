// src/worker_pool.cpp
#include "worker_pool.hpp"

#include <sched.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <new>
#include <utility>

#include "engine_core.hpp"

namespace ordo::detail {

constinit thread_local ThreadState t_state;

namespace {
// Spin briefly before sleeping: long enough to catch the next op of a busy
// pusher, short enough not to steal a core from it on an oversubscribed machine.
constexpr int kSpinRounds = 256;
// Most ops a worker takes from the queue at once.
constexpr std::int64_t kMaxBatch = 16;
// Slots of a fifo queue's ring at first (a power of two): the default
// in-flight bound's worth of ready ops fits without growing.
constexpr std::size_t kFifoInitial = 4096;
static_assert((kFifoInitial & (kFifoInitial - 1)) == 0, "the ring's index is masked: a power of two");
}  // namespace

/// A worker that ran the idle task keeps the ops that made ready to itself
/// for as long as run() allowed, rather than waking a sleeper for them (the
/// why, and when, is the task's: io/keep_policy.hpp). Past that time, at
/// the next op boundary, what is still queued goes to a sleeper.
struct WorkerPool::Keep {
  std::int64_t since = 0;   ///< when it started (0: not keeping)
  std::int64_t for_ns = 0;  ///< how long it may last
  std::int64_t ops = 0;     ///< ops run since
  IdleTask* task = nullptr;  ///< the task that allowed it (told how it went)
};

void WorkerPool::end_keep(Keep& keep, std::int64_t now) noexcept {
  if (keep.ops > 0) {
    // Counted as a caller: detach_task() waits for the call. A task
    // detached meanwhile is not told (one at the same address would be: a hint).
    task_callers_.fetch_add(1, std::memory_order_seq_cst);
    if (task_.load(std::memory_order_seq_cst) == keep.task) keep.task->kept(keep.ops, now - keep.since);
    task_callers_.fetch_sub(1, std::memory_order_seq_cst);
  }
  keep = Keep{};
}

WorkerPool::WorkerPool(EngineCore& core, std::string name, unsigned threads, Order order)
    : core_(core), name_(std::move(name)), order_(order), n_threads_(static_cast<int>(threads)) {
  // The queue's hot fields, from lock_ (line-aligned) to spinning_, fit one
  // cache line (worker_pool.hpp). offsetof on this class (it holds a
  // reference, so it is not standard-layout) is supported by GCC and Clang.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
  static_assert(offsetof(WorkerPool, spinning_) + sizeof(spinning_) - offsetof(WorkerPool, lock_) <= 64,
                "the queue's hot fields fit one cache line (worker_pool.hpp)");
#pragma GCC diagnostic pop
  if (order_ == Order::fifo) fifo_.resize(kFifoInitial);
  threads_.reserve(threads);
  // Pools of several workers spread them over the CPUs as they start
  // (spread_start); single-thread pools (GPU slots, the naive helper) need not.
  const int creator_cpu = threads >= 2 ? ::sched_getcpu() : -1;
  for (unsigned i = 0; i < threads; ++i) {
    threads_.emplace_back([this, i, creator_cpu] {
      if (creator_cpu >= 0) spread_start(creator_cpu, i);
      worker_main(static_cast<int>(i));
    });
  }
}

WorkerPool::~WorkerPool() { stop_and_join(); }

void WorkerPool::spread_start(int creator_cpu, unsigned index) noexcept {
  // A new thread starts on the idlest CPU, the same one for every worker of
  // a pool, so the first pushes wake them all there while the CPU that the
  // creator frees stays idle: the kernel does not at once pull work to a CPU
  // that was busy until just then, nor move a thread that ran recently.
  // Worker i therefore moves to the i-th CPU after its creator's, among those
  // it may use, and at once gets its whole mask back: it is not pinned, it
  // only last ran (and so is woken first) on a CPU of its own. Best effort:
  // where the calls fail (a seccomp filter, a mask changed meanwhile) the
  // worker runs where it started. Figures: docs/benchmarks.md, "Where ordo
  // is behind" (the entry for ce0bd7d).
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (::sched_getaffinity(0, sizeof mask, &mask) != 0) return;
  const int n = CPU_COUNT(&mask);
  if (n < 2) return;
  int pos = 0;  // the creator's place among the CPUs of the mask (0 if not among them)
  for (int c = 0, k = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &mask)) continue;
    if (c == creator_cpu) pos = k;
    ++k;
  }
  int want = (pos + 1 + static_cast<int>(index % static_cast<unsigned>(n))) % n;
  int cpu = -1;
  for (int c = 0; c < CPU_SETSIZE && cpu < 0; ++c) {
    if (CPU_ISSET(c, &mask) && want-- == 0) cpu = c;
  }
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (::sched_setaffinity(0, sizeof one, &one) != 0) return;
  if (::sched_setaffinity(0, sizeof mask, &mask) != 0) {
    // Never leave a worker pinned: a mask that cannot be restored (changed
    // from outside meanwhile) is widened to every CPU, which the kernel
    // narrows to what the thread's cpuset allows.
    cpu_set_t all;
    CPU_ZERO(&all);
    for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &all);
    (void)::sched_setaffinity(0, sizeof all, &all);
  }
}

bool WorkerPool::before(const OpRecord* a, const OpRecord* b) noexcept {
  // Heap order: "a below b" when a has lower priority, or equal priority and
  // was queued later (so equal priorities pop in FIFO order).
  if (a->priority != b->priority) return a->priority < b->priority;
  return a->seq > b->seq;
}

inline void WorkerPool::push_locked(OpRecord* op) {
  if (order_ == Order::fifo) {
    while (queued_locked() == fifo_.size()) [[unlikely]] grow_fifo();
    fifo_[(fifo_head_ + queued_locked()) & (fifo_.size() - 1)] = op;
  } else {
    op->seq = seq_++;
    heap_.push_back(op);
    std::push_heap(heap_.begin(), heap_.end(), &WorkerPool::before);
  }
  // Only the lock's holder writes size_: a load and a store, no locked add.
  size_.store(size_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

void WorkerPool::enqueue(OpRecord* op) {
  lock_.lock();
  push_locked(op);
  // Read the worker counts inside the critical section. A worker changes them
  // (seq_cst) before its last try_pop(), which takes this lock: if that
  // try_pop runs after this section it finds the op; if before, its change
  // happened before this section and is seen here. So a spinning worker will
  // find the op, and only when none spins is a sleeper woken: a busy pusher
  // makes no syscall per op, and no fence is needed. A spinner that takes an
  // op stops spinning inside its try_pop()'s section (see spin()), so the
  // count read here is never one that has already left with its op.
  const bool wake = spinning_.load(std::memory_order_relaxed) == 0 && sleepers_.load(std::memory_order_relaxed) > 0;
  lock_.unlock();
  if (wake) wake_one();
}

void WorkerPool::enqueue_list(OpRecord* head) {
  lock_.lock();
  for (OpRecord* op = head; op != nullptr;) {
    OpRecord* next = op->next;  // read first: a worker may take `op` once the lock is released
    push_locked(op);
    op = next;
  }
  // As in enqueue(), read under the lock.
  const bool wake = spinning_.load(std::memory_order_relaxed) == 0 && sleepers_.load(std::memory_order_relaxed) > 0;
  lock_.unlock();
  if (wake) wake_one();
}

void WorkerPool::grow_fifo() noexcept {
  // Called and returns with lock_ held; rarely: only past the most ops ever
  // queued at once. The new ring is allocated with the lock released (other
  // threads keep queueing and taking meanwhile; if one of them grew it
  // first, the caller's loop looks again). The op being queued is counted
  // in flight already, so there is no way back: out of memory here ends
  // the process with a message, as a lost op would hang its waiters.
  const std::size_t want = fifo_.size() * 2;
  lock_.unlock();
  std::vector<OpRecord*> bigger;
  try {
    bigger.resize(want);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "ordo: out of memory growing the %s pool's ready queue to %zu ops\n", name_.c_str(), want);
    std::abort();
  }
  lock_.lock();
  if (fifo_.size() * 2 != want) return;  // grown meanwhile
  const std::size_t mask = fifo_.size() - 1;
  for (std::size_t i = 0, n = queued_locked(); i < n; ++i) bigger[i] = fifo_[(fifo_head_ + i) & mask];
  fifo_.swap(bigger);
  fifo_head_ = 0;
}

void WorkerPool::wake_one() {
  // The epoch first: a worker about to wait in the task checks it after it
  // set task_waiting_ (seq_cst both sides), so either it sees the bump and
  // does not wait, or this sees it waiting and interrupts its wait.
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  // The task's runner only when no other worker sleeps: waking a sleeper
  // instead leaves the runner waiting, where the next completion wakes it.
  if (task_waiting_.load(std::memory_order_seq_cst) && sleepers_.load(std::memory_order_seq_cst) <= 1 &&
      task_waiting_.exchange(false, std::memory_order_seq_cst)) {
    interrupt_task();
    return;
  }
  epoch_.notify_one();
}

void WorkerPool::interrupt_task() noexcept {
  // Dekker with detach_task(): this increment then the load of task_, there
  // the store of task_ then the load of task_callers_. A task being detached
  // is not called here; detach_task() interrupts its runner itself.
  task_callers_.fetch_add(1, std::memory_order_seq_cst);
  if (IdleTask* task = task_.load(std::memory_order_seq_cst); task != nullptr) task->interrupt();
  task_callers_.fetch_sub(1, std::memory_order_seq_cst);
}

bool WorkerPool::attach_task(IdleTask* task) noexcept {
  IdleTask* expected = nullptr;
  return task != nullptr && task_.compare_exchange_strong(expected, task, std::memory_order_seq_cst);
}

void WorkerPool::detach_task(IdleTask* task) noexcept {
  IdleTask* expected = task;
  if (!task_.compare_exchange_strong(expected, nullptr, std::memory_order_seq_cst)) return;
  // Dekker with claim_task() and interrupt_task(): this store of task_ then
  // the loads of task_held_ and task_callers_, there the claim or increment
  // then the load of task_. The holder is interrupted until it lets go: a
  // wake_one() that took task_waiting_ just now found no task to interrupt.
  while (task_held_.load(std::memory_order_seq_cst) || task_callers_.load(std::memory_order_seq_cst) != 0) {
    if (task_held_.load(std::memory_order_seq_cst)) task->interrupt();
    std::this_thread::yield();
  }
}

IdleTask* WorkerPool::claim_task() noexcept {
  if (task_.load(std::memory_order_relaxed) == nullptr) return nullptr;
  bool expected = false;
  if (!task_held_.compare_exchange_strong(expected, true, std::memory_order_seq_cst)) return nullptr;  // held
  IdleTask* task = task_.load(std::memory_order_seq_cst);
  if (task == nullptr) release_task();
  return task;
}

void WorkerPool::want_task_runner() noexcept {
  if (task_.load(std::memory_order_relaxed) == nullptr) return;
  // One of this pool's workers made it wanted (it submitted): it is about
  // to go idle (and run the task itself) or to take another op (and wake a
  // sleeper first). A wake-up here would cost a second thread per request.
  if (t_state.pool == this) {
    if (!runner_wanted_.load(std::memory_order_relaxed)) runner_wanted_.store(true, std::memory_order_relaxed);
    return;
  }
  wake_for_task();
}

void WorkerPool::wake_for_task() noexcept {
  // Dekker with the idle path: there sleepers_ is raised before the look at
  // the task's wanted(); here what made it wanted happened before this
  // fence. A worker that looked too early is counted here and woken; the
  // woken one finds the task wanted and runs it.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (task_waiting_.load(std::memory_order_relaxed) || sleepers_.load(std::memory_order_relaxed) == 0) return;
  wake_one();
}

bool WorkerPool::task_wanted() noexcept {
  if (task_.load(std::memory_order_relaxed) == nullptr) return false;
  IdleTask* task = claim_task();  // held while asked: detach_task() waits for the answer
  if (task == nullptr) return false;
  const bool yes = task->wanted();
  release_task();
  return yes;
}

OpRecord* WorkerPool::try_pop(bool spinning) {
  ThreadState& ts = t_state;
  OpRecord* batch[kMaxBatch];
  std::int64_t took = 0;
  OpRecord* op = nullptr;
  lock_.lock();
  if (order_ == Order::fifo) {
    if (const std::size_t queued = queued_locked(); queued != 0) {
      // Take a share of the queue at once (at most kMaxBatch): one lock and
      // one cache-line transfer of the queue for several ops. The extra ops
      // go to this worker's local list, in queue order, linked after the
      // lock is released.
      took = std::max<std::int64_t>(
          1, std::min<std::int64_t>(kMaxBatch, static_cast<std::int64_t>(queued) / n_threads_));
      // At most kBatchWorkNs of work by this thread's recent ops (none
      // timed yet: one op, which may be long).
      if (took > 1) {
        took = ts.op_ns < 0 ? 1
                            : std::min<std::int64_t>(took, std::max<std::int64_t>(
                                                               1, kBatchWorkNs / std::max<std::int64_t>(ts.op_ns, 1)));
      }
      const std::size_t mask = fifo_.size() - 1;
      for (std::int64_t i = 0; i < took; ++i) batch[i] = fifo_[(fifo_head_ + static_cast<std::size_t>(i)) & mask];
      fifo_head_ = (fifo_head_ + static_cast<std::size_t>(took)) & mask;
      size_.store(static_cast<std::int64_t>(queued) - took, std::memory_order_relaxed);
      op = batch[0];
    }
  } else if (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), &WorkerPool::before);
    op = heap_.back();
    heap_.pop_back();
    size_.store(size_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  }
  if (spinning && op != nullptr) spinning_.fetch_sub(1, std::memory_order_relaxed);
  lock_.unlock();
  if (took > 1) {
    // The records were written by whoever queued them: ask for all their
    // lines at once, then link them (one wait, not one per record).
    for (std::int64_t i = 1; i < took; ++i) prefetch_for_write(batch[i]);
    for (std::int64_t i = 1; i < took; ++i) ts.inline_ops.push(batch[i]);
    ts.ahead_until = EngineCore::now_ns() + kBatchWorkNs;
  }
  if (op != nullptr) op->next = nullptr;
  return op;
}

void WorkerPool::worker_main(int index) {
  ThreadState& ts = t_state;
  ts.engine = &core_;
  ts.pool = this;
  ts.index = index;
  ts.depth = 1;  // ops made ready inline by this worker are queued locally, run below
  Keep keep;
  // A new worker has no work to spin for: it goes to sleep at once. Spinning,
  // it yields for up to kSpinRounds time slices of a core that others need
  // (an engine's threads start on the core its creator does not occupy, all
  // on the same one): a priority worker that never got an op in W6 took its
  // core from a busy CPU worker that way, once per slice, for ~300 ms.
  bool may_spin = false;
  for (;;) {
    OpRecord* op = nullptr;
    if (!ts.inline_ops.empty()) {
      op = ts.inline_ops.pop();
    } else {
      op = try_pop();
      ts.continuations = 0;
      if (op == nullptr) {
        if (keep.since != 0) end_keep(keep, EngineCore::now_ns());
        core_.flush_finished();  // out of work: publish the completions counted locally
        // Spin for the next op, unless the idle task is wanted (requests in
        // flight in the ring): then wait there at once, where their completion
        // wakes this thread (spinning, it would steal the core that runs it).
        // One spinner at a time: it catches the pusher's next op as well as
        // several would, and every further one polls the queue's hot line,
        // races the pusher for its lock and takes a core (or a hyperthread's
        // share of one) from the threads with work, a cost that grows with
        // the workers (docs/benchmarks.md, "Many cores").
        if (may_spin && spinning_.load(std::memory_order_relaxed) == 0 && !task_wanted()) op = spin();
        may_spin = true;
      }
      if (op == nullptr) {
        const std::uint32_t epoch = epoch_.load(std::memory_order_seq_cst);
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        // An attached idle task (detail::IdleTask): this worker waits in it
        // if no other does and the task is wanted, and sleeps on its futex
        // otherwise (an io_uring ring with no request in flight would wake
        // it for CQEs that submitters reap themselves). Dekker with
        // wake_for_task(): sleepers_ above, this fence, then wanted().
        std::atomic_thread_fence(std::memory_order_seq_cst);
        IdleTask* task = claim_task();
        if (task != nullptr && !task->wanted()) {
          release_task();
          task = nullptr;
        }
        if (task != nullptr) {
          runner_wanted_.store(false, std::memory_order_relaxed);  // this worker is the runner
          task_waiting_.store(true, std::memory_order_seq_cst);
        }
        op = try_pop();
        const bool stop = op == nullptr && stop_.load(std::memory_order_seq_cst);
        bool waited_in_task = false;
        if (op == nullptr && !stop) {
          core_.worker_idle();
          if (task == nullptr) {
            epoch_.wait(epoch, std::memory_order_seq_cst);
          } else if (epoch_.load(std::memory_order_seq_cst) == epoch) {
            task->wait();
            waited_in_task = true;
          }
        }
        if (task != nullptr) {
          task_waiting_.store(false, std::memory_order_seq_cst);
          sleepers_.fetch_sub(1, std::memory_order_seq_cst);
          // Run the task as a worker that is about to look at the queue:
          // what it enqueues wakes nobody (this thread takes it next), and
          // more than it takes brings a sleeper in.
          std::int64_t keep_ns = 0;
          if (waited_in_task) {
            spinning_.fetch_add(1, std::memory_order_seq_cst);
            keep_ns = task->run();
            // Inside the queue's lock, as in try_pop(): an op another thread
            // queued meanwhile (reading this thread as spinning, so waking
            // nobody) is then counted in size_ below.
            lock_.lock();
            spinning_.fetch_sub(1, std::memory_order_relaxed);
            lock_.unlock();
          }
          release_task();
          if (keep_ns > 0 && size_.load(std::memory_order_relaxed) > 0) {
            keep = Keep{EngineCore::now_ns(), keep_ns, 0, task};  // Keep: run it here, for now
          } else {
            wake_if_queued(1);
          }
        } else {
          sleepers_.fetch_sub(1, std::memory_order_relaxed);
        }
        if (stop) break;
        if (op == nullptr) continue;
      }
    }
    if (keep.since != 0) {
      // Keeping (Keep): past its time, what is still queued goes to a sleeper.
      const std::int64_t now = EngineCore::now_ns();
      if (now - keep.since <= keep.for_ns) {
        ++keep.ops;
      } else {
        end_keep(keep, now);
        wake_if_queued(0);
      }
    }
    // This worker made the task wanted (submitted requests) and stays
    // busy: bring a sleeper in to run it (keeping: it runs the task itself
    // when the keep ends, which is soon).
    if (keep.since == 0 && runner_wanted_.load(std::memory_order_relaxed) &&
        runner_wanted_.exchange(false, std::memory_order_relaxed)) {
      wake_for_task();
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
    if (i < kPauseSpins) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
    // Taking an op, it stops spinning inside the queue's lock: an enqueue()
    // that read the count after this thread had left with the first of two
    // ops queued together woke nobody for the second, which waited in the
    // queue beside a sleeping worker until this one came back for it (for
    // as long as the first op ran). Now that enqueue() either comes first,
    // and its op is seen below, or sees the spinner gone and wakes a sleeper.
    if (size_.load(std::memory_order_relaxed) > 0) op = try_pop(/*spinning=*/true);
    // The idle task is wanted and nobody runs it: go and run it.
    if (op == nullptr && task_wanted()) break;
  }
  if (op == nullptr) spinning_.fetch_sub(1, std::memory_order_seq_cst);
  // Found work and more is queued while nobody else looks: bring a sleeper in.
  if (op != nullptr) wake_if_queued(0);
  return op;
}

void WorkerPool::wake_if_queued(std::int64_t more_than) noexcept {
  if (size_.load(std::memory_order_relaxed) > more_than && spinning_.load(std::memory_order_seq_cst) == 0 &&
      sleepers_.load(std::memory_order_seq_cst) > 0) {
    wake_one();
  }
}

void WorkerPool::stop_and_join() {
  if (!stop_.exchange(true, std::memory_order_seq_cst)) {
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    epoch_.notify_all();
    // Dekker with the task's holder: it sets task_waiting_ then reads stop_.
    if (task_waiting_.exchange(false, std::memory_order_seq_cst)) interrupt_task();
  }
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

}  // namespace ordo::detail

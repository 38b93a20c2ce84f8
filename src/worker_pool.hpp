// src/worker_pool.hpp - a set of worker threads sharing one ready queue.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "ordo/detail/idle_task.hpp"
#include "ordo/detail/op_record.hpp"
#include "spin_lock.hpp"

namespace ordo::detail {

class EngineCore;
class WorkerPool;

/// A call into an engine (a push) on the current thread. Ops finished while
/// it lasts are counted here and subtracted from the in-flight count when it
/// ends: the engine cannot be destroyed during a call, so no lock is needed.
struct CallScope {
  EngineCore* engine = nullptr;
  std::int64_t finished = 0;
  CallScope* outer = nullptr;
};

/// A FIFO list of ops linked through OpRecord::next: a completion's ready
/// ops, a thread's inline work.
struct OpList {
  OpRecord* head = nullptr;
  OpRecord* tail = nullptr;
  [[nodiscard]] bool empty() const noexcept { return head == nullptr; }
  /// Appends `op` (it comes out after those already there).
  void push(OpRecord* op) noexcept {
    op->next = nullptr;
    if (tail != nullptr) {
      tail->next = op;
    } else {
      head = op;
    }
    tail = op;
  }
  /// Puts `op` first: it is popped next.
  void push_front(OpRecord* op) noexcept {
    op->next = head;
    head = op;
    if (tail == nullptr) tail = op;
  }
  /// Removes and returns the first op; the list must not be empty.
  OpRecord* pop() noexcept {
    OpRecord* op = head;
    head = op->next;
    if (head == nullptr) tail = nullptr;
    return op;
  }
};

/// What the current thread is to the engine. One per thread.
struct ThreadState {
  EngineCore* engine = nullptr;  ///< engine this thread is a worker of (null: foreign thread)
  WorkerPool* pool = nullptr;    ///< its pool
  int index = -1;                ///< its index in the pool
  const RunningOp* running = nullptr;  ///< op whose body is on this thread's stack
  int depth = 0;                 ///< >0 while the thread drains inline work
  OpList inline_ops;             ///< ops to run inline once the current one is done, in order
  /// Workers: ops finished but not yet subtracted from the engine's in-flight
  /// count (flushed in batches, and whenever the worker runs out of work).
  std::int64_t finished = 0;
  /// Workers: ops run as continuations since the last take from the queue.
  std::uint32_t continuations = 0;
  /// Counts ops run on this thread; one in kPeriodOps is timed (op_ns).
  std::uint32_t sample_tick = 0;
  CallScope* call = nullptr;  ///< innermost engine call on this thread, if any
  /// While the body of a skipped op is destroyed: the error that skipped it
  /// (Engine::skip_reason, detail::ErrorRef::skipping; a reference held by
  /// EngineCore::complete for that time).
  ErrorRecord* skip_error = nullptr;
  /// Inside an ordo::CompletionThread scope: an I/O reaper or event watcher
  /// that must never run user code (work it makes ready always goes to a pool).
  bool completion_thread = false;
  /// Starting a launcher at once inside a delivery (EngineCore::dispatch):
  /// what that launch makes ready meanwhile goes the usual way.
  bool launching = false;
  /// Until when (EngineCore::now_ns) a continuation may run ahead of the
  /// rest of the batch last taken from a queue (Place::ahead).
  std::int64_t ahead_until = 0;
  /// How long this thread's ops have lately kept it busy (ns, a moving
  /// average of the timed ones, each clamped at kBatchWorkNs; -1: none timed
  /// yet). Sizes the batches it takes from a queue (WorkerPool::try_pop).
  std::int64_t op_ns = -1;
};

/// A thread's bookkeeping period, in ops: it times one op in this many (for
/// its batches), publishes its finished ops to the engine's in-flight count
/// once this many have piled up (the count's line stays with the pusher),
/// and after this many continuations in a row goes back to the queue (a
/// chain cannot hold queued ops back for ever). A power of two.
inline constexpr std::uint32_t kPeriodOps = 64;
static_assert((kPeriodOps & (kPeriodOps - 1)) == 0, "the sample tick is masked");

/// Most work, by the taking thread's op_ns, that a batch taken from a queue
/// may hold (WorkerPool::try_pop); also how long a continuation may run
/// ahead of the rest of its batch (Place::ahead). A batch's ops wait for the
/// one that runs first, even while another worker is idle: batching spares
/// the queue's lock and line transfer per op, which pays for ops of a few
/// hundred ns and costs parallelism for ops of tens of us (docs/benchmarks.md).
inline constexpr std::int64_t kBatchWorkNs = 100'000;

/// Folds `ns`, the time one op kept this thread busy, into ts.op_ns: the
/// first sample sets it, each later one moves it by 1/8 (a preempted op,
/// clamped at kBatchWorkNs, moves it by 1/8 of the bound at most).
inline void note_op_time(ThreadState& ts, std::int64_t ns) noexcept {
  ns = ns < kBatchWorkNs ? ns : kBatchWorkNs;
  ts.op_ns = ts.op_ns < 0 ? ns : ts.op_ns + (ns - ts.op_ns) / 8;
}

// constinit: no dynamic initialisation, so other translation units reach it
// without a call to its TLS init function (the direct path reads it 3 times a push).
extern constinit thread_local ThreadState t_state;

/// Worker threads with one shared ready queue, FIFO or by priority.
///
/// @par Thread safety
/// enqueue() from any thread. The queue is guarded by `lock_`; sleeping uses
/// `epoch_` (futex wait) with the `sleepers_` count checked by enqueuers.
/// attach_task(), detach_task() and want_task_runner() from any thread.
class WorkerPool {
 public:
  enum class Order { fifo, priority };

  WorkerPool(EngineCore& core, std::string name, unsigned threads, Order order);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void enqueue(OpRecord* op);
  /// Queues the ops linked from `head` through OpRecord::next, in that
  /// order, under one lock, and wakes at most one sleeper, as enqueue() does
  /// for one op (the worker that takes some wakes another if more are left).
  void enqueue_list(OpRecord* head);
  /// Called once the engine is drained: workers exit when the queue is empty.
  void stop_and_join();
  [[nodiscard]] std::int64_t queued() const noexcept { return size_.load(std::memory_order_relaxed); }
  [[nodiscard]] bool is_priority() const noexcept { return order_ == Order::priority; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  /// From now on one idle worker at a time may run `task` instead of
  /// sleeping (detail::IdleTask). False if a task is attached already.
  bool attach_task(IdleTask* task) noexcept;
  /// Undoes attach_task(): interrupts the task's runner, returns once no
  /// thread is inside a call to the task.
  void detach_task(IdleTask* task) noexcept;
  /// The attached task is wanted and nobody runs it: see
  /// EngineExtension::want_idle_task_runner().
  void want_task_runner() noexcept;
  /// A worker sleeps (or runs the attached task) with no op queued for
  /// it: a hint. A sleeper woken for a queued op counts as a sleeper until
  /// it runs, which with more threads than cores can take a scheduler tick;
  /// the queued op tells it apart. seq_cst: Dekker with a sleeping worker's
  /// EngineCore::worker_idle().
  [[nodiscard]] bool starved() const noexcept {
    return sleepers_.load(std::memory_order_seq_cst) > 0 && size_.load(std::memory_order_seq_cst) == 0;
  }
  /// No queued op and every worker asleep (a hint: may change right after).
  [[nodiscard]] bool idle() const noexcept {
    return size_.load(std::memory_order_acquire) == 0 &&
           sleepers_.load(std::memory_order_acquire) == n_threads_;
  }

 private:
  void worker_main(int index);
  /// At a worker's start: last run on a CPU of its own (see there), not pinned.
  static void spread_start(int creator_cpu, unsigned index) noexcept;
  /// The next queued op (and a batch to the local list), or null. A spinning
  /// worker (`spinning`) that gets one is counted out of spinning_ under the
  /// queue's lock.
  OpRecord* try_pop(bool spinning = false);
  OpRecord* spin();
  void wake_one();
  /// The attached task if this worker may run it now (it then holds it
  /// until release_task()).
  IdleTask* claim_task() noexcept;
  void release_task() noexcept { task_held_.store(false, std::memory_order_seq_cst); }
  /// The attached task's wanted(), asked while held; false if none is
  /// attached or another worker holds it.
  bool task_wanted() noexcept;
  /// Interrupts the attached task's runner (IdleTask::interrupt), if a task is attached.
  void interrupt_task() noexcept;
  /// Wakes a sleeping worker to run the task, unless its runner waits in it.
  void wake_for_task() noexcept;
  static bool before(const OpRecord* a, const OpRecord* b) noexcept;
  /// Wakes a sleeper if more than `more_than` ops are queued and no worker
  /// spins (one that spins will find them).
  void wake_if_queued(std::int64_t more_than) noexcept;
  struct Keep;
  /// Ends `keep` and tells its task how it went (IdleTask::kept).
  void end_keep(Keep& keep, std::int64_t now) noexcept;

  EngineCore& core_;
  std::string name_;
  Order order_;
  int n_threads_;  ///< threads_.size() once started (read by the workers while threads_ fills)

  std::vector<OpRecord*> heap_;    ///< priority queue (guarded by lock_)
  std::uint64_t seq_ = 0;          ///< FIFO tie-break among equal priorities (guarded by lock_)
  // The queue's hot line: what enqueue() and try_pop() touch on every call
  // (the lock, the ring's pointer and head, the counts) shares one cache
  // line, so a push that queues an op after a worker took some moves one
  // line between the cores, not two (docs/benchmarks.md).
  alignas(64) SpinLock lock_;
  /// The fifo queue: a ring of op pointers, size_ of them from
  /// fifo_head_ (guarded by lock_). An array rather than a list through the
  /// records: a worker takes a batch with a look at one or two cache lines,
  /// where walking the records to the batch's end missed once per record,
  /// with the lock held. Grows (doubles) when full; never shrinks.
  std::vector<OpRecord*> fifo_;
  std::size_t fifo_head_ = 0;
  /// Ops queued, read under lock_ (where size_ is exact: only the lock's holder writes it).
  [[nodiscard]] std::size_t queued_locked() const noexcept {
    return static_cast<std::size_t>(size_.load(std::memory_order_relaxed));
  }
  void grow_fifo() noexcept;
  /// Adds `op` to the queue; lock_ held.
  void push_locked(OpRecord* op);
  /// Ops queued; written under lock_, read without it as a hint by spinning workers.
  std::atomic<std::int64_t> size_{0};
  /// Workers about to sleep or asleep. seq_cst with the enqueuer's fence: see enqueue().
  std::atomic<int> sleepers_{0};
  /// Workers spinning on the queue: one at a time (two when idle workers
  /// race to start); while one spins, enqueue() wakes nobody.
  std::atomic<int> spinning_{0};
  alignas(64) std::atomic<std::uint32_t> epoch_{0};  ///< bumped to wake sleepers (futex word)
  std::atomic<bool> stop_{false};        ///< set once by stop_and_join()
  // The idle task (detail::IdleTask). One worker at a time holds it
  // (task_held_) and, while idle, waits in it; it counts among the
  // sleepers_. wake_one() interrupts its wait when no other worker sleeps,
  // and leaves it waiting otherwise.
  std::atomic<IdleTask*> task_{nullptr};
  std::atomic<bool> task_held_{false};     ///< a worker holds the task: only it calls wait() and run()
  std::atomic<bool> task_waiting_{false};  ///< the holder is idle: interrupt its wait to wake it
  /// Threads inside interrupt_task() or a kept() call (end_keep): detach_task()
  /// waits for them, as it waits for the holder.
  std::atomic<int> task_callers_{0};
  /// A worker of this pool made the task wanted with nobody running it: if
  /// it takes another op rather than going idle, it wakes a sleeper to run
  /// the task (want_task_runner()).
  std::atomic<bool> runner_wanted_{false};
  std::vector<std::thread> threads_;
};

}  // namespace ordo::detail

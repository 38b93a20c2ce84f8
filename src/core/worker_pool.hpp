// src/core/worker_pool.hpp - worker threads, each with a deque of ready ops that
// idle workers steal from (a priority pool: one shared heap). Internal.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ordo/detail/idle_task.hpp"
#include "ordo/stats.hpp"
#include "ordo/detail/op_record.hpp"
#include "ready_queue.hpp"
#include "thread_state.hpp"

namespace ordo::detail {

/// What a pool needs of the engine it serves: the one narrow interface
/// between the two (EngineCore implements it).
class PoolHost {
 public:
  /// Runs a ready op on the calling worker.
  virtual void execute(OpRecord* op) = 0;
  /// The worker ran out of work: publish what it counted locally.
  virtual void flush_finished() noexcept = 0;
  /// The worker is about to sleep (a throttled pusher may have to go on).
  virtual void worker_idle() noexcept = 0;

 protected:
  ~PoolHost() = default;
};

/// Worker threads; each fifo worker owns a deque of ready ops, which every
/// idle worker of the pool may steal from, so no ready op waits behind a
/// running one while a worker is idle.
///
/// @par Thread safety
/// enqueue(), enqueue_list(), attach_task(), detach_task() and
/// want_task_runner() from any thread. Sleeping and waking: a worker counts
/// itself in `sleepers_` (or `spinning_`) with a read-modify-write, then
/// looks at every deque's size; an enqueuer changes a size with a
/// read-modify-write, then looks at those counts (notify()). Every one of
/// these is seq_cst, so one of the two sides sees the other: no fences.
class WorkerPool {
 public:
  enum class Order { fifo, priority };

  /// `engine`: what its workers' ThreadState::engine names.
  WorkerPool(PoolHost& host, EngineCore* engine, std::string name, unsigned threads, Order order);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  /// Queues a ready op: on the calling worker's own deque, or (any other
  /// thread) dealt round robin over the workers' deques; wakes a worker if
  /// none is looking for work.
  void enqueue(OpRecord* op);
  /// As enqueue(), for the ops linked from `head` through OpRecord::next, in
  /// order, onto one deque: workers woken for them wake one another as each
  /// finds more left (spin()).
  void enqueue_list(OpRecord* head);
  /// Called once the engine is drained: workers exit when the deques are empty.
  void stop_and_join();
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
  /// Engine::stats(): this pool's counts at `now` (TimerService::now_ns();
  /// hints, each read once; defined in stats.cpp).
  [[nodiscard]] PoolStats stats(std::int64_t now) const;
  /// No queued op and every worker asleep (a hint: may change right after).
  [[nodiscard]] bool idle() const noexcept {
    return queued() == 0 && sleepers_.load(std::memory_order_acquire) == n_threads_;
  }

 private:
  /// A worker's own state, on its stack: what the steps of its loop share.
  struct Worker {
    int index = 0;
    /// A new worker has no work to spin for: it goes to sleep at once.
    /// Spinning, it would yield for up to kSpinRounds time slices of a core
    /// that others need (an engine's threads start on the core its creator
    /// does not occupy, all on the same one).
    bool may_spin = false;
    bool stop = false;               ///< the pool stops and no work is left: leave the loop
    std::int64_t idle_from = 0;      ///< start of the current idle period (Engine::stats()), 0 while working
    IdleKeep* keep = nullptr;        ///< the keep the idle task granted (IdleKeep), null if none
    IdleTask* keep_task = nullptr;   ///< the task that granted it (told when it ends)
  };

  // The worker loop, step by step (worker_main): local work (the worker's
  // continuation), its own deque, stealing (take), spinning (ran_out, spin),
  // and sleeping or running the idle task (idle, sleep, run_task).
  void worker_main(int index);
  /// The next op this worker runs: its continuation, else one from a deque,
  /// else what it finds spinning or once woken. Null: look again (or leave,
  /// if w.stop).
  [[gnu::always_inline]] inline OpRecord* next_op(Worker& w, ThreadState& ts);
  /// Before an op runs, while keeping or with runner_wanted_ set: ends a
  /// keep that the task's go_on() ends (handing what is queued to
  /// sleepers), and brings a sleeper in to run the task when this worker
  /// made it wanted and stays busy.
  [[gnu::noinline]] void before_run(Worker& w) noexcept;
  /// At a worker's start: last run on a CPU of its own (see there), not pinned.
  static void spread_start(int creator_cpu, unsigned index) noexcept;
  /// The deque a worker owns (a priority pool's workers share deque 0).
  [[nodiscard]] ReadyQueue& own(int index) noexcept { return queues_[order_ == Order::fifo ? index : 0]; }
  /// The deque an op enqueued on this thread goes to.
  ReadyQueue& target() noexcept;
  /// An op from the worker's own deque, else stolen from another; null if none.
  OpRecord* take(int index) noexcept;
  /// An op from another worker's deque, from the next one round; null if none.
  OpRecord* steal(int index) noexcept;
  /// The worker found no op: its idle period starts, a keep ends, its local
  /// counts are published, and it spins for the next op unless another
  /// worker spins or the idle task is wanted (an op found, or null).
  [[gnu::noinline]] OpRecord* ran_out(Worker& w);
  /// Looks for work, counted in spinning_ (enqueuers wake nobody while one
  /// spins), for a bounded time; null if none came or the idle task is wanted.
  OpRecord* spin(int index);
  /// Sleeps (or runs the idle task) until woken, then looks for the work it
  /// was woken for; null if none (w.stop set when the pool stops).
  [[gnu::noinline]] OpRecord* idle(Worker& w);
  /// A worker just woken: looks for the work it was woken for.
  OpRecord* woken(int index);
  /// Counts the worker among the sleepers, looks once more, then sleeps on
  /// the futex or waits in the idle task until woken; an op found on the
  /// last look, or null. `stop`: set when the pool is stopping and no work is left.
  OpRecord* sleep(Worker& w, bool& stop);
  /// Claims the idle task for a worker going to sleep if it is wanted (this
  /// worker then waits in it); null if not.
  IdleTask* claim_runner() noexcept;
  /// Blocks until woken: on the futex, or in `task` if the epoch is still
  /// `epoch`. True if it waited in the task.
  bool wait_for_work(IdleTask* task, std::uint32_t epoch) noexcept;
  /// After the wait in `task`: runs it (if it waited there) as a spinning
  /// worker, lets it go, and starts the keep it granted or wakes sleepers
  /// for what it made ready.
  void run_task(Worker& w, IdleTask* task, bool waited) noexcept;
  /// Ops queued over all deques (seq_cst loads: see notify()).
  [[nodiscard]] std::uint64_t queued() const noexcept;
  /// After a deque's size grew: wakes a sleeper unless a worker spins (it will find the op).
  void notify() noexcept;
  /// A worker that looked for work (spinning, woken or about to sleep) took
  /// an op: wakes a sleeper for what is left, unless another worker spins.
  void found_work() noexcept;
  /// Wakes a sleeper if more than `more_than` ops are queued and no worker spins.
  void wake_if_queued(std::uint64_t more_than) noexcept;
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
  /// Ends the worker's keep and tells the task that granted it, if still attached (IdleTask::kept).
  void end_keep(Worker& w) noexcept;

  /// A worker's idle time (Engine::stats()): written by the worker alone
  /// (loads and stores), read relaxed by a snapshot. Clocked only when it
  /// runs out of work and when it finds some again.
  struct alignas(64) IdleClock {
    std::atomic<std::int64_t> idle_ns{0};  ///< idle periods that ended
    std::atomic<std::int64_t> since{0};    ///< start of the current idle period, 0 while it works
  };
  void idle_begin(int index, std::int64_t& from) noexcept;
  void idle_end(int index, std::int64_t& from) noexcept;

  PoolHost& host_;
  EngineCore* const engine_;
  std::string name_;
  Order order_;
  int n_threads_;  ///< threads_.size() once started (read by the workers while threads_ fills)
  int n_queues_;   ///< one per worker (fifo), or one (priority)
  std::unique_ptr<ReadyQueue[]> queues_;
  std::unique_ptr<IdleClock[]> idle_;  ///< one per worker
  std::int64_t started_ns_ = 0;        ///< when the pool was created (TimerService::now_ns())

  /// Workers asleep or about to sleep (the idle task's runner among them).
  alignas(64) std::atomic<int> sleepers_{0};
  /// Workers looking for work (spin()); while one does, enqueuers wake nobody.
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
  /// Bumped by wake_for_task() after what made the task wanted, read with a
  /// read-modify-write by a worker going to sleep before it asks wanted():
  /// one of the two sees the other (see claim_runner()).
  std::atomic<std::uint32_t> task_calls_{0};
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

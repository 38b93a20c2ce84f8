// src/core/worker_pool.cpp - the worker loop: take, steal, spin, sleep (see worker_pool.hpp).
#include "worker_pool.hpp"

#include "ordo/detail/pool_hooks.hpp"
#include "ordo/detail/timer_service.hpp"

#include <sched.h>

#include <cstddef>
#include <utility>

namespace ordo::detail {

constinit thread_local ThreadState t_state;

namespace {
// How long an idle worker looks for work before it sleeps, in rounds of a
// look at every deque: long enough to catch the next op of a busy pusher,
// short enough not to steal a core from it on an oversubscribed machine.
constexpr int kSpinRounds = 256;

// A test's hook (ordo/detail/pool_hooks.hpp); null, one predictable branch, otherwise.
std::atomic<PoolHook> g_hook{nullptr};
std::atomic<void*> g_hook_arg{nullptr};

inline void at(PoolPoint point, const WorkerPool* pool) noexcept {
  if (PoolHook hook = g_hook.load(std::memory_order_acquire); hook != nullptr) [[unlikely]] {
    hook(point, pool, g_hook_arg.load(std::memory_order_relaxed));
  }
}

}  // namespace

void set_pool_hook(PoolHook hook, void* arg) noexcept {
  g_hook_arg.store(arg, std::memory_order_relaxed);
  g_hook.store(hook, std::memory_order_release);
}

WorkerPool::WorkerPool(PoolHost& host, EngineCore* engine, std::string name, unsigned threads, Order order)
    : host_(host),
      engine_(engine),
      name_(std::move(name)),
      order_(order),
      n_threads_(static_cast<int>(threads)),
      n_queues_(order == Order::fifo ? static_cast<int>(threads) : 1),
      queues_(std::make_unique<ReadyQueue[]>(static_cast<std::size_t>(n_queues_))),
      idle_(std::make_unique<IdleClock[]>(threads)),
      started_ns_(TimerService::now_ns()) {
  if (order_ == Order::priority) queues_[0].use_priority_order();
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
  // worker runs where it started. Why: docs/benchmarks.md, "Where ordo is
  // behind".
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


ReadyQueue& WorkerPool::target() noexcept {
  ThreadState& ts = t_state;
  if (ts.pool == this) return own(ts.index);
  // Round robin without a division per push (deal may have counted for a
  // pool of more workers).
  const auto n = static_cast<std::uint32_t>(n_queues_);
  const std::uint32_t i = ts.deal < n ? ts.deal : 0;
  ts.deal = i + 1;
  return queues_[i];
}

void WorkerPool::enqueue(OpRecord* op) {
  target().push(op);
  at(PoolPoint::op_published, this);
  notify();
}

void WorkerPool::enqueue_list(OpRecord* head) {
  target().push_list(head);
  at(PoolPoint::op_published, this);
  notify();
}

std::uint64_t WorkerPool::queued() const noexcept {
  std::uint64_t n = 0;
  for (int i = 0; i < n_queues_; ++i) n += queues_[i].size.load(std::memory_order_seq_cst);
  return n;
}

void WorkerPool::notify() noexcept {
  // The deque's size grew by a read-modify-write (ReadyQueue::publish);
  // these loads come after it. A worker going to sleep counts itself (or
  // stops spinning) with a read-modify-write, then loads the sizes. All
  // seq_cst: either it sees the op, or this sees it counted and wakes one.
  // A spinner that is the last to take an op looks again (spin()).
  if (spinning_.load(std::memory_order_seq_cst) == 0 && sleepers_.load(std::memory_order_seq_cst) > 0) wake_one();
}

void WorkerPool::found_work() noexcept {
  // Enqueuers that saw this worker spinning, or counted it asleep, woke
  // nobody else, and their ops may be in another deque: the last worker to
  // stop looking for work wakes a sleeper for what is left (who does the
  // same on finding an op, so ops released together wake as many workers
  // as they need).
  wake_if_queued(0);
}

void WorkerPool::wake_if_queued(std::uint64_t more_than) noexcept {
  if (sleepers_.load(std::memory_order_seq_cst) > 0 && spinning_.load(std::memory_order_seq_cst) == 0 &&
      queued() > more_than) {
    wake_one();
  }
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
  // Handshake with sleep(): there sleepers_ is raised, then task_calls_ read
  // with a read-modify-write, then the task's wanted() asked. What made the
  // task wanted happened before this increment. If the sleeper's
  // read-modify-write comes after this one, it synchronizes with it and its
  // wanted() sees those writes; if before, this one synchronizes with it and
  // the load below sees the sleeper counted: it is woken, and finds the task
  // wanted.
  task_calls_.fetch_add(1, std::memory_order_seq_cst);
  if (task_waiting_.load(std::memory_order_seq_cst) || sleepers_.load(std::memory_order_seq_cst) == 0) return;
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


OpRecord* WorkerPool::take(int index) noexcept {
  if (OpRecord* op = own(index).pop(); op != nullptr) return op;
  return steal(index);
}

OpRecord* WorkerPool::steal(int index) noexcept {
  for (int k = 1; k < n_queues_; ++k) {
    ReadyQueue& q = queues_[(index + k) % n_queues_];
    if (OpRecord* op = q.pop(); op != nullptr) return op;
  }
  return nullptr;
}

OpRecord* WorkerPool::ran_out(Worker& w) {
  idle_begin(w.index, w.idle_from);
  if (w.keep != nullptr) end_keep(w);
  host_.flush_finished();  // out of work: publish the completions counted locally
  // Spin for the next op, unless the idle task is wanted (requests in
  // flight in the ring): then wait there at once, where their completion
  // wakes this thread (spinning, it would steal the core that runs it). One
  // spinner at a time: it catches the next op as well as several would, and
  // every further one takes a core (or a hyperthread's share of one) from
  // the threads with work.
  OpRecord* op = nullptr;
  if (w.may_spin && spinning_.load(std::memory_order_relaxed) == 0 && !task_wanted()) op = spin(w.index);
  w.may_spin = true;
  return op;
}

OpRecord* WorkerPool::spin(int index) {
  spinning_.fetch_add(1, std::memory_order_seq_cst);
  OpRecord* op = nullptr;
  for (int i = 0; i < kSpinRounds; ++i) {
    op = take(index);
    if (op != nullptr) break;
    // The idle task is wanted and nobody runs it: go and run it.
    if (task_wanted()) break;
    // Pause briefly, then yield: with more runnable threads than cores (a
    // pusher beside one worker per core) the pusher may be waiting for this
    // core, and it is the one that makes work.
    if (i < kPauseSpins) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
  spinning_.fetch_sub(1, std::memory_order_seq_cst);
  if (op != nullptr) found_work();
  return op;
}

OpRecord* WorkerPool::idle(Worker& w) {
  bool stop = false;
  OpRecord* op = sleep(w, stop);
  if (stop) {
    idle_end(w.index, w.idle_from);
    w.stop = true;
    return nullptr;
  }
  // Woken: what the idle task's run left it as its continuation comes
  // first (next_op); else it looks for the op it was woken for.
  if (op == nullptr && t_state.inline_ops.empty()) op = woken(w.index);
  return op;
}

OpRecord* WorkerPool::woken(int index) {
  // A worker is woken when no other looks for work: it takes that role.
  // With a spinner about (woken by someone else meanwhile), one look: the
  // spinner finds what it leaves. Alone, it wakes the next sleeper if it
  // leaves work behind, as the last spinner to leave does (spin()).
  if (spinning_.load(std::memory_order_seq_cst) == 0) return spin(index);
  OpRecord* op = take(index);
  if (op != nullptr) found_work();
  return op;
}

OpRecord* WorkerPool::sleep(Worker& w, bool& stop) {
  const std::uint32_t epoch = epoch_.load(std::memory_order_seq_cst);
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  IdleTask* task = claim_runner();
  // The last look, after counting itself: see notify().
  at(PoolPoint::sleeper_counted, this);
  OpRecord* op = queued() != 0 ? take(w.index) : nullptr;
  if (op == nullptr) at(PoolPoint::sleeper_looked, this);
  stop = op == nullptr && stop_.load(std::memory_order_seq_cst);
  const bool waited_in_task = op == nullptr && !stop && wait_for_work(task, epoch);
  if (task == nullptr) {
    sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    if (op != nullptr) found_work();
    return op;
  }
  task_waiting_.store(false, std::memory_order_seq_cst);
  sleepers_.fetch_sub(1, std::memory_order_seq_cst);
  run_task(w, task, waited_in_task);
  return op;
}

IdleTask* WorkerPool::claim_runner() noexcept {
  // An attached idle task (detail::IdleTask): this worker waits in it if no
  // other does and the task is wanted, and sleeps on its futex otherwise (an
  // io_uring ring with no request in flight would wake it for CQEs that
  // submitters reap themselves). The read-modify-write of task_calls_ is
  // this side of the handshake with wake_for_task().
  task_calls_.fetch_add(0, std::memory_order_seq_cst);
  IdleTask* task = claim_task();
  if (task != nullptr && !task->wanted()) {
    release_task();
    return nullptr;
  }
  if (task != nullptr) {
    runner_wanted_.store(false, std::memory_order_relaxed);  // this worker is the runner
    task_waiting_.store(true, std::memory_order_seq_cst);
  }
  return task;
}

bool WorkerPool::wait_for_work(IdleTask* task, std::uint32_t epoch) noexcept {
  host_.worker_idle();
  if (task == nullptr) {
    epoch_.wait(epoch, std::memory_order_seq_cst);
    return false;
  }
  // wake_one() bumps the epoch before it looks at task_waiting_ (set in
  // claim_runner()): either this sees the bump, or it interrupts the wait.
  if (epoch_.load(std::memory_order_seq_cst) != epoch) return false;
  task->wait();
  return true;
}

void WorkerPool::run_task(Worker& w, IdleTask* task, bool waited) noexcept {
  // Run the task as a spinning worker: what it enqueues wakes nobody (this
  // thread takes it next), and more than it takes brings a sleeper in.
  IdleKeep* keep = nullptr;
  if (waited) {
    spinning_.fetch_add(1, std::memory_order_seq_cst);
    keep = task->run();
    spinning_.fetch_sub(1, std::memory_order_seq_cst);
  }
  release_task();
  if (keep != nullptr && own(w.index).size.load(std::memory_order_seq_cst) > 0) {
    w.keep = keep;  // run what it made ready here, while keep->go_on() says so (before_run)
    w.keep_task = task;
    // Ops dealt to the other deques meanwhile are not this worker's to keep.
    if (queued() > own(w.index).size.load(std::memory_order_relaxed)) wake_if_queued(0);
  } else {
    wake_if_queued(1);
  }
}

void WorkerPool::end_keep(Worker& w) noexcept {
  // Counted as a caller: detach_task() waits for the call. A task detached
  // meanwhile is not told (one at the same address would be: a hint).
  task_callers_.fetch_add(1, std::memory_order_seq_cst);
  if (task_.load(std::memory_order_seq_cst) == w.keep_task) w.keep_task->kept(*w.keep);
  task_callers_.fetch_sub(1, std::memory_order_seq_cst);
  w.keep = nullptr;
  w.keep_task = nullptr;
}

void WorkerPool::idle_begin(int index, std::int64_t& from) noexcept {
  if (from != 0) return;
  from = TimerService::now_ns();
  idle_[index].since.store(from, std::memory_order_relaxed);
}

void WorkerPool::idle_end(int index, std::int64_t& from) noexcept {
  if (from == 0) return;
  IdleClock& c = idle_[index];
  c.idle_ns.store(c.idle_ns.load(std::memory_order_relaxed) + (TimerService::now_ns() - from),
                  std::memory_order_relaxed);
  c.since.store(0, std::memory_order_relaxed);
  from = 0;
}

OpRecord* WorkerPool::next_op(Worker& w, ThreadState& ts) {
  if (!ts.inline_ops.empty()) return ts.inline_ops.pop();  // local work: this worker's continuation
  ts.continuations = 0;
  OpRecord* op = take(w.index);
  if (op == nullptr) op = ran_out(w);
  if (op == nullptr) op = idle(w);
  return op;
}

void WorkerPool::before_run(Worker& w) noexcept {
  // Keeping (IdleKeep): once the task's go_on() says no, what is still
  // queued goes to a sleeper.
  if (w.keep != nullptr && !w.keep->go_on()) {
    end_keep(w);
    wake_if_queued(0);
  }
  // This worker made the task wanted (submitted requests) and stays busy:
  // bring a sleeper in to run it (keeping: it runs the task itself when the
  // keep ends, which is soon).
  if (w.keep == nullptr && runner_wanted_.load(std::memory_order_relaxed) &&
      runner_wanted_.exchange(false, std::memory_order_relaxed)) {
    wake_for_task();
  }
}

void WorkerPool::worker_main(int index) {
  ThreadState& ts = t_state;
  ts.engine = engine_;
  ts.pool = this;
  ts.index = index;
  ts.depth = 1;  // ops made ready inline by this worker are queued locally, run below
  Worker w{.index = index};
  while (!w.stop) {
    OpRecord* op = next_op(w, ts);
    if (op == nullptr) continue;
    // Tested inline: an op outside a keep, with no runner wanted, pays a load and a branch.
    if (w.keep != nullptr || runner_wanted_.load(std::memory_order_relaxed)) [[unlikely]] before_run(w);
    idle_end(index, w.idle_from);
    host_.execute(op);
  }
  ts = ThreadState{};
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

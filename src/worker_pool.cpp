// src/worker_pool.cpp
#include "worker_pool.hpp"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
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
constexpr int kPauseRounds = 32;
// Most ops a worker takes from the queue at once.
constexpr std::int64_t kMaxBatch = 16;
// Slots of a fifo queue's ring at first (a power of two): the default
// in-flight bound's worth of ready ops fits without growing.
constexpr std::size_t kFifoInitial = 4096;
static_assert((kFifoInitial & (kFifoInitial - 1)) == 0, "the ring's index is masked: a power of two");
// Keeping what a delivery made ready (WorkerPool::Keep): at most this long,
// and only while such ops averaged under kKeepOpNs; one delivery in
// kKeepProbe is kept anyway.
constexpr std::int64_t kKeepNs = 500'000;
constexpr std::int64_t kKeepOpNs = 20'000;
constexpr std::uint32_t kKeepProbe = 16;
static_assert((kKeepProbe & (kKeepProbe - 1)) == 0, "kKeepProbe is used as a mask: a power of two");
/// Bumps a futex word and wakes every thread waiting on it with a raw futex
/// wait (std::atomic::notify_* counts its own waiters and would not see them).
void bump_and_wake_all(std::atomic<std::uint32_t>& word) noexcept {
  word.fetch_add(1, std::memory_order_seq_cst);
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}
}  // namespace

/// A worker that waited in the ring and delivered what completed there
/// keeps the ops that made ready to itself for a while, instead of waking a
/// sleeper for them and a second one to wait in the ring: mostly coroutines
/// resumed by their I/O, which run for a microsecond or two and submit their
/// next request. The kernel runs a completion's task_work in the thread that
/// submitted the request, so requests submitted by the worker that then
/// waits in the ring cost one wake-up per batch of completions; spread over
/// two workers they cost one per worker and a wake-up of the ring's waiter
/// by the other's task_work, most of them cross-core interrupts. Measured on
/// this project's 2-core VM, 4 KiB O_DIRECT reads through 128 coroutines,
/// 2 s runs beside fio: 6,600-8,100 rescheduling and call interrupts per run
/// before, 300-2,600 kept; IOPS 0.84-1.02 of fio's before, 0.95-1.19 kept.
/// The keep ends when the worker runs out of work, or at the first op
/// boundary after kKeepNs (what is still queued then goes to a sleeper), and
/// is not started while kept ops have lately averaged over kKeepOpNs (one
/// delivery in kKeepProbe is kept anyway, to follow the average): work made
/// ready in bulk then spreads over the workers at once, as before. The cost
/// where it misjudges: a second core idle for up to kKeepNs per delivery.
/// Meanwhile the requests this worker submits have no waiter in the ring;
/// the reaper's watchdog tick covers a keep that ends in a long op.
struct WorkerPool::Keep {
  std::int64_t since = 0;  ///< when it started (0: not keeping)
  std::int64_t ops = 0;    ///< ops run since
};

void WorkerPool::end_keep(Keep& keep, std::int64_t now) noexcept {
  if (keep.ops > 0) {
    // Clamped: one keep stretched by a preemption moves the average by
    // half the bound at most.
    const std::int64_t per_op = std::min((now - keep.since) / keep.ops, 2 * kKeepOpNs);
    const std::int64_t avg = kept_op_ns_.load(std::memory_order_relaxed);
    // Racy updates may lose a sample: a hint.
    kept_op_ns_.store(avg < 0 ? per_op : avg + (per_op - avg) / 4, std::memory_order_relaxed);
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
  // A new thread starts on the idlest CPU, which is the same one for every
  // worker of a pool (the creator's is busy, and each new worker sleeps at
  // once), so all of them last ran there. Woken by the first pushes, they
  // went back there together while the creator's CPU, freed by a throttled
  // pusher soon after, stayed idle for ms: the kernel skips pulling work to
  // a CPU that was busy until just then, and moves a thread that ran
  // recently only at a later balancing tick (perf sched, W6 on 2 CPUs: both
  // workers on one CPU for the first 1-8 ms of about half the runs, the
  // other idle). Here worker i moves to the i-th CPU after its creator's,
  // among those it may use, and at once gets its whole mask back: it is
  // not pinned, it only last ran (and so is woken first) on a CPU of its
  // own. Best effort: where the calls fail (a seccomp filter, a mask
  // changed meanwhile) the worker runs where it started.
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

void WorkerPool::enqueue(OpRecord* op) {
  lock_.lock();
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
  // The epoch first: a worker about to wait in the ring checks it after it
  // set ring_waiting_ (seq_cst both sides), so either it sees the bump and
  // does not wait, or this sees it waiting and wakes it through its word.
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  // The ring's holder only when no other worker sleeps: waking a sleeper
  // instead leaves the ring with its waiter, where the next completion wakes it.
  if (ring_waiting_.load(std::memory_order_seq_cst) && sleepers_.load(std::memory_order_seq_cst) <= 1 &&
      ring_waiting_.exchange(false, std::memory_order_seq_cst)) {
    wake_ring();
    return;
  }
  epoch_.notify_one();
}

void WorkerPool::wake_ring() noexcept {
  // The holder's wait is a FUTEX_WAIT request in its ring.
  bump_and_wake_all(ring_word_);
}

bool WorkerPool::attach_ring(IdleRing* ring) noexcept {
  IdleRing* expected = nullptr;
  return ring != nullptr && ring_.compare_exchange_strong(expected, ring, std::memory_order_seq_cst);
}

void WorkerPool::detach_ring(IdleRing* ring) noexcept {
  IdleRing* expected = ring;
  if (!ring_.compare_exchange_strong(expected, nullptr, std::memory_order_seq_cst)) return;
  // Dekker with claim_ring(): this store of ring_ then the load of
  // ring_users_, there the increment then the load of ring_.
  while (ring_users_.load(std::memory_order_seq_cst) != 0) {
    if (ring_waiting_.exchange(false, std::memory_order_seq_cst)) wake_ring();
    std::this_thread::yield();
  }
}

IdleRing* WorkerPool::claim_ring() noexcept {
  if (ring_.load(std::memory_order_relaxed) == nullptr) return nullptr;
  int expected = 0;
  if (!ring_users_.compare_exchange_strong(expected, 1, std::memory_order_seq_cst)) return nullptr;  // held
  IdleRing* ring = ring_.load(std::memory_order_seq_cst);
  if (ring == nullptr) ring_users_.store(0, std::memory_order_seq_cst);
  return ring;
}

void WorkerPool::want_ring_waiter() noexcept {
  if (ring_.load(std::memory_order_relaxed) == nullptr) return;
  // One of this pool's workers submitted: it is about to go idle (and wait
  // in the ring itself) or to take another op (and wake a sleeper first).
  // A wake-up here would cost a second thread per request.
  if (t_state.pool == this) {
    if (!ring_wanted_.load(std::memory_order_relaxed)) ring_wanted_.store(true, std::memory_order_relaxed);
    return;
  }
  wake_for_ring();
}

void WorkerPool::wake_for_ring() noexcept {
  // Dekker with the idle path: there sleepers_ is raised before the look at
  // the ring's pending(); here the requests were counted before this fence.
  // A worker that looked too early is counted here and woken; the woken one
  // finds the requests pending and waits in the ring.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (ring_waiting_.load(std::memory_order_relaxed) || sleepers_.load(std::memory_order_relaxed) == 0) return;
  wake_one();
}

bool WorkerPool::ring_says(bool (IdleRing::*what)() const noexcept) noexcept {
  if (ring_.load(std::memory_order_relaxed) == nullptr) return false;
  IdleRing* ring = claim_ring();  // held while looked at: detach_ring() waits for the look
  if (ring == nullptr) return false;
  const bool yes = (ring->*what)();
  ring_users_.store(0, std::memory_order_seq_cst);
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
    ts.ahead_until = EngineCore::now_ns() + EngineCore::kAheadNs;
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
  std::uint32_t keep_probe = 0;
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
        // Spin for the next op, unless requests are in flight in a ring
        // nobody waits in: then wait there at once, where their completion
        // wakes this thread (spinning, it would steal the core that runs it).
        if (may_spin && !ring_says(&IdleRing::pending)) op = spin();
        may_spin = true;
      }
      if (op == nullptr) {
        const std::uint32_t epoch = epoch_.load(std::memory_order_seq_cst);
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        // An attached ring (detail::IdleRing): this worker waits in it if no
        // other does and requests are in flight there, so the completion it
        // waits for wakes this thread. With none in flight it sleeps on its
        // futex: in the ring, CQEs that submitters post and reap themselves
        // (cached reads, completed during their submit) would wake it each
        // time. A submit that leaves requests in flight brings a sleeper in
        // (want_ring_waiter()). Dekker with wake_for_ring(): sleepers_ above,
        // then the look at pending() (fenced inside).
        IdleRing* ring = claim_ring();
        if (ring != nullptr && !ring->pending()) {
          ring_users_.store(0, std::memory_order_seq_cst);
          ring = nullptr;
        }
        std::uint32_t word = 0;
        if (ring != nullptr) {
          ring_wanted_.store(false, std::memory_order_relaxed);  // this worker is the waiter
          word = ring_word_.load(std::memory_order_seq_cst);
          ring_waiting_.store(true, std::memory_order_seq_cst);
        }
        op = try_pop();
        const bool stop = op == nullptr && stop_.load(std::memory_order_seq_cst);
        bool waited_in_ring = false;
        if (op == nullptr && !stop) {
          core_.worker_idle();
          if (ring == nullptr) {
            epoch_.wait(epoch, std::memory_order_seq_cst);
          } else if (epoch_.load(std::memory_order_seq_cst) == epoch) {
            ring->wait(ring_word_, word);
            waited_in_ring = true;
          }
        }
        if (ring != nullptr) {
          ring_waiting_.store(false, std::memory_order_seq_cst);
          sleepers_.fetch_sub(1, std::memory_order_seq_cst);
          // Deliver what came as a worker that is about to look at the
          // queue: what the deliveries enqueue wakes nobody (this thread
          // takes it next), and more than it takes brings a sleeper in.
          if (waited_in_ring) {
            spinning_.fetch_add(1, std::memory_order_seq_cst);
            ring->deliver();
            // Inside the queue's lock, as in try_pop(): an op another thread
            // queued meanwhile (reading this thread as spinning, so waking
            // nobody) is then counted in size_ below.
            lock_.lock();
            spinning_.fetch_sub(1, std::memory_order_relaxed);
            lock_.unlock();
          }
          ring_users_.store(0, std::memory_order_seq_cst);
          const std::int64_t kept_avg = kept_op_ns_.load(std::memory_order_relaxed);
          // Kept ops that averaged long are kept again one delivery in
          // kKeepProbe, so that the average follows the ops as they change.
          if (waited_in_ring && size_.load(std::memory_order_relaxed) > 0 &&
              (kept_avg < kKeepOpNs || (++keep_probe & (kKeepProbe - 1)) == 0)) {
            keep.since = EngineCore::now_ns();  // Keep: run it here, for now
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
      if (now - keep.since <= kKeepNs) {
        ++keep.ops;
      } else {
        end_keep(keep, now);
        wake_if_queued(0);
      }
    }
    // Requests this worker submitted wait for a waiter in the ring, and it
    // stays busy: bring a sleeper in for them (keeping: it waits there
    // itself when the keep ends, which is soon).
    if (keep.since == 0 && ring_wanted_.load(std::memory_order_relaxed) &&
        ring_wanted_.exchange(false, std::memory_order_relaxed)) {
      wake_for_ring();
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
    // Taking an op, it stops spinning inside the queue's lock: an enqueue()
    // that read the count after this thread had left with the first of two
    // ops queued together woke nobody for the second, which waited in the
    // queue beside a sleeping worker until this one came back for it (for
    // as long as the first op ran). Now that enqueue() either comes first,
    // and its op is seen below, or sees the spinner gone and wakes a sleeper.
    if (size_.load(std::memory_order_relaxed) > 0) op = try_pop(/*spinning=*/true);
    // A completion came for the ring nobody waits in: go and deliver it.
    if (op == nullptr && ring_says(&IdleRing::ready)) break;
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
    // Dekker with the ring's holder: it sets ring_waiting_ then reads stop_.
    if (ring_waiting_.exchange(false, std::memory_order_seq_cst)) wake_ring();
  }
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

}  // namespace ordo::detail

// io/uring_backend.cpp - the io_uring backend of ordo::io::Reactor. Internal;
// see io/backends.hpp.
//
// Any thread submits: requests go on a lock-free stack, and one thread at a
// time (flushing_) preps them and enters the kernel for the whole batch. One
// reaper thread delivers completions, bookkeeping only; a submitter delivers
// what the kernel completed during its own io_uring_enter, and sends and
// cached reads are first tried as direct syscalls on the submitting thread.
// Idle CPU workers may wait in the ring themselves (detail::IdleTask). A
// request is delivered once every CQE it is owed has come; shutdown cancels
// everything, and the reaper leaves when sqes_ and requests_ are both zero.
//
// The design, and why each part is there: docs/io.md, "Inside the backends".
#include <fcntl.h>
#include <linux/futex.h>
#include <liburing.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "backends.hpp"
#include "keep_policy.hpp"
#include "ordo/detail/extension.hpp"
#include "ordo/engine.hpp"

namespace ordo::io::detail {
namespace {

enum Tag : std::uint64_t {
  kTagOp = 0,        ///< the request's own CQE
  kTagTimeout = 1,   ///< its linked timeout
  kTagCancel = 2,    ///< a cancel attempt
  kTagRejected = 3,  ///< a NOP standing in for a request submitted during shutdown
  kTagInternal = 4,  ///< no request: the shutdown cancel-all
  kTagFutex = 5,     ///< no request: the ring holder's FUTEX_WAIT (IdleTask::wait)
};
constexpr std::uint64_t kTagMask = 7;
static_assert(alignof(Request) >= 8, "user_data tags need 8-byte aligned requests");

constexpr std::uint32_t kFlagTimedOut = 1;  ///< backend_flags: the linked timeout fired

// IORING_OP_FUTEX_WAIT (Linux 6.7; liburing 2.3's headers predate it) and
// the futex2 flags of its SQE: a private 32-bit futex, any wake-up bit.
constexpr std::uint8_t kOpFutexWait = 51;
constexpr std::uint32_t kFutex2SizeU32 = 0x02;
constexpr std::uint32_t kFutex2Private = 128;
constexpr std::uint64_t kFutexBitsetAny = 0xffffffffULL;

/// A pending cancel attempt (cancels are rare: a small allocation is fine).
struct CancelNode {
  Request* target;  ///< null: cancel everything (shutdown)
  CancelNode* next;
};

__kernel_timespec to_timespec(std::int64_t ns) {
  __kernel_timespec ts{};
  ts.tv_sec = ns / 1'000'000'000;
  ts.tv_nsec = ns % 1'000'000'000;
  return ts;
}

class UringBackend final : public BackendImpl, public ordo::detail::IdleTask {
 public:
  UringBackend() = default;
  UringBackend(const UringBackend&) = delete;
  UringBackend& operator=(const UringBackend&) = delete;

  /// Sets up the ring; returns an empty string or why it cannot be used.
  std::string init(const IoOptions& options, Engine* engine) {
    const unsigned entries = options.entries == 0 ? 256 : options.entries;
    read_inline_ = options.cached_reads_inline;
    bool futex_wait_ok = false;
    // Cooperative task running: no interrupt of a running submitter per
    // completion (IoOptions::cooperative_taskrun). A kernel older than 5.19
    // refuses the flag with EINVAL: the ring is set up without it.
    const bool coop = options.cooperative_taskrun && !options.sqpoll;
    io_uring_params params{};
    auto setup = [&](bool with_coop) {
      params = io_uring_params{};
      params.flags = IORING_SETUP_CQSIZE | (with_coop ? IORING_SETUP_COOP_TASKRUN : 0U);
      params.cq_entries = entries * 4;
      if (options.sqpoll) {
        params.flags |= IORING_SETUP_SQPOLL;
        params.sq_thread_idle = 50;
      }
      return io_uring_queue_init_params(entries, &ring_, &params);
    };
    int rc = setup(coop);
    coop_ = coop && rc >= 0;
    if (rc == -EINVAL && coop) rc = setup(false);
    if (rc < 0) {
      std::string why = std::string("io_uring_queue_init: ") + std::strerror(-rc);
      if (rc == -EPERM || rc == -ENOSYS) why += " (io_uring disabled by the kernel or a seccomp filter)";
      return why;
    }
    if ((params.features & IORING_FEAT_NODROP) == 0) {
      io_uring_queue_exit(&ring_);
      return "io_uring without IORING_FEAT_NODROP (kernel older than 5.5)";
    }
    if (io_uring_probe* probe = io_uring_get_probe_ring(&ring_); probe != nullptr) {
      static constexpr int kNeeded[] = {IORING_OP_OPENAT,  IORING_OP_CLOSE,        IORING_OP_READ,
                                        IORING_OP_WRITE,   IORING_OP_READV,        IORING_OP_WRITEV,
                                        IORING_OP_FSYNC,   IORING_OP_STATX,        IORING_OP_ACCEPT,
                                        IORING_OP_CONNECT, IORING_OP_RECV,         IORING_OP_SEND,
                                        IORING_OP_TIMEOUT, IORING_OP_LINK_TIMEOUT, IORING_OP_ASYNC_CANCEL};
      for (int op : kNeeded) {
        if (!io_uring_opcode_supported(probe, op)) {
          io_uring_free_probe(probe);
          io_uring_queue_exit(&ring_);
          return "io_uring lacks opcode " + std::to_string(op) + " (kernel too old)";
        }
      }
      futex_wait_ok = io_uring_opcode_supported(probe, kOpFutexWait) != 0;
      // File-system opcodes (Linux 5.11 / 5.15): without them the reactor's
      // blocking threads run those requests (supports()).
      fs_ops_ = (io_uring_opcode_supported(probe, IORING_OP_MKDIRAT) != 0 ? kFsMkdir : 0U) |
                (io_uring_opcode_supported(probe, IORING_OP_UNLINKAT) != 0 ? kFsUnlink : 0U) |
                (io_uring_opcode_supported(probe, IORING_OP_RENAMEAT) != 0 ? kFsRename : 0U);
      io_uring_free_probe(probe);
    }
    ring_ready_ = true;
    // engine_ is set before the reaper starts (it reads it); a worker may
    // wait in the ring at once (the ring is ready).
    if (options.idle_workers_reap && futex_wait_ok && !options.sqpoll && engine != nullptr &&
        ordo::detail::EngineExtension::attach_idle_task(*engine, this)) {
      engine_ = engine;
      attached_.store(true, std::memory_order_relaxed);
    }
    reaper_ = std::thread([this] { reap(); });
    return {};
  }

  ~UringBackend() override {
    shutdown();
  }

  [[nodiscard]] bool cooperative_taskrun() const noexcept override { return coop_; }

  [[nodiscard]] bool supports(OpCode code) const noexcept override {
    switch (code) {
      case OpCode::mkdirat: return (fs_ops_ & kFsMkdir) != 0;
      case OpCode::unlinkat: return (fs_ops_ & kFsUnlink) != 0;
      case OpCode::renameat: return (fs_ops_ & kFsRename) != 0;
      case OpCode::list_dir:
      case OpCode::read_dir: return false;  // no getdents opcode
      default: return true;
    }
  }

  void submit(Request* r) noexcept override {
    const Caller caller(callers_);
    requests_.fetch_add(1, std::memory_order_seq_cst);
    r->backend_flags &= ~kDirect;
    if (!supports(r->code)) {  // the Reactor routes these elsewhere: a bug if one comes here
      r->res = -EOPNOTSUPP;
      const ordo::CompletionThread scope;
      drop(r);
      return;
    }
    const bool batching = t_batch_ == this;
    if (!batching && read_inline_ && (r->code == OpCode::read || r->code == OpCode::readv) && read_now(r)) return;
    if (!batching && r->code == OpCode::send && send_now(r)) {
      // The send's return to user space ran the task_work of this thread's
      // waiting requests (a recv whose data came): deliver what it posted
      // here, as a submit through the ring would, rather than leave it to
      // the reaper (a wake-up and a post to a worker per completion).
      reap_inline();
      return;
    }
    Request* head = incoming_.load(std::memory_order_relaxed);
    do {
      r->backend_next = head;
    } while (!incoming_.compare_exchange_weak(head, r, std::memory_order_release, std::memory_order_relaxed));
    // Submitted by a delivery in reap_ready (the next push_read launched on
    // the reaper, an exact transfer's next part): it flushes once at the end.
    if (batching) return;
    // Not in flight for wanted() until this call has reaped what the
    // kernel completed during it (see wanted()).
    submitting_.fetch_add(1, std::memory_order_seq_cst);
    flush();
    reap_inline();
    submitting_.fetch_sub(1, std::memory_order_seq_cst);
    wake_reaper_if_needed();
    want_waiter_if_needed();
  }

  void cancel(Request* r) noexcept override {
    const Caller caller(callers_);
    push_cancel(new (std::nothrow) CancelNode{r, nullptr}, r);
    flush();
    wake_reaper_if_needed();
  }

  void shutdown() noexcept override {
    if (!ring_ready_ || shut_down_) return;
    shut_down_ = true;
    // No worker waits in the ring from here on: CQEs are the reaper's alone.
    if (attached_.load(std::memory_order_relaxed)) {
      ordo::detail::EngineExtension::detach_idle_task(*engine_, this);
      attached_.store(false, std::memory_order_seq_cst);
      wake_reaper();  // back to the reaper's own parking (see park())
    }
    stopping_.store(true, std::memory_order_seq_cst);
    // Submits already under way may still reap inline; later ones see
    // stopping_ and leave every CQE to the reaper. Only once the former are
    // done does the cancel-all go in, so its CQE, the one the reaper needs
    // to see before it can exit, cannot be taken by anyone else: a reaper
    // asleep in the kernel is woken by it.
    while (callers_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
    push_cancel(&cancel_all_, nullptr);
    flush();
    wake_reaper();  // parked or not: it must see stopping_
    reaper_.join();
    // A submit or cancel still returning from its flush may touch the ring:
    // wait for it (no new ones may start: the contract ends them here).
    while (callers_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
    // A request submitted while the reaper was exiting: delivered here, cancelled.
    {
      const ordo::CompletionThread scope;
      for (Request* r = pending_head_; r != nullptr;) {
        Request* next = r->backend_next;
        r->res = -ECANCELED;
        drop(r);
        r = next;
      }
      for (Request* r = incoming_.exchange(nullptr); r != nullptr;) {
        Request* next = r->backend_next;
        r->res = -ECANCELED;
        drop(r);
        r = next;
      }
      for (CancelNode* c = cancels_.exchange(nullptr); c != nullptr;) {
        CancelNode* next = c->next;
        if (c->target != nullptr) drop(c->target);
        if (c != &cancel_all_) delete c;
        c = next;
      }
    }
    io_uring_queue_exit(&ring_);
  }

  [[nodiscard]] Backend kind() const noexcept override { return Backend::uring; }

  [[nodiscard]] std::size_t in_flight() const noexcept override {
    return static_cast<std::size_t>(requests_.load(std::memory_order_relaxed) +
                                    internal_.load(std::memory_order_relaxed));
  }

  // detail::IdleTask. wait() and run() are called by the engine's one
  // worker that holds the task (the ring's waiter); the rest by any thread.

  void wait() noexcept override {
    const Caller caller(callers_);
    // The reaper parks while this is set (and is woken by run() if work is
    // left in flight then); submits leave the completions to this worker.
    in_ring_.store(true, std::memory_order_seq_cst);
    // From here until the looks below are over, other threads leave this
    // wait's FUTEX_WAIT CQE in the queue (reap_ready).
    waiting_.store(true, std::memory_order_seq_cst);
    // An interrupt() since the last wait() ended ends this one at once.
    const std::uint32_t value = interrupts_seen_;
    if (futex_sqes_.load(std::memory_order_acquire) == 0) {  // counts a wanted one too
      // interrupt() ends this wait by changing interrupts_ and futex-waking
      // it: a FUTEX_WAIT request on it posts a CQE then. One stays armed
      // across waits until a wake-up completes it (or the value had changed:
      // at once). Counted from here (not when prepped): no other wait()
      // writes the value until its CQE is reaped, whoever flushes it meanwhile.
      futex_value_ = value;
      futex_sqes_.fetch_add(1, std::memory_order_seq_cst);
      futex_want_.store(true, std::memory_order_seq_cst);
      flush();
    }
    std::int64_t bound_ns = kHolderBoundNs;
    for (;;) {
      if (interrupts_.load(std::memory_order_seq_cst) != value || cq_nonempty()) break;
      // A CQE posted after the look ends the wait at once (the kernel
      // compares the tail with the head as last advanced), unless another
      // thread consumed it before this one entered the kernel: a submitter
      // reaping inline, or the reaper, taking the FUTEX_WAIT's CQE would
      // leave the engine's call for work unanswered. So they leave that CQE
      // in the queue while waiting_ is set, and the kernel, seeing it there,
      // returns at once. The wait stays bounded as a safety net: from
      // kHolderBoundNs, doubling while the waits end with nothing to do (so
      // an idle process with a request pending rarely wakes; docs/io.md,
      // "Idle cost"), up to kHolderMaxBoundNs. Completions of requests this
      // thread submitted run their task_work here too.
      stats_.worker_waits.fetch_add(1, std::memory_order_relaxed);
      __kernel_timespec bound = to_timespec(bound_ns);
      io_uring_getevents_arg arg{};
      arg.ts = reinterpret_cast<std::uint64_t>(&bound);
      const int rc = io_uring_enter2(static_cast<unsigned>(ring_.ring_fd), 0, 1,
                                     IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG,
                                     reinterpret_cast<sigset_t*>(&arg), sizeof(arg));
      if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY && rc != -ETIME) {
        std::fprintf(stderr, "ordo::io: io_uring_enter (worker wait) failed: %s\n", std::strerror(-rc));
        break;
      }
      bound_ns = rc == -ETIME ? std::min(2 * bound_ns, kHolderMaxBoundNs) : kHolderBoundNs;
    }
    waiting_.store(false, std::memory_order_seq_cst);
    interrupts_seen_ = interrupts_.load(std::memory_order_seq_cst);
  }

  [[nodiscard]] ordo::detail::IdleKeep* run() noexcept override {
    const Caller caller(callers_);
    if (!reaping_.exchange(true, std::memory_order_acquire)) {  // else its holder delivers
      if (cq_nonempty()) {
        const ordo::CompletionThread scope;
        reap_ready(stats_.by_workers);
      }
      reaping_.store(false, std::memory_order_release);
    }
    ring_exits_.fetch_add(1, std::memory_order_relaxed);  // the reaper's watch looks at it (park())
    in_ring_.store(false, std::memory_order_seq_cst);
    wake_reaper_if_needed();  // requests still in flight: the reaper waits for them now
    want_waiter_if_needed();  // and this worker, or a sleeper, the next time it is idle
    return keep_.grant();
  }

  void interrupt() noexcept override {
    // A raw futex wake: std::atomic::notify_* counts its own waiters and
    // would not see the FUTEX_WAIT request.
    interrupts_.fetch_add(1, std::memory_order_seq_cst);
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&interrupts_), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
            nullptr, 0);
  }

  void kept(ordo::detail::IdleKeep& keep) noexcept override { keep_.kept(keep); }

  /// Requests past their submit call and not yet reaped (the armed
  /// FUTEX_WAIT aside), or CQEs waiting. A request counts once the submit()
  /// that flushed it has returned: one the kernel completes during its
  /// submit (a read from the page cache) is reaped by its submitter right
  /// after, and never needs a worker in the ring. Every submit() in progress
  /// discounts one SQE: a hint, exact when submits do not overlap.
  [[nodiscard]] bool wanted() const noexcept override {
    return in_kernel() > submitting_.load(std::memory_order_relaxed) || cq_nonempty();
  }

  [[nodiscard]] bool workers_reap() const noexcept override { return attached_.load(std::memory_order_relaxed); }

  [[nodiscard]] ReactorStats stats() const noexcept override {
    return {stats_.by_reaper.load(std::memory_order_relaxed), stats_.by_workers.load(std::memory_order_relaxed),
            stats_.by_submitters.load(std::memory_order_relaxed), stats_.worker_waits.load(std::memory_order_relaxed),
            stats_.direct.load(std::memory_order_relaxed), stats_.reaper_wakeups.load(std::memory_order_relaxed)};
  }

 private:
  void push_cancel(CancelNode* node, Request* r) noexcept {
    if (node == nullptr) {
      // Out of memory for a cancel: the attempt fails (the op completes on its own).
      if (r != nullptr) drop(r);
      return;
    }
    CancelNode* head = cancels_.load(std::memory_order_relaxed);
    do {
      node->next = head;
    } while (!cancels_.compare_exchange_weak(head, node, std::memory_order_release, std::memory_order_relaxed));
  }

  /// A send tried at once with a plain non-blocking syscall on the calling
  /// thread, as Asio's reactor does, when nothing submitted earlier is still
  /// waiting to enter the kernel (a request another thread is flushing right
  /// now, or one that found the queue full: this send must not overtake it).
  /// io_uring's own first attempt is that same non-blocking send, made inside
  /// io_uring_enter; doing it here spares the SQE, the CQE and above all the
  /// wake-up of the reaper that every CQE posted during io_uring_enter causes
  /// while it waits in the kernel (docs/io.md, "Inside the backends").
  /// Returns false when the socket's buffer is full (EAGAIN): the send then
  /// goes through the ring and waits there. A send that moved some bytes or
  /// failed is delivered here, in a CompletionThread scope, as the submit
  /// contract allows.
  bool send_now(Request* r) noexcept {
    if (stopping_.load(std::memory_order_seq_cst) || flushing_.load(std::memory_order_seq_cst) ||
        incoming_.load(std::memory_order_seq_cst) != nullptr || has_pending_.load(std::memory_order_seq_cst)) {
      return false;
    }
    ssize_t n = 0;
    do {
      n = ::send(r->fd, r->addr, static_cast<std::size_t>(r->len),
                 static_cast<int>(r->op_flags) | MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    deliver_direct(r, n < 0 ? -static_cast<std::int64_t>(errno) : static_cast<std::int64_t>(n));
    return true;
  }

  /// A read the page cache serves whole, made on the calling thread (see the
  /// top of this file and read_cached_now) and delivered here, in a
  /// CompletionThread scope. False: the ring does it (and reports the error
  /// it meets). A cancel that finds it delivered here fails.
  bool read_now(Request* r) noexcept {
    if (stopping_.load(std::memory_order_relaxed)) return false;
    const std::int64_t n = read_cached_now(*r);
    if (n < 0) return false;
    deliver_direct(r, n);
    return true;
  }

  /// Delivers a request that send_now or read_now completed on the calling
  /// thread, in a CompletionThread scope, as the submit contract allows.
  void deliver_direct(Request* r, std::int64_t res) noexcept {
    r->res = res;
    r->backend_flags |= kDirect;
    stats_.direct.fetch_add(1, std::memory_order_relaxed);
    const ordo::CompletionThread scope;
    drop(r);
  }

  /// Drops one of the request's references; the last one delivers it.
  void drop(Request* r) noexcept {
    if (r->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    if (r->code == OpCode::timer && r->res == -ETIME) r->res = 0;  // a timer that expired succeeded
    if ((r->backend_flags & kFlagTimedOut) != 0 && r->res == -ECANCELED) r->res = -ETIMEDOUT;
    requests_.fetch_sub(1, std::memory_order_release);
    deliver(r);
  }

  io_uring_sqe* get_sqe() noexcept {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {
      submit_sqes();  // the queue is full: hand it to the kernel, then retry
      sqe = io_uring_get_sqe(&ring_);
    }
    return sqe;
  }

  /// Preps the SQE(s) of one request. Returns false if the queue had no room
  /// (nothing was prepped).
  bool prep(Request* r) noexcept {
    const bool stopping = stopping_.load(std::memory_order_seq_cst);
    const bool linked = !stopping && r->deadline_ns > 0 && r->code != OpCode::timer;
    if (io_uring_sq_space_left(&ring_) < (linked ? 2U : 1U)) submit_sqes();
    if (io_uring_sq_space_left(&ring_) < (linked ? 2U : 1U)) return false;
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    const auto addr = reinterpret_cast<std::uint64_t>(r);
    if (stopping) {
      io_uring_prep_nop(sqe);
      io_uring_sqe_set_data64(sqe, addr | kTagRejected);
      sqes_.fetch_add(1, std::memory_order_release);
      return true;
    }
    // Read the request before its SQE is counted, as the reads above are:
    // after that, its completion may come through the kernel (where
    // ThreadSanitizer sees no ordering) and the request be reused.
    const bool file_rw =
        r->code == OpCode::read || r->code == OpCode::write || r->code == OpCode::readv || r->code == OpCode::writev;
    const auto off = r->off == kNoOffset ? static_cast<__u64>(-1) : static_cast<__u64>(r->off);
    const auto len = static_cast<unsigned>(r->len);
    switch (r->code) {
      case OpCode::nop:
        io_uring_prep_nop(sqe);
        break;
      case OpCode::openat:
        io_uring_prep_openat(sqe, r->fd, r->path.c_str(), static_cast<int>(r->op_flags), r->mode);
        break;
      case OpCode::mkdirat:
        io_uring_prep_mkdirat(sqe, r->fd, r->path.c_str(), static_cast<mode_t>(r->mode));
        break;
      case OpCode::unlinkat:
        io_uring_prep_unlinkat(sqe, r->fd, r->path.c_str(), static_cast<int>(r->op_flags));
        break;
      case OpCode::renameat:
        io_uring_prep_renameat(sqe, r->fd, r->path.c_str(), r->fd2, r->path2.c_str(), r->op_flags);
        break;
      case OpCode::list_dir:  // never submitted here (supports())
      case OpCode::read_dir:
        io_uring_prep_nop(sqe);
        break;
      case OpCode::close:
        io_uring_prep_close(sqe, r->fd);
        break;
      case OpCode::read:
        io_uring_prep_read(sqe, r->fd, r->addr, len, off);
        break;
      case OpCode::write:
        io_uring_prep_write(sqe, r->fd, r->addr, len, off);
        break;
      case OpCode::readv:
        io_uring_prep_readv(sqe, r->fd, static_cast<const iovec*>(r->addr), len, off);
        break;
      case OpCode::writev:
        io_uring_prep_writev(sqe, r->fd, static_cast<const iovec*>(r->addr), len, off);
        break;
      case OpCode::fsync:
        io_uring_prep_fsync(sqe, r->fd, (r->op_flags & kFsyncDatasync) != 0 ? IORING_FSYNC_DATASYNC : 0);
        break;
      case OpCode::statx:
        io_uring_prep_statx(sqe, r->fd, r->path.c_str(), static_cast<int>(r->op_flags), r->mode,
                            static_cast<struct statx*>(r->addr));
        break;
      case OpCode::accept:
        io_uring_prep_accept(sqe, r->fd, nullptr, nullptr, SOCK_CLOEXEC);
        break;
      case OpCode::connect:
        io_uring_prep_connect(sqe, r->fd, reinterpret_cast<const sockaddr*>(&r->sa), r->sa_len);
        break;
      case OpCode::recv:
        io_uring_prep_recv(sqe, r->fd, r->addr, r->len, static_cast<int>(r->op_flags));
        break;
      case OpCode::send:
        io_uring_prep_send(sqe, r->fd, r->addr, r->len, static_cast<int>(r->op_flags | MSG_NOSIGNAL));
        break;
      case OpCode::timer:
        r->backend_ts = to_timespec(r->deadline_ns);
        // CLOCK_MONOTONIC is the kernel's default clock here, and steady_clock's.
        io_uring_prep_timeout(sqe, &r->backend_ts, 0, (r->op_flags & kTimerAbsolute) != 0 ? IORING_TIMEOUT_ABS : 0);
        break;
    }
    io_uring_sqe_set_data64(sqe, addr | kTagOp);
    sqes_.fetch_add(1, std::memory_order_release);
    if (linked) {
      sqe->flags |= IOSQE_IO_LINK;
      r->backend_ts = to_timespec(r->deadline_ns);
      r->refs.fetch_add(1, std::memory_order_relaxed);  // the timeout's CQE is owed too
      io_uring_sqe* ts = io_uring_get_sqe(&ring_);
      io_uring_prep_link_timeout(ts, &r->backend_ts, 0);
      io_uring_sqe_set_data64(ts, addr | kTagTimeout);
      sqes_.fetch_add(1, std::memory_order_release);
    }
    if (file_rw) {
      ++rw_unsubmitted_;
      // Device-bound: enter the kernel every two SQEs, so that no block
      // plug holds the requests back (see submit_sqes()).
      if (device_bound_ && io_uring_sq_ready(&ring_) >= 2) submit_sqes();
    }
    return true;
  }

  /// Enters the kernel with every prepped SQE (flusher only) and learns
  /// from it how to batch the next ones: when few of the reads and writes
  /// of a call complete during it, they reached a device, where a big batch
  /// plugs the block layer and delays each one; the next ones then go in
  /// pairs (device_bound_). Why: docs/io.md, "Inside the backends".
  void submit_sqes() noexcept {
    const unsigned rw = std::exchange(rw_unsubmitted_, 0U);
    // The CQ tail is written by the kernel only: reading it is safe on any thread.
    const unsigned tail_before = io_uring_smp_load_acquire(ring_.cq.ktail);
    io_uring_submit(&ring_);
    if (rw > 0) {
      const unsigned posted = io_uring_smp_load_acquire(ring_.cq.ktail) - tail_before;
      device_bound_ = 2 * posted < rw;
    }
  }

  /// Drains both stacks into the submission queue and enters the kernel.
  /// One flusher at a time; others leave their requests for it.
  void flush() noexcept {
    if (flushing_.exchange(true, std::memory_order_acq_rel)) return;
    for (;;) {
      // Requests, oldest first: those left over by an earlier flush, then
      // the stack reversed.
      Request* list = incoming_.exchange(nullptr, std::memory_order_acquire);
      Request* fifo = nullptr;
      while (list != nullptr) {
        Request* next = list->backend_next;
        list->backend_next = fifo;
        fifo = list;
        list = next;
      }
      if (pending_tail_ != nullptr) {
        pending_tail_->backend_next = fifo;
        fifo = pending_head_;
      }
      std::size_t prepped = 0;
      while (fifo != nullptr) {
        Request* next = fifo->backend_next;
        if (!prep(fifo)) break;  // no room: the rest wait for the next flush, in order
        ++prepped;
        fifo = next;
      }
      keep_pending(fifo);
      // Before the cancels: the shutdown's cancel-all then also ends it.
      if (futex_want_.exchange(false, std::memory_order_acquire)) prep_futex_wait();
      CancelNode* cancels = cancels_.exchange(nullptr, std::memory_order_acquire);
      while (cancels != nullptr) {
        CancelNode* next = cancels->next;
        io_uring_sqe* sqe = get_sqe();
        if (sqe == nullptr) {  // no room: keep the rest for the next flush
          while (cancels != nullptr) {
            next = cancels->next;
            push_cancel(cancels, cancels->target);
            cancels = next;
          }
          break;
        }
        if (cancels->target != nullptr) {
          io_uring_prep_cancel64(sqe, reinterpret_cast<std::uint64_t>(cancels->target) | kTagOp, 0);
          io_uring_sqe_set_data64(sqe, reinterpret_cast<std::uint64_t>(cancels->target) | kTagCancel);
        } else {
          io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);
          io_uring_sqe_set_data64(sqe, kTagInternal);
          internal_.fetch_add(1, std::memory_order_relaxed);
        }
        sqes_.fetch_add(1, std::memory_order_release);
        if (cancels != &cancel_all_) delete cancels;
        cancels = next;
      }
      if (io_uring_sq_ready(&ring_) > 0) submit_sqes();
      flushing_.store(false, std::memory_order_seq_cst);
      if (incoming_.load(std::memory_order_seq_cst) == nullptr && cancels_.load(std::memory_order_seq_cst) == nullptr &&
          !futex_want_.load(std::memory_order_seq_cst)) {
        return;
      }
      // Requests left over that found no room: the reaper retries after reaping.
      if (fifo != nullptr && prepped == 0) return;
      if (flushing_.exchange(true, std::memory_order_acq_rel)) return;
    }
  }

  /// The ring holder's FUTEX_WAIT (flusher only). No room: wanted again,
  /// flushed after the next reap (the queue is full of requests in flight).
  void prep_futex_wait() noexcept {
    io_uring_sqe* sqe = get_sqe();
    if (sqe == nullptr) {
      futex_want_.store(true, std::memory_order_release);
      return;
    }
    std::memset(sqe, 0, sizeof(*sqe));
    sqe->opcode = kOpFutexWait;
    sqe->fd = static_cast<std::int32_t>(kFutex2SizeU32 | kFutex2Private);
    sqe->addr = reinterpret_cast<std::uint64_t>(&interrupts_);
    sqe->off = futex_value_;  // addr2: the expected value
    sqe->addr3 = kFutexBitsetAny;
    io_uring_sqe_set_data64(sqe, kTagFutex);
    sqes_.fetch_add(1, std::memory_order_release);
  }

  /// A CQE not yet consumed. Atomic loads of both indices: any thread.
  /// SQEs submitted and not reaped, the ring holder's armed FUTEX_WAIT aside.
  [[nodiscard]] std::int64_t in_kernel() const noexcept {
    return sqes_.load(std::memory_order_relaxed) - futex_sqes_.load(std::memory_order_relaxed);
  }

  [[nodiscard]] bool cq_nonempty() const noexcept {
    return io_uring_smp_load_acquire(ring_.cq.ktail) != io_uring_smp_load_acquire(ring_.cq.khead);
  }

  /// Keeps the requests that found no room (flusher only); the reaper
  /// flushes again after reaping while has_pending_ is set.
  void keep_pending(Request* fifo) noexcept {
    pending_head_ = fifo;
    pending_tail_ = fifo;
    while (pending_tail_ != nullptr && pending_tail_->backend_next != nullptr) pending_tail_ = pending_tail_->backend_next;
    has_pending_.store(fifo != nullptr, std::memory_order_release);
  }

  /// Counts a submit/cancel call for the duration of the call.
  struct Caller {
    explicit Caller(std::atomic<int>& n) noexcept : n_(n) { n_.fetch_add(1, std::memory_order_seq_cst); }
    ~Caller() { n_.fetch_sub(1, std::memory_order_seq_cst); }
    Caller(const Caller&) = delete;
    Caller& operator=(const Caller&) = delete;
    std::atomic<int>& n_;
  };


  void handle(const io_uring_cqe* cqe) noexcept {
    // The request fields reach the reaper through the kernel, which the
    // memory model (and ThreadSanitizer) cannot see: the flusher's release
    // increment of sqes_ after prepping each SQE, acquired here per CQE (a
    // CQE seen now was produced after its SQE's increment), carries them.
    (void)sqes_.load(std::memory_order_acquire);
    const std::uint64_t data = io_uring_cqe_get_data64(cqe);
    auto* r = reinterpret_cast<Request*>(data & ~kTagMask);
    switch (data & kTagMask) {
      case kTagOp:
        r->res = cqe->res;
        drop(r);
        break;
      case kTagTimeout:
        if (cqe->res == -ETIME) r->backend_flags |= kFlagTimedOut;
        drop(r);
        break;
      case kTagCancel:
        drop(r);
        break;
      case kTagRejected:
        r->res = -ECANCELED;
        drop(r);
        break;
      case kTagFutex:
        futex_sqes_.fetch_sub(1, std::memory_order_release);  // the next wait arms another
        break;
      default:
        internal_.fetch_sub(1, std::memory_order_relaxed);
        cancel_all_reaped_.store(true, std::memory_order_release);
        break;
    }
  }

  void reap() noexcept {
    const ordo::CompletionThread scope;
    for (;;) {
      // The shutdown cancel-all must have come back too: stopping_ is set
      // before it is submitted, so the counts alone can read zero in between.
      if (stopping_.load(std::memory_order_seq_cst) && cancel_all_reaped_.load(std::memory_order_acquire) &&
          sqes_.load(std::memory_order_acquire) == 0 &&
          requests_.load(std::memory_order_acquire) == 0 && incoming_.load(std::memory_order_acquire) == nullptr &&
          cancels_.load(std::memory_order_acquire) == nullptr) {
        return;
      }
      // Only the holder of reaping_ reads the CQ head (a submitter may be
      // reaping inline): look under the flag, and wait in the kernel without
      // it. The kernel's wait compares the tail with the head as last
      // advanced, so a CQE posted after the look ends the wait at once, and
      // one a submitter took meanwhile just means waiting for the next.
      while (reaping_.exchange(true, std::memory_order_acquire)) std::this_thread::yield();
      // Look again after delivering, or when what was left in the queue for
      // the ring's waiter (reap_ready) is no longer its own.
      bool again = false;
      if (io_uring_cq_ready(&ring_) != 0) again = reap_ready(stats_.by_reaper) > 0 || !waiting_.load(std::memory_order_seq_cst);
      reaping_.store(false, std::memory_order_release);
      if (again) continue;
      if (park()) continue;
      const int rc = io_uring_enter(static_cast<unsigned>(ring_.ring_fd), 0, 1, IORING_ENTER_GETEVENTS, nullptr);
      stats_.reaper_wakeups.fetch_add(1, std::memory_order_relaxed);
      if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
        std::fprintf(stderr, "ordo::io: io_uring_enter (wait) failed: %s\n", std::strerror(-rc));
      }
    }
  }

  /// Nothing in flight: sleep on a futex instead of in io_uring_enter, where
  /// every CQE would wake this thread, including those of requests that the
  /// kernel completed during their submit and the submitter reaped itself
  /// (at QD1 on cached data, every one). A submit that leaves work in flight
  /// wakes it (wake_reaper_if_needed). Returns true if it parked (or found
  /// work on the way): the caller looks again; false: wait in the kernel.
  ///
  /// Attached to an engine's idle workers (IdleTask), the reaper is their
  /// watchdog instead: it parks for a tick at a time while a worker waits in
  /// the ring or nothing is in flight. Requests in flight with no worker in
  /// the ring get one tick's grace (the worker that submitted them is
  /// usually about to go idle and wait in the ring, and a wake-up of this
  /// thread per submit is what the ring saves); still so at the next tick
  /// (every worker busy), the reaper takes the completions over and waits in
  /// the kernel until a worker is in the ring again. Nothing in flight for
  /// kDeepTicks ticks: it parks until a submit wakes it.
  ///
  /// A worker in the ring and no worker left it since the last look (a
  /// pending sleep or recv in an idle process): the tick doubles, up to
  /// kTickNs << kMaxWatchShift, as a long park (kParkedLong) that a worker
  /// leaving the ring with requests in flight ends at once
  /// (wake_reaper_if_needed), so the grace above still starts then. While
  /// workers come and go the tick stays short and parked_ reads kParkedTick:
  /// their exits make no system call for the reaper.
  bool park() noexcept {
    if (stopping_.load(std::memory_order_seq_cst)) return false;  // shutdown: CQEs are the reaper's alone
    if (attached_.load(std::memory_order_seq_cst)) {
      const bool ring_held = in_ring_.load(std::memory_order_seq_cst);
      const bool nothing = idle();
      const std::uint64_t exits = ring_exits_.load(std::memory_order_seq_cst);
      if (!ring_held && !nothing) {
        idle_ticks_ = 0;
        watch_shift_ = 0;
        if (taking_over_) return false;
        if (grace_) {
          grace_ = false;
          taking_over_ = true;
          return false;
        }
        grace_ = true;
      } else {
        grace_ = false;
        taking_over_ = false;
        idle_ticks_ = nothing ? idle_ticks_ + 1 : 0;
        const bool quiet = ring_held && !nothing && exits == seen_exits_;
        watch_shift_ = quiet ? std::min(watch_shift_ + 1, kMaxWatchShift) : 0;
      }
      seen_exits_ = exits;
      if (watch_shift_ > 0) {
        // Handshake with run(): there in_ring_ is cleared (and ring_exits_
        // bumped) before wake_reaper_if_needed's read-modify-write of
        // parked_. Whichever of the two comes second in parked_'s order
        // sees the other's writes (see wake_reaper_if_needed).
        parked_.exchange(kParkedLong, std::memory_order_seq_cst);
        if (in_ring_.load(std::memory_order_relaxed) && ring_exits_.load(std::memory_order_relaxed) == exits) {
          futex_wait(parked_, kParkedLong, kTickNs << watch_shift_);
          stats_.reaper_wakeups.fetch_add(1, std::memory_order_relaxed);
        }
        parked_.store(kAwake, std::memory_order_seq_cst);
        return true;
      }
      if (idle_ticks_ <= kDeepTicks) {
        parked_.store(kParkedTick, std::memory_order_seq_cst);
        futex_wait(parked_, kParkedTick, kTickNs);
        stats_.reaper_wakeups.fetch_add(1, std::memory_order_relaxed);
        parked_.store(kAwake, std::memory_order_seq_cst);
        return true;
      }
    }
    // Handshake with wake_reaper_if_needed: this read-modify-write, then
    // the look at the counts; there the count changes, then a
    // read-modify-write of parked_. If that one comes later in parked_'s
    // order, it reads kParkedDeep and wakes this thread; if earlier, this
    // one synchronizes with it and sees the counts changed.
    parked_.exchange(kParkedDeep, std::memory_order_seq_cst);
    if (!idle()) {
      parked_.store(kAwake, std::memory_order_relaxed);
      // only unflushed work: look again; else wait in the kernel
      return in_kernel() == 0;
    }
    while (parked_.load(std::memory_order_acquire) == kParkedDeep) {
      futex_wait(parked_, kParkedDeep, 0);
      stats_.reaper_wakeups.fetch_add(1, std::memory_order_relaxed);
    }
    idle_ticks_ = 0;
    return true;
  }

  /// Sleeps while `word` holds `value`, at most `ns` nanoseconds (0: no limit).
  static void futex_wait(std::atomic<int>& word, int value, long ns) noexcept {
    timespec limit{ns / 1'000'000'000, ns % 1'000'000'000};
    syscall(SYS_futex, reinterpret_cast<int*>(&word), FUTEX_WAIT_PRIVATE, value, ns > 0 ? &limit : nullptr, nullptr, 0);
  }

  /// Nothing submitted and not reaped, nothing waiting to be submitted.
  /// The ring holder's armed FUTEX_WAIT does not count: it needs no reaper
  /// (its CQE only ends that worker's wait).
  [[nodiscard]] bool idle() const noexcept {
    return in_kernel() == 0 &&
           incoming_.load(std::memory_order_relaxed) == nullptr &&
           cancels_.load(std::memory_order_relaxed) == nullptr && !has_pending_.load(std::memory_order_relaxed) &&
           !stopping_.load(std::memory_order_relaxed);
  }

  /// After a submit or cancel, or a worker's run(): wakes a reaper
  /// parked until further notice, or for long while a worker held the ring
  /// and none holds it now, if work is left in flight (one parked for a
  /// tick looks by itself; see park()).
  void wake_reaper_if_needed() noexcept {
    // A read-modify-write, not a load: the reaper's side of the handshake
    // (park()) is one too, so one of the two sees the other's writes. No
    // fence: ThreadSanitizer follows read-modify-writes, not fences.
    const int parked = parked_.fetch_add(0, std::memory_order_seq_cst);
    if (parked == kAwake || parked == kParkedTick) return;
    if (parked == kParkedLong && in_ring_.load(std::memory_order_relaxed)) return;  // the ring's waiter has them
    if (!idle()) wake_reaper();
  }

  /// After a submit or a worker's run(): requests in flight and no worker
  /// in the ring (idle workers sleep on their futex while nothing is in
  /// flight, see wanted()): the engine brings one there.
  void want_waiter_if_needed() noexcept {
    if (!attached_.load(std::memory_order_seq_cst) || in_ring_.load(std::memory_order_seq_cst) || !wanted()) return;
    ordo::detail::EngineExtension::want_idle_task_runner(*engine_);
  }

  void wake_reaper() noexcept {
    if (parked_.exchange(kAwake, std::memory_order_seq_cst) != kAwake) {
      syscall(SYS_futex, reinterpret_cast<int*>(&parked_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
    }
  }

  /// Delivers every CQE in the queue (the caller holds reaping_), up to the
  /// ring waiter's FUTEX_WAIT CQE while that worker is in wait(): that one
  /// (and what follows it) stays in the queue for the waiter, whose wait in
  /// the kernel then ends at once (see wait()). Requests that the deliveries
  /// submit are batched (t_batch_): one io_uring_enter after the loop for
  /// all of them, rather than one each. Returns the CQEs consumed.
  unsigned reap_ready(std::atomic<std::uint64_t>& delivered) noexcept {
    unsigned head = 0;
    unsigned n = 0;
    io_uring_cqe* cqe = nullptr;
    UringBackend* const outer = std::exchange(t_batch_, this);
    io_uring_for_each_cqe(&ring_, head, cqe) {
      if (io_uring_cqe_get_data64(cqe) == kTagFutex && waiting_.load(std::memory_order_seq_cst)) break;
      handle(cqe);
      ++n;
    }
    io_uring_cq_advance(&ring_, n);
    sqes_.fetch_sub(n, std::memory_order_release);
    delivered.fetch_add(n, std::memory_order_relaxed);
    t_batch_ = outer;
    // Submissions of the deliveries, and those that found the queue full.
    if (has_pending_.load(std::memory_order_acquire) || incoming_.load(std::memory_order_acquire) != nullptr ||
        cancels_.load(std::memory_order_acquire) != nullptr || futex_want_.load(std::memory_order_acquire)) {
      flush();
    }
    return n;
  }

  /// After a submit: completions the kernel posted during io_uring_enter (a
  /// buffered read served from the page cache completes there) are delivered
  /// on the submitting thread, inside a CompletionThread scope, rather than
  /// handed to the reaper: one cross-thread wake-up less on the request's
  /// path. Skipped when another thread is reaping (or this one already is:
  /// a delivery that submits again).
  void reap_inline() noexcept {
    // The flag first: io_uring_cq_ready reads the CQ head, which only its
    // holder may (the reaper advances it).
    if (reaping_.exchange(true, std::memory_order_acquire)) return;
    // Shutting down: every CQE goes to the reaper (see shutdown()).
    if (!stopping_.load(std::memory_order_seq_cst) && io_uring_cq_ready(&ring_) != 0) {
      const ordo::CompletionThread scope;
      reap_ready(stats_.by_submitters);
    }
    reaping_.store(false, std::memory_order_release);
  }

  /// The backend whose reap_ready runs on this thread (its deliveries' submits are batched).
  static inline thread_local UringBackend* t_batch_ = nullptr;
  io_uring ring_{};
  bool ring_ready_ = false;
  bool shut_down_ = false;
  std::thread reaper_;
  std::atomic<int> callers_{0};  ///< submit/cancel calls in progress
  std::atomic<Request*> incoming_{nullptr};
  Request* pending_head_ = nullptr;  ///< flusher only: prepped next, before incoming_
  Request* pending_tail_ = nullptr;
  std::atomic<bool> has_pending_{false};
  std::atomic<CancelNode*> cancels_{nullptr};
  CancelNode cancel_all_{nullptr, nullptr};  ///< the shutdown cancel-all (never allocated: it cannot fail)
  std::atomic<bool> cancel_all_reaped_{false};  ///< its CQE has come back
  std::atomic<bool> flushing_{false};
  /// Flusher only (ordered by flushing_): reads and writes prepped since the
  /// last io_uring_enter, and whether the last one found them device-bound.
  unsigned rw_unsubmitted_ = 0;
  bool device_bound_ = false;
  /// The one thread consuming the completion queue holds it: the reaper
  /// after each wait, or a submitter in reap_inline (try only, never waits).
  /// Acquire on taking / release on dropping it orders the CQ head updates.
  std::atomic<bool> reaping_{false};
  /// How the reaper sleeps (futex) rather than in io_uring_enter: see park().
  static constexpr int kAwake = 0;
  static constexpr int kParkedDeep = 1;  ///< until wake_reaper()
  static constexpr int kParkedTick = 2;  ///< for kTickNs at most (attached to an engine)
  static constexpr int kParkedLong = 3;  ///< for longer, while a worker holds the ring (park())
  static constexpr long kTickNs = 1'000'000;
  static constexpr int kMaxWatchShift = 10;  ///< the longest watch: kTickNs << 10, about a second
  /// How long a worker waits in the ring before it looks again: from the
  /// first bound, doubling while the waits find nothing, up to the last (see wait()).
  static constexpr std::int64_t kHolderBoundNs = 10'000'000;
  static constexpr std::int64_t kHolderMaxBoundNs = 1'280'000'000;
  static constexpr int kDeepTicks = 64;
  /// Written by the reaper (kAwake, a parked state) and by wake_reaper()
  /// (kAwake); read by the wakers (wake_reaper_if_needed).
  std::atomic<int> parked_{kAwake};
  // Reaper only (park()): the watchdog's state.
  bool grace_ = false;
  bool taking_over_ = false;
  int idle_ticks_ = 0;
  int watch_shift_ = 0;            ///< the watch parks for kTickNs << watch_shift_
  std::uint64_t seen_exits_ = 0;   ///< ring_exits_ at the last look
  std::atomic<bool> stopping_{false};
  std::atomic<std::int64_t> sqes_{0};      ///< SQEs submitted whose CQE has not been reaped
  std::atomic<std::int64_t> requests_{0};  ///< requests submitted and not yet delivered
  std::atomic<std::int64_t> internal_{0};  ///< internal SQEs in flight
  struct {
    std::atomic<std::uint64_t> by_reaper{0}, by_workers{0}, by_submitters{0};
    std::atomic<std::uint64_t> worker_waits{0};
    std::atomic<std::uint64_t> direct{0};  ///< requests done without the ring (send_now, read_now)
    std::atomic<std::uint64_t> reaper_wakeups{0};  ///< the reaper's returns from a futex or kernel wait
  } stats_;  ///< CQEs consumed, by who consumed them; waits of workers in the ring
  // IdleTask (see the top of this file).
  Engine* engine_ = nullptr;  ///< the engine whose CPU workers wait in the ring (set before the reaper starts)
  std::atomic<bool> attached_{false};  ///< they may (until shutdown detaches them)
  std::atomic<bool> in_ring_{false};       ///< a worker is between wait() and the end of run()
  /// The ring's waiter is in wait() (set after in_ring_, cleared before it):
  /// others leave its FUTEX_WAIT CQE in the queue (reap_ready).
  std::atomic<bool> waiting_{false};
  /// Bumped by run() before it clears in_ring_; the reaper reads it to tell
  /// a ring held all along from one that workers come and go in (park()).
  std::atomic<std::uint64_t> ring_exits_{0};
  /// Bumped by interrupt(); the waiter's FUTEX_WAIT is on it (futex word).
  std::atomic<std::uint32_t> interrupts_{0};
  std::uint32_t interrupts_seen_ = 0;  ///< interrupts_ as the last wait() ended (the waiter only)
  KeepPolicy keep_;                    ///< the keeps run() grants
  bool coop_ = false;  ///< the ring was set up with IORING_SETUP_COOP_TASKRUN
  static constexpr std::uint32_t kFsMkdir = 1, kFsUnlink = 2, kFsRename = 4;
  std::uint32_t fs_ops_ = 0;  ///< the file-system opcodes the kernel has (set in init)
  bool read_inline_ = true;  ///< IoOptions::cached_reads_inline (read_now)
  std::atomic<bool> futex_want_{false};    ///< a FUTEX_WAIT to prep at the next flush
  std::atomic<int> submitting_{0};         ///< submit() calls between their count and their inline reap
  std::atomic<std::int64_t> futex_sqes_{0};  ///< a FUTEX_WAIT wanted or submitted, its CQE not reaped (0 or 1)
  std::uint32_t futex_value_ = 0;  ///< its expected value of interrupts_ (written before futex_want_)
};

}  // namespace

std::unique_ptr<BackendImpl> make_uring_backend(const IoOptions& options, Engine* engine, std::string& why_not) {
  auto backend = std::make_unique<UringBackend>();
  why_not = backend->init(options, engine);
  if (!why_not.empty()) return nullptr;
  return backend;
}

}  // namespace ordo::io::detail

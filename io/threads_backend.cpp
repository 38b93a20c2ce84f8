// io/threads_backend.cpp - the blocking-thread backend behind ordo::io::Reactor,
// for machines where io_uring is unavailable (Docker's default seccomp, old
// kernels). Internal; see io/backends.hpp.
//
// Pool threads run the blocking file syscalls from one FIFO queue; one poll
// thread owns everything that waits (sockets, pipes, FIFOs, character devices,
// timers), makes the non-blocking syscall when ppoll() finds the fd ready, and
// delivers what must not be delivered inline. A cached read is first tried on
// the submitting thread (IoOptions::cached_reads_inline). submit() and cancel()
// may be called from any thread; shutdown() never from a done() callback.
//
// The design, thread safety and known limits: docs/io.md, "Inside the backends".
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <limits>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backends.hpp"
#include "ordo/engine.hpp"
#include "ordo/io/dir_entry.hpp"

namespace ordo::io::detail {
namespace {

// Request fields this backend uses (the backend_* scratch):
//   backend_state  atomic: phase (low 2 bits) + cancel references owed (rest);
//                  see kPending and kOwedUnit below.
//   backend_flags  route and per-op bits (kRoutePool...). Written by submit()
//                  before the request is published; afterwards only by the
//                  poll thread, and only for requests it owns (poll route).
//   backend_next   link in the pool queue (with backend_prev), the poll
//   backend_prev   thread's intake list or its delivery list; a request is in
//                  at most one of them.
//   backend_data   link in the cancel list (a request may sit there while it
//                  is also in one of the lists above).
//   backend_ts     absolute CLOCK_MONOTONIC deadline, when kHasDeadline.

// ---- backend_state: phase | owed << 2
//
// Phase (what happened to the op): set only from kPending, by the owner of
// the request's current list (under pool_mutex_ for the pool queue, the poll
// thread for everything else), so a fetch_or is enough.
//   kPending  queued in the pool, or in the poll thread's intake / waiting set
//   kRunning  a pool thread took it and runs its blocking syscall
//   kDone     its outcome is decided (the op reference is dropped or about to be)
// Owed: cancel() references handed to the backend and not yet released. The
// cancel() that raises it from 0 links the request into the cancel list; the
// poll thread unlinks it, decides, then takes (exchanges to 0) and releases
// what is owed. Multiple cancel() calls on one request thus link it once.
constexpr std::uint32_t kPending = 0;
constexpr std::uint32_t kRunning = 1;
constexpr std::uint32_t kDone = 2;
constexpr std::uint32_t kPhaseMask = 3;
constexpr std::uint32_t kOwedUnit = 4;

// ---- backend_flags
constexpr std::uint32_t kRoutePool = 1U << 0;     ///< pool thread (else poll thread)
constexpr std::uint32_t kSocket = 1U << 1;        ///< read/write family on a socket: recvmsg/sendmsg
constexpr std::uint32_t kNoNowait = 1U << 2;      ///< RWF_NOWAIT refused: plain syscall after readiness
constexpr std::uint32_t kHasDeadline = 1U << 3;   ///< backend_ts holds the absolute deadline
constexpr std::uint32_t kCancelAsked = 1U << 4;   ///< poll thread: finish with -ECANCELED at the next sweep
constexpr std::uint32_t kConnecting = 1U << 5;    ///< connect in progress: wait POLLOUT, read SO_ERROR
constexpr std::uint32_t kRestoreFlags = 1U << 6;  ///< connect set O_NONBLOCK: clear it again when done
constexpr std::uint32_t kNonBlockFd = 1U << 7;    ///< accept on an O_NONBLOCK socket: may try once
constexpr std::uint32_t kCounted = 1U << 8;       ///< counted in the poll thread's per-fd waiter map

/// attempt(): the syscall would block; wait for readiness.
constexpr std::int64_t kWait = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();

std::int64_t now_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::int64_t neg_errno() noexcept { return -static_cast<std::int64_t>(errno); }

std::int64_t deadline_of(const Request* r) noexcept {
  if ((r->backend_flags & kHasDeadline) == 0) return kNever;
  return static_cast<std::int64_t>(r->backend_ts.tv_sec) * 1'000'000'000 + r->backend_ts.tv_nsec;
}

std::uint32_t phase_of(const Request* r) noexcept {
  return r->backend_state.load(std::memory_order_acquire) & kPhaseMask;
}
void set_phase(Request* r, std::uint32_t phase) noexcept {
  r->backend_state.fetch_or(phase, std::memory_order_acq_rel);
}

bool is_write_op(OpCode c) noexcept {
  return c == OpCode::write || c == OpCode::writev || c == OpCode::send || c == OpCode::connect;
}

/// Backend threads block SIGPIPE: a write to a pipe (or socket) whose reader
/// is gone reports -EPIPE instead of killing the process. The signal the
/// kernel still raises stays pending on the thread; take_sigpipe() discards it.
void block_sigpipe() noexcept {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}
std::int64_t take_sigpipe(std::int64_t res) noexcept {
  if (res == -EPIPE) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    const timespec zero{};
    while (::sigtimedwait(&set, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  return res;
}

/// The iovec array of a read/write-family request (one entry for read/write).
struct IoVecs {
  iovec one{};
  const iovec* iov = nullptr;
  int count = 0;
  explicit IoVecs(const Request* r) noexcept {
    if (r->code == OpCode::readv || r->code == OpCode::writev) {
      iov = static_cast<const iovec*>(r->addr);
      count = static_cast<int>(std::min<std::uint64_t>(r->len, INT_MAX));
    } else {
      one.iov_base = r->addr;
      one.iov_len = static_cast<std::size_t>(r->len);
      iov = &one;
      count = 1;
    }
  }
};

FileType file_type(unsigned char d_type) noexcept {
  switch (d_type) {
    case DT_REG: return FileType::regular;
    case DT_DIR: return FileType::directory;
    case DT_LNK: return FileType::symlink;
    case DT_BLK: return FileType::block_device;
    case DT_CHR: return FileType::character_device;
    case DT_FIFO: return FileType::fifo;
    case DT_SOCK: return FileType::socket;
    default: return FileType::unknown;
  }
}

/// One getdents64 batch of directory `dir` appended to `out` ("." and ".."
/// left out): the count of records read (0: the end), or -errno. Raw system
/// calls, out of ThreadSanitizer's sight: io_uring opens and closes
/// descriptors where it cannot see either, so a descriptor number reused
/// here would look like a race with a use of its previous holder on another
/// thread.
std::int64_t read_entries(int dir, std::vector<DirEntry>& out) {
  alignas(8) char buf[32 * 1024];
  long n = 0;
  do {
    n = ::syscall(SYS_getdents64, dir, buf, sizeof buf);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return neg_errno();
  // linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name.
  std::int64_t records = 0;
  for (long at = 0; at < n; ++records) {
    const char* rec = buf + at;
    std::uint64_t ino = 0;
    std::uint16_t reclen = 0;
    std::memcpy(&ino, rec, sizeof ino);
    std::memcpy(&reclen, rec + 16, sizeof reclen);
    const auto d_type = static_cast<unsigned char>(rec[18]);
    const std::string_view name(rec + 19);
    at += reclen;
    if (name == "." || name == "..") continue;
    FileType type = file_type(d_type);
    if (type == FileType::unknown) {  // the file system does not fill d_type (some do not)
      struct statx st {};
      if (::statx(dir, rec + 19, AT_SYMLINK_NOFOLLOW, STATX_TYPE, &st) == 0) {
        type = file_type(static_cast<unsigned char>(IFTODT(st.stx_mode)));
      }
    }
    out.push_back(DirEntry{std::string(name), type, ino});
  }
  return records;
}

/// list_dir: the entries of directory `path` (relative to `fd`) into the
/// vector at `addr`, sorted by name; the count, or -errno.
std::int64_t list_dir(Request* r) noexcept {
  auto& out = *static_cast<std::vector<DirEntry>*>(r->addr);
  out.clear();
  const long fd = ::syscall(SYS_openat, r->fd, r->path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return neg_errno();
  const int dir = static_cast<int>(fd);
  std::int64_t res = 0;
  try {
    while ((res = read_entries(dir, out)) > 0) {
    }
    std::sort(out.begin(), out.end(), [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  } catch (...) {
    res = -ENOMEM;
  }
  ::syscall(SYS_close, dir);
  if (res < 0) {
    out.clear();
    return res;
  }
  return static_cast<std::int64_t>(out.size());
}

/// read_dir: the next batch of the open directory `fd` into the vector at
/// `addr` (batches of only "." and ".." are skipped); the count, 0 at the end.
std::int64_t read_dir(Request* r) noexcept {
  auto& out = *static_cast<std::vector<DirEntry>*>(r->addr);
  out.clear();
  try {
    for (;;) {
      const std::int64_t records = read_entries(r->fd, out);
      if (records <= 0) return records;
      if (!out.empty()) return static_cast<std::int64_t>(out.size());
    }
  } catch (...) {
    out.clear();
    return -ENOMEM;
  }
}

/// The blocking syscall of a pool request, once. -errno on failure.
std::int64_t blocking_once(Request* r) noexcept {
  const bool at_pos = r->off == kNoOffset;
  if (!at_pos && r->off > static_cast<std::uint64_t>(std::numeric_limits<off_t>::max())) return -EINVAL;
  const auto off = static_cast<off_t>(r->off);
  ssize_t n = -1;
  switch (r->code) {
    case OpCode::openat:
      n = ::openat(r->fd, r->path.c_str(), static_cast<int>(r->op_flags), static_cast<mode_t>(r->mode));
      break;
    case OpCode::close:
      // Never retried: Linux releases the fd even when close reports EINTR.
      if (::close(r->fd) == 0 || errno == EINTR) return 0;
      return neg_errno();
    case OpCode::read:
      n = at_pos ? ::read(r->fd, r->addr, static_cast<std::size_t>(r->len))
                 : ::pread(r->fd, r->addr, static_cast<std::size_t>(r->len), off);
      break;
    case OpCode::write:
      n = at_pos ? ::write(r->fd, r->addr, static_cast<std::size_t>(r->len))
                 : ::pwrite(r->fd, r->addr, static_cast<std::size_t>(r->len), off);
      break;
    case OpCode::readv: {
      IoVecs v(r);
      n = at_pos ? ::readv(r->fd, v.iov, v.count) : ::preadv(r->fd, v.iov, v.count, off);
      break;
    }
    case OpCode::writev: {
      IoVecs v(r);
      n = at_pos ? ::writev(r->fd, v.iov, v.count) : ::pwritev(r->fd, v.iov, v.count, off);
      break;
    }
    case OpCode::fsync:
      n = (r->op_flags & kFsyncDatasync) != 0 ? ::fdatasync(r->fd) : ::fsync(r->fd);
      break;
    case OpCode::statx:
      n = ::statx(r->fd, r->path.c_str(), static_cast<int>(r->op_flags), r->mode,
                  static_cast<struct statx*>(r->addr));
      break;
    case OpCode::mkdirat:
      n = ::mkdirat(r->fd, r->path.c_str(), static_cast<mode_t>(r->mode));
      break;
    case OpCode::unlinkat:
      n = ::unlinkat(r->fd, r->path.c_str(), static_cast<int>(r->op_flags));
      break;
    case OpCode::renameat:
      n = ::renameat2(r->fd, r->path.c_str(), r->fd2, r->path2.c_str(), r->op_flags);
      if (n < 0 && errno == ENOSYS && r->op_flags == 0) {
        n = ::renameat(r->fd, r->path.c_str(), r->fd2, r->path2.c_str());
      }
      break;
    case OpCode::list_dir:
      return list_dir(r);
    case OpCode::read_dir:
      return read_dir(r);
    default:
      return -EINVAL;
  }
  return n < 0 ? neg_errno() : static_cast<std::int64_t>(n);
}

std::int64_t run_blocking(Request* r) noexcept {
  for (;;) {
    const std::int64_t res = blocking_once(r);
    if (res != -EINTR) return res;
  }
}

/// A singly linked FIFO through backend_next.
struct Fifo {
  Request* head = nullptr;
  Request* tail = nullptr;
  void push(Request* r) noexcept {
    r->backend_next = nullptr;
    if (tail != nullptr) {
      tail->backend_next = r;
    } else {
      head = r;
    }
    tail = r;
  }
  Request* take_all() noexcept {
    Request* h = head;
    head = tail = nullptr;
    return h;
  }
  [[nodiscard]] bool empty() const noexcept { return head == nullptr; }
};

/// The pool queue: doubly linked through backend_next/backend_prev, so a
/// cancelled or expired request leaves it in O(1).
struct Queue {
  Request* head = nullptr;
  Request* tail = nullptr;
  void push_back(Request* r) noexcept {
    r->backend_next = nullptr;
    r->backend_prev = tail;
    if (tail != nullptr) {
      tail->backend_next = r;
    } else {
      head = r;
    }
    tail = r;
  }
  void unlink(Request* r) noexcept {
    (r->backend_prev != nullptr ? r->backend_prev->backend_next : head) = r->backend_next;
    (r->backend_next != nullptr ? r->backend_next->backend_prev : tail) = r->backend_prev;
    r->backend_next = r->backend_prev = nullptr;
  }
  Request* pop_front() noexcept {
    Request* r = head;
    if (r != nullptr) unlink(r);
    return r;
  }
};

class ThreadsBackend final : public BackendImpl {
 public:
  explicit ThreadsBackend(const IoOptions& options);
  ~ThreadsBackend() override { shutdown(); }
  ThreadsBackend(const ThreadsBackend&) = delete;
  ThreadsBackend& operator=(const ThreadsBackend&) = delete;

  void submit(Request* r) noexcept override;
  void cancel(Request* r) noexcept override;
  void shutdown() noexcept override;
  [[nodiscard]] Backend kind() const noexcept override { return Backend::threads; }
  [[nodiscard]] std::size_t in_flight() const noexcept override {
    return in_flight_.load(std::memory_order_acquire);
  }

 private:
  // ---- delivery (our threads only)
  void drop(Request* r) noexcept;
  void drop_owed(Request* r) noexcept;
  void complete(Request* r, std::int64_t res) noexcept {
    r->res = res;
    drop(r);
  }
  void deliver_later(Request* r, std::int64_t res) noexcept;
  void wake() noexcept;

  // ---- pool threads
  void pool_loop() noexcept;
  void submit_pool(Request* r) noexcept;
  bool read_now(Request* r) noexcept;

  // ---- poll thread
  void poll_loop();
  void start(Request* r);
  void start_connect(Request* r) noexcept;
  std::int64_t attempt(Request* r, bool ready) noexcept;
  void finish_waiting(Request* r, std::int64_t res) noexcept;
  void resolve_cancel(Request* r) noexcept;
  std::int64_t expire_pool(std::int64_t now) noexcept;
  static std::int64_t waiter_key(const Request* r) noexcept {
    return static_cast<std::int64_t>(r->fd) * 2 + (is_write_op(r->code) ? 1 : 0);
  }

  const unsigned threads_;
  int efd_ = -1;  ///< eventfd waking the poll thread; written by wake(), read by the poll thread

  /// Set by wake() before it writes efd_, cleared by the poll thread before it
  /// takes its lists: at most one eventfd write per poll round (seq_cst, see wake()).
  std::atomic<bool> wake_pending_{false};
  /// Requests submitted and not yet delivered: +1 in submit(), -1 in drop()
  /// after done() returned. The poll thread exits at shutdown when it is 0.
  std::atomic<std::size_t> in_flight_{0};
  const bool read_inline_;  ///< IoOptions::cached_reads_inline (read_now)

  // ---- guarded by queue_mutex_: the poll thread's inputs
  std::mutex queue_mutex_;
  Fifo intake_;                    ///< poll-route requests not yet started
  Fifo deliver_;                   ///< requests to finish with their stored res
  Request* cancels_ = nullptr;     ///< stack through backend_data (see kOwedUnit)
  bool stopping_ = false;          ///< shutdown() began: new poll-route submits are cancelled
  bool pool_joined_ = false;       ///< shutdown() joined the pool threads
  bool poll_exited_ = false;       ///< the poll thread left: deliver inline (misuse after shutdown)

  // ---- guarded by pool_mutex_
  std::mutex pool_mutex_;
  std::condition_variable pool_cv_;
  Queue pool_queue_;
  bool pool_stopping_ = false;
  /// Lower bound of the deadlines in pool_queue_ (kNever: none); the poll
  /// thread scans the queue when it passes and recomputes it.
  std::int64_t pool_min_deadline_ = kNever;

  // ---- poll thread only
  std::vector<Request*> waiting_;                        ///< FIFO; null: finished this round
  std::unordered_map<std::int64_t, std::uint32_t> waiters_;  ///< (fd, direction) -> waiting count

  std::once_flag shutdown_once_;
  std::thread poll_thread_;
  std::vector<std::thread> pool_;
};

ThreadsBackend::ThreadsBackend(const IoOptions& options)
    : threads_(std::max(1U, options.threads)), read_inline_(options.cached_reads_inline) {
  efd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (efd_ < 0) throw std::system_error(errno, std::generic_category(), "ordo::io threads backend: eventfd");
  try {
    poll_thread_ = std::thread([this] { poll_loop(); });
    pool_.reserve(threads_);
    for (unsigned i = 0; i < threads_; ++i) pool_.emplace_back([this] { pool_loop(); });
  } catch (...) {
    shutdown();
    throw;
  }
}

// ------------------------------------------------------------------ delivery

/// detail::release, counting the delivery: the reference dropped last
/// delivers, and in_flight_ drops once done() has returned.
void ThreadsBackend::drop(Request* r) noexcept {
  if (r->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    deliver(r);
    in_flight_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

/// Takes the cancel references owed on `r` (exchanges the count to 0) and
/// drops them; a cancel() after the exchange links r again and owes its own.
void ThreadsBackend::drop_owed(Request* r) noexcept {
  std::uint32_t s = r->backend_state.load(std::memory_order_acquire);
  while (!r->backend_state.compare_exchange_weak(s, s & kPhaseMask, std::memory_order_acq_rel)) {
  }
  for (std::uint32_t n = s / kOwedUnit; n > 0; --n) drop(r);
}

/// Called only inside a critical section of queue_mutex_ or pool_mutex_: the
/// poll thread cannot exit, nor shutdown() close efd_ and return, while a
/// caller holds either (the exit needs queue_mutex_, the pool threads' exit
/// pool_mutex_). For the same reason submit() and cancel() touch no member
/// after their last critical section: the backend may be gone by then.
void ThreadsBackend::wake() noexcept {
  // Pairs with the poll thread's exchange(false) before it takes its lists:
  // either it takes what we pushed, or our exchange sees false and we write.
  if (!wake_pending_.exchange(true)) {
    const std::uint64_t one = 1;
    while (::write(efd_, &one, sizeof one) < 0 && errno == EINTR) {
    }
  }
}

/// Finishes `r` with `res` on the poll thread (any caller).
void ThreadsBackend::deliver_later(Request* r, std::int64_t res) noexcept {
  r->res = res;
  set_phase(r, kDone);
  {
    std::unique_lock lock(queue_mutex_);
    if (!poll_exited_) {
      deliver_.push(r);
      wake();
      return;
    }
  }
  CompletionThread scope;  // submit() after shutdown(): no thread is left
  drop(r);
}

// ------------------------------------------------------------------ submit / cancel

void ThreadsBackend::submit(Request* r) noexcept {
  in_flight_.fetch_add(1, std::memory_order_acq_rel);
  r->backend_state.store(kPending, std::memory_order_relaxed);
  r->backend_flags = 0;
  r->backend_next = r->backend_prev = nullptr;
  r->backend_data = nullptr;
  if (r->deadline_ns > 0) {
    const std::int64_t now = now_ns();
    const bool absolute = r->code == OpCode::timer && (r->op_flags & kTimerAbsolute) != 0;
    const std::int64_t at = absolute ? r->deadline_ns : r->deadline_ns < kNever - now ? now + r->deadline_ns : kNever - 1;
    r->backend_ts.tv_sec = at / 1'000'000'000;
    r->backend_ts.tv_nsec = at % 1'000'000'000;
    r->backend_flags |= kHasDeadline;
  }

  switch (r->code) {
    case OpCode::nop:
      return deliver_later(r, 0);
    case OpCode::openat:
    case OpCode::close:
    case OpCode::fsync:
    case OpCode::statx:
    case OpCode::mkdirat:
    case OpCode::unlinkat:
    case OpCode::renameat:
    case OpCode::list_dir:
    case OpCode::read_dir:
      return submit_pool(r);
    case OpCode::read:
    case OpCode::write:
    case OpCode::readv:
    case OpCode::writev: {
      // Pollable fds wait on the poll thread; everything else blocks on a pool thread.
      struct stat st {};
      if (::fstat(r->fd, &st) != 0) return deliver_later(r, neg_errno());
      if (S_ISSOCK(st.st_mode)) {
        r->backend_flags |= kSocket;
      } else if (!S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode)) {
        if (read_inline_ && S_ISREG(st.st_mode) && read_now(r)) return;
        return submit_pool(r);
      }
      break;
    }
    case OpCode::accept: {
      const int fl = ::fcntl(r->fd, F_GETFL);
      if (fl < 0) return deliver_later(r, neg_errno());
      if ((fl & O_NONBLOCK) != 0) r->backend_flags |= kNonBlockFd;
      break;
    }
    case OpCode::connect:
    case OpCode::recv:
    case OpCode::send:
    case OpCode::timer:
      break;
    default:
      return deliver_later(r, -EINVAL);
  }

  std::unique_lock lock(queue_mutex_);
  if (stopping_) {
    lock.unlock();
    return deliver_later(r, -ECANCELED);
  }
  intake_.push(r);
  wake();
}

/// A read the page cache serves whole, made here (see the top of this file).
/// Taken as a pool thread takes a request, so a cancel() meanwhile has no
/// effect (resolve_cancel finds it running); one that must wait after all
/// goes to the pool, whose submit_pool() makes it pending again.
bool ThreadsBackend::read_now(Request* r) noexcept {
  if (r->off == kNoOffset || (r->code != OpCode::read && r->code != OpCode::readv)) return false;
  r->backend_flags |= kRoutePool;
  set_phase(r, kRunning);
  const std::int64_t n = read_cached_now(*r);
  if (n < 0) return false;
  r->backend_flags |= kDirect;
  set_phase(r, kDone);
  CompletionThread scope;
  complete(r, n);
  return true;
}

void ThreadsBackend::submit_pool(Request* r) noexcept {
  r->backend_flags |= kRoutePool;
  {
    std::lock_guard lock(pool_mutex_);
    // Pending again after a read_now() that found the cache lacking (phases
    // of pool requests change under this lock; see resolve_cancel()).
    r->backend_state.fetch_and(~kPhaseMask, std::memory_order_acq_rel);
    if (!pool_stopping_) {
      pool_queue_.push_back(r);
      const std::int64_t at = deadline_of(r);
      if (at < pool_min_deadline_) {
        pool_min_deadline_ = at;
        wake();  // the poll thread times the queue's deadlines
      }
      pool_cv_.notify_one();
      return;
    }
  }
  deliver_later(r, -ECANCELED);
}

void ThreadsBackend::cancel(Request* r) noexcept {
  // The caller's reference keeps r undelivered, so in_flight_ > 0 and the poll
  // thread is still running: it resolves the attempt and drops the reference.
  const std::uint32_t before = r->backend_state.fetch_add(kOwedUnit, std::memory_order_acq_rel);
  if (before >= kOwedUnit) return;  // already linked; the poll thread takes ours too
  {
    std::lock_guard lock(queue_mutex_);
    if (!poll_exited_) {
      r->backend_data = cancels_;
      cancels_ = r;
      wake();
      return;
    }
  }
  // cancel() after shutdown() returned: the contract rules it out (every
  // request was delivered); drop what is owed rather than leak it.
  CompletionThread scope;
  drop_owed(r);
}

// ------------------------------------------------------------------ shutdown

void ThreadsBackend::shutdown() noexcept {
  std::call_once(shutdown_once_, [this] {
    {
      std::lock_guard lock(queue_mutex_);
      stopping_ = true;
    }
    // Queued pool requests are cancelled; running ones finish their syscall.
    Fifo drained;
    {
      std::lock_guard lock(pool_mutex_);
      pool_stopping_ = true;
      while (Request* r = pool_queue_.pop_front()) {
        r->res = -ECANCELED;
        set_phase(r, kDone);
        drained.push(r);
      }
      pool_min_deadline_ = kNever;
    }
    pool_cv_.notify_all();
    {
      std::lock_guard lock(queue_mutex_);
      for (Request* r = drained.take_all(); r != nullptr;) {
        Request* next = r->backend_next;
        deliver_.push(r);
        r = next;
      }
    }
    wake();
    for (std::thread& t : pool_) {
      if (t.joinable()) t.join();
    }
    {
      std::lock_guard lock(queue_mutex_);
      pool_joined_ = true;
    }
    wake();
    if (poll_thread_.joinable()) poll_thread_.join();
    if (efd_ >= 0) ::close(efd_);
    efd_ = -1;
  });
}

// ------------------------------------------------------------------ pool threads

void ThreadsBackend::pool_loop() noexcept {
  CompletionThread scope;
  block_sigpipe();
  for (;;) {
    Request* r = nullptr;
    {
      std::unique_lock lock(pool_mutex_);
      pool_cv_.wait(lock, [this] { return pool_stopping_ || pool_queue_.head != nullptr; });
      r = pool_queue_.pop_front();
      if (r == nullptr) return;  // stopping and drained
      set_phase(r, kRunning);    // from here a cancel() has no effect
    }
    // A deadline applies while queued only: a started syscall completes.
    const std::int64_t res = now_ns() >= deadline_of(r) ? -ETIMEDOUT : take_sigpipe(run_blocking(r));
    complete(r, res);
  }
}

// ------------------------------------------------------------------ poll thread

void ThreadsBackend::start(Request* r) {
  if (r->code == OpCode::timer) {
    if ((r->backend_flags & kHasDeadline) == 0) {
      set_phase(r, kDone);
      return complete(r, 0);
    }
    waiting_.push_back(r);
    return;
  }
  if (r->code == OpCode::connect) {
    start_connect(r);
    if ((r->backend_flags & kConnecting) == 0) return;  // finished at once
    waiting_.push_back(r);
    return;
  }
  // Requests on one fd and direction complete in submission order: a new one
  // tries at once only when none is waiting before it.
  const std::int64_t key = waiter_key(r);
  if (waiters_.find(key) == waiters_.end()) {
    const std::int64_t res = attempt(r, false);
    if (res != kWait) {
      set_phase(r, kDone);
      return complete(r, res);
    }
  }
  ++waiters_[key];
  r->backend_flags |= kCounted;
  waiting_.push_back(r);
}

void ThreadsBackend::start_connect(Request* r) noexcept {
  const int fl = ::fcntl(r->fd, F_GETFL);
  if (fl < 0) {
    set_phase(r, kDone);
    return complete(r, neg_errno());
  }
  if ((fl & O_NONBLOCK) == 0) {
    if (::fcntl(r->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
      set_phase(r, kDone);
      return complete(r, neg_errno());
    }
    r->backend_flags |= kRestoreFlags;
  }
  int rc = 0;
  do {
    rc = ::connect(r->fd, reinterpret_cast<const sockaddr*>(&r->sa), r->sa_len);
  } while (rc < 0 && errno == EINTR);
  if (rc < 0 && errno == EINPROGRESS) {
    r->backend_flags |= kConnecting;
    return;
  }
  const std::int64_t res = rc == 0 ? 0 : neg_errno();
  if ((r->backend_flags & kRestoreFlags) != 0) ::fcntl(r->fd, F_SETFL, fl);
  r->backend_flags &= ~kRestoreFlags;
  set_phase(r, kDone);
  complete(r, res);
}

/// The non-blocking syscall of a poll-route request. `ready`: ppoll reported
/// the fd ready (before that, only syscalls that cannot block are tried).
std::int64_t ThreadsBackend::attempt(Request* r, bool ready) noexcept {
  ssize_t n = -1;
  for (;;) {
    switch (r->code) {
      case OpCode::recv:
        n = ::recv(r->fd, r->addr, static_cast<std::size_t>(r->len), static_cast<int>(r->op_flags) | MSG_DONTWAIT);
        break;
      case OpCode::send:
        n = ::send(r->fd, r->addr, static_cast<std::size_t>(r->len),
                   static_cast<int>(r->op_flags) | MSG_DONTWAIT | MSG_NOSIGNAL);
        break;
      case OpCode::accept:
        if ((r->backend_flags & kNonBlockFd) != 0) {
          n = ::accept4(r->fd, nullptr, nullptr, SOCK_CLOEXEC);
        } else {
          // A blocking listener: only once it polled readable, and made
          // non-blocking for the call, since another acceptor may have taken
          // the connection meanwhile (a blocked accept would hold this thread).
          if (!ready) return kWait;
          const int fl = ::fcntl(r->fd, F_GETFL);
          if (fl < 0) return neg_errno();
          if (::fcntl(r->fd, F_SETFL, fl | O_NONBLOCK) < 0) return neg_errno();
          n = ::accept4(r->fd, nullptr, nullptr, SOCK_CLOEXEC);
          const int err = errno;
          ::fcntl(r->fd, F_SETFL, fl);
          errno = err;
        }
        break;
      case OpCode::connect: {
        int err = 0;
        socklen_t len = sizeof err;
        if (::getsockopt(r->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) return neg_errno();
        return -static_cast<std::int64_t>(err);
      }
      case OpCode::read:
      case OpCode::readv:
      case OpCode::write:
      case OpCode::writev: {
        // Pollable fds have no position: the offset is ignored, as io_uring does.
        const bool out = is_write_op(r->code);
        IoVecs v(r);
        if ((r->backend_flags & kSocket) != 0) {
          msghdr msg{};
          msg.msg_iov = const_cast<iovec*>(v.iov);
          msg.msg_iovlen = static_cast<std::size_t>(v.count);
          n = out ? ::sendmsg(r->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) : ::recvmsg(r->fd, &msg, MSG_DONTWAIT);
        } else if ((r->backend_flags & kNoNowait) == 0) {
          n = out ? ::pwritev2(r->fd, v.iov, v.count, -1, RWF_NOWAIT) : ::preadv2(r->fd, v.iov, v.count, -1, RWF_NOWAIT);
          if (n < 0 && errno == EOPNOTSUPP) {
            // This file (an older kernel's pipe, a tty) cannot do NOWAIT: wait
            // for readiness, then use the plain syscall.
            r->backend_flags |= kNoNowait;
            if (!ready) return kWait;
            continue;
          }
        } else {
          if (!ready) return kWait;
          if (!out) {
            n = ::readv(r->fd, v.iov, v.count);
          } else {
            // After POLLOUT a pipe has room for PIPE_BUF bytes: write no more,
            // so the write cannot block (a short write is allowed).
            iovec clamped[8];
            int count = 0;
            std::size_t total = 0;
            for (int i = 0; i < v.count && count < 8 && total < PIPE_BUF; ++i) {
              clamped[count] = v.iov[i];
              clamped[count].iov_len = std::min<std::size_t>(v.iov[i].iov_len, PIPE_BUF - total);
              total += clamped[count].iov_len;
              ++count;
            }
            n = ::writev(r->fd, clamped, count);
          }
        }
        break;
      }
      default:
        return -EINVAL;
    }
    if (n >= 0) return static_cast<std::int64_t>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return kWait;
    return take_sigpipe(neg_errno());
  }
}

/// Finishes a request of waiting_ (the caller clears its slot).
void ThreadsBackend::finish_waiting(Request* r, std::int64_t res) noexcept {
  if ((r->backend_flags & kRestoreFlags) != 0) {
    const int fl = ::fcntl(r->fd, F_GETFL);
    if (fl >= 0) ::fcntl(r->fd, F_SETFL, fl & ~O_NONBLOCK);
  }
  if ((r->backend_flags & kCounted) != 0) {
    auto it = waiters_.find(waiter_key(r));
    if (it != waiters_.end() && --it->second == 0) waiters_.erase(it);
  }
  set_phase(r, kDone);
  complete(r, res);
}

/// Resolves the cancel attempts owed on `r` (popped from the cancel list).
void ThreadsBackend::resolve_cancel(Request* r) noexcept {
  // The owed references keep r undelivered until we drop them below.
  if ((r->backend_flags & kRoutePool) != 0) {
    bool cancelled = false;
    {
      std::lock_guard lock(pool_mutex_);
      if (phase_of(r) == kPending) {  // still queued: a pool thread never saw it
        pool_queue_.unlink(r);
        set_phase(r, kDone);
        cancelled = true;
      }
    }
    if (cancelled) complete(r, -ECANCELED);
  } else if (phase_of(r) == kPending) {
    // Waiting here (intake was started before cancels): the next sweep, this
    // round, finishes it. The op's own reference outlives the owed ones.
    r->backend_flags |= kCancelAsked;
  }
  drop_owed(r);  // r may be gone after this
}

/// Expires pool requests whose deadline passed while queued; returns the
/// queue's next deadline.
std::int64_t ThreadsBackend::expire_pool(std::int64_t now) noexcept {
  Fifo expired;
  std::int64_t next = kNever;
  {
    std::lock_guard lock(pool_mutex_);
    if (pool_min_deadline_ > now) return pool_min_deadline_;
    for (Request* r = pool_queue_.head; r != nullptr;) {
      Request* after = r->backend_next;
      const std::int64_t at = deadline_of(r);
      if (at <= now) {
        pool_queue_.unlink(r);
        set_phase(r, kDone);
        expired.push(r);
      } else {
        next = std::min(next, at);
      }
      r = after;
    }
    pool_min_deadline_ = next;
  }
  for (Request* r = expired.take_all(); r != nullptr;) {
    Request* after = r->backend_next;
    complete(r, -ETIMEDOUT);
    r = after;
  }
  return next;
}

void ThreadsBackend::poll_loop() {
  CompletionThread scope;
  block_sigpipe();
  std::vector<pollfd> fds;
  std::vector<std::size_t> slot;  // fds[i + 1] belongs to waiting_[slot[i]]
  for (;;) {
    wake_pending_.exchange(false);
    Request* intake = nullptr;
    Request* deliver = nullptr;
    Request* cancels = nullptr;
    bool stopping = false;
    {
      std::lock_guard lock(queue_mutex_);
      intake = intake_.take_all();
      deliver = deliver_.take_all();
      cancels = cancels_;
      cancels_ = nullptr;
      stopping = stopping_;
      if (stopping && pool_joined_ && intake == nullptr && deliver == nullptr && cancels == nullptr &&
          waiting_.empty() && in_flight_.load(std::memory_order_acquire) == 0) {
        poll_exited_ = true;
        break;
      }
    }
    for (Request* r = intake; r != nullptr;) {
      Request* next = r->backend_next;
      start(r);
      r = next;
    }
    for (Request* r = deliver; r != nullptr;) {
      Request* next = r->backend_next;
      complete(r, r->res);
      r = next;
    }
    for (Request* r = cancels; r != nullptr;) {
      Request* next = static_cast<Request*>(r->backend_data);
      resolve_cancel(r);
      r = next;
    }

    // Sweep: finish what was cancelled or expired, gather what still waits.
    const std::int64_t now = now_ns();
    std::int64_t nearest = expire_pool(now);
    fds.clear();
    slot.clear();
    fds.push_back({efd_, POLLIN, 0});
    // Stopping: loop (without waiting) while this round did something, so
    // the exit test above sees the deliveries it made.
    bool progressed = intake != nullptr || deliver != nullptr || cancels != nullptr;
    std::size_t kept = 0;
    for (Request* r : waiting_) {
      if (r == nullptr) continue;
      const std::int64_t at = deadline_of(r);
      if (stopping || (r->backend_flags & kCancelAsked) != 0) {
        finish_waiting(r, -ECANCELED);
        progressed = true;
        continue;
      }
      if (at <= now) {
        finish_waiting(r, r->code == OpCode::timer ? 0 : -ETIMEDOUT);
        continue;
      }
      nearest = std::min(nearest, at);
      if (r->code != OpCode::timer) {
        fds.push_back({r->fd, static_cast<short>(is_write_op(r->code) ? POLLOUT : POLLIN), 0});
        slot.push_back(kept);
      }
      waiting_[kept++] = r;
    }
    waiting_.resize(kept);
    if (stopping && progressed) continue;

    timespec ts{};
    timespec* timeout = nullptr;
    if (nearest != kNever) {
      const std::int64_t left = std::max<std::int64_t>(0, nearest - now);
      ts.tv_sec = left / 1'000'000'000;
      ts.tv_nsec = left % 1'000'000'000;
      timeout = &ts;
    }
    const int ready = ::ppoll(fds.data(), fds.size(), timeout, nullptr);
    if (ready <= 0) continue;  // timeout (the sweep expires) or EINTR
    if (fds[0].revents != 0) {
      std::uint64_t count = 0;
      while (::read(efd_, &count, sizeof count) < 0 && errno == EINTR) {
      }
    }
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Request*& r = waiting_[slot[i - 1]];
      std::int64_t res = kWait;
      if ((fds[i].revents & POLLNVAL) != 0) {
        res = -EBADF;
      } else {
        res = attempt(r, true);
      }
      if (res != kWait) {
        finish_waiting(r, res);
        r = nullptr;
      }
    }
  }
}

}  // namespace

std::unique_ptr<BackendImpl> make_threads_backend(const IoOptions& options) {
  return std::make_unique<ThreadsBackend>(options);
}

}  // namespace ordo::io::detail

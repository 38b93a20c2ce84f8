// ordo/io/request.hpp - one I/O request and the backend interface behind
// ordo::io::Reactor. Internal (see ordo/io.hpp); public only because the
// awaitables embed a Request in the coroutine frame (no allocation per I/O).
#pragma once

#include <fcntl.h>
#include <linux/time_types.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "ordo/detail/profile_hooks.hpp"

namespace ordo::io {

enum class Backend : std::uint8_t {
  automatic,  ///< io_uring if the kernel allows it, else threads (the reason is logged)
  uring,      ///< io_uring only: the Reactor constructor throws if it is unavailable
  threads,    ///< blocking syscalls on a few threads, readiness (poll) for sockets and pipes
};

namespace detail {

enum class OpCode : std::uint8_t {
  nop,      ///< completes with 0 (tests, wake-ups)
  openat,   ///< fd = dirfd (AT_FDCWD), path, op_flags = open flags, mode -> fd
  close,    ///< fd
  read,     ///< fd, addr/len buffer, off (off == kNoOffset: current position)
  write,    ///< fd, addr/len buffer, off
  readv,    ///< fd, addr = const iovec*, len = iovec count, off
  writev,   ///< fd, addr = const iovec*, len = iovec count, off
  fsync,    ///< fd, op_flags = 0 or kFsyncDatasync
  statx,    ///< fd = dirfd (AT_FDCWD), path, op_flags = AT_* flags, mode = STATX_* mask, addr = struct statx*
  accept,   ///< fd -> new fd (SOCK_CLOEXEC)
  connect,  ///< fd, sockaddr in `sa` (sa_len bytes)
  recv,     ///< fd, addr/len buffer, op_flags = MSG_* flags
  send,     ///< fd, addr/len buffer, op_flags = MSG_* flags (MSG_NOSIGNAL added)
  timer,    ///< completes with 0 after deadline_ns (required; op_flags kTimerAbsolute: at it)
  mkdirat,   ///< fd = dirfd, path, mode
  unlinkat,  ///< fd = dirfd, path, op_flags = 0 or AT_REMOVEDIR
  renameat,  ///< fd = old dirfd, path = old path, fd2 = new dirfd, path2 = new path, op_flags = RENAME_* flags
  list_dir,  ///< fd = dirfd, path, addr = std::vector<DirEntry>* -> entry count (blocking threads only)
  read_dir,  ///< fd = an open directory, addr = std::vector<DirEntry>* -> the next batch's count, 0 at the end
};

inline constexpr int kOpCodes = static_cast<int>(OpCode::read_dir) + 1;

struct Request;

/// A reactor's bookkeeping of its requests, reached from each request it
/// started (Request::tap): per-kind counts for Engine::stats().
struct IoTap {
  /// Requests started / delivered, per OpCode (relaxed: counters).
  std::atomic<std::uint64_t> started[kOpCodes] = {};
  std::atomic<std::uint64_t> delivered[kOpCodes] = {};
  /// The engine's profiler, null when profiling is off: then one
  /// predictable branch per start and per delivery. Immutable once set.
  ordo::detail::ProfilerCore* profiler = nullptr;
};

inline constexpr std::uint64_t kNoOffset = ~std::uint64_t{0};
inline constexpr std::uint32_t kFsyncDatasync = 1;
/// A timer's deadline_ns is a steady_clock (CLOCK_MONOTONIC) time, not a
/// duration: the engine's timers (ordo::sleep_until) served by the ring.
inline constexpr std::uint32_t kTimerAbsolute = 1;

/// One request. The front end (Reactor) fills the description, sets `done`
/// and `refs` = 1, then hands it to Backend::submit. From then on the backend
/// owns the outcome fields and the backend_* fields until it calls
/// finish_op(); the request is delivered (done(this) runs) when the last
/// reference is released: the op's own, plus one per cancellation attempt
/// (see Backend::cancel).
///
/// Outcome: `res` >= 0 is the syscall's value (bytes, fd, 0); < 0 is -errno.
/// A request with a deadline that expired reports -ETIMEDOUT (never the
/// ECANCELED the kernel uses internally).
struct Request {
  // ---- description (front end)
  OpCode code = OpCode::nop;
  int fd = -1;
  void* addr = nullptr;
  std::uint64_t len = 0;
  std::uint64_t off = 0;
  std::uint32_t op_flags = 0;
  std::uint32_t mode = 0;
  std::int64_t deadline_ns = 0;  ///< relative deadline; 0: none (a timer's duration, or its time: kTimerAbsolute)
  std::string path;              ///< openat / statx / mkdirat / unlinkat / renameat (old) / list_dir
  int fd2 = AT_FDCWD;            ///< renameat: the new path's dirfd
  std::string path2;             ///< renameat: the new path
  sockaddr_storage sa{};         ///< connect
  socklen_t sa_len = 0;

  // ---- outcome (backend)
  std::int64_t res = 0;

  // ---- delivery (front end)
  void (*done)(Request*) noexcept = nullptr;
  void* user = nullptr;  ///< the front end's object owning this request
  std::atomic<std::int32_t> refs{0};
  std::atomic<std::uint64_t> gen{0};  ///< pooled requests: bumped on reuse, checked by Handle::cancel
  IoTap* tap = nullptr;               ///< the reactor that started it (Reactor::start)
  std::uint64_t prof_id = 0;          ///< its slice in the trace (with a profiler; 0: none)

  // ---- backend scratch (owned by the backend while the request is in flight)
  Request* backend_next = nullptr;
  Request* backend_prev = nullptr;
  std::atomic<std::uint32_t> backend_state{0};
  std::uint32_t backend_flags = 0;
  __kernel_timespec backend_ts{};
  void* backend_data = nullptr;
};

/// Takes a reference while the request is not yet delivered (refs > 0), as a
/// cancel attempt must before calling Backend::cancel. False: too late.
inline bool try_retain(Request* r) noexcept {
  std::int32_t refs = r->refs.load(std::memory_order_acquire);
  do {
    if (refs == 0) return false;
  } while (!r->refs.compare_exchange_weak(refs, refs + 1, std::memory_order_acq_rel));
  return true;
}

/// For its scope, the ops this thread pushes or finishes were released by
/// r's completion (profiling on; nothing otherwise): deliver(), and a
/// coroutine's awaiter that resumes it itself when the delivery came first.
class ReleasedBy : ordo::detail::ProfileReleaseScope {
 public:
  explicit ReleasedBy(const Request& r) noexcept
      : ProfileReleaseScope(r.tap != nullptr ? r.tap->profiler : nullptr, r.prof_id) {}
};

/// Delivers `r` (calls done), counted by the reactor that started it; with
/// a profiler, ends its slice and marks what done() pushes or completes on
/// this thread (a resumption, a callback, an op's OnComplete) as released by it.
inline void deliver(Request* r) noexcept {
  IoTap* tap = r->tap;
  if (tap == nullptr) {
    r->done(r);
    return;
  }
  tap->delivered[static_cast<int>(r->code)].fetch_add(1, std::memory_order_relaxed);
  if (ordo::detail::ProfilerCore* prof = tap->profiler; prof != nullptr) [[unlikely]] {
    ordo::detail::profile_slice_end(prof, r->prof_id, r->res);
    const ReleasedBy scope(*r);
    r->done(r);  // may free r, or start it again (an exact transfer's next part)
    return;
  }
  r->done(r);
}

/// Drops one reference; the last one delivers the request (calls done).
/// Backends call it once for the op itself (finish_op) and once per cancel().
inline void release(Request* r) noexcept {
  if (r->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) deliver(r);
}
/// The backend's end of an op: stores the result, drops the op's reference.
inline void finish_op(Request* r, std::int64_t res) noexcept {
  r->res = res;
  release(r);
}

/// What a Reactor runs on. Every callback into the front end (release ->
/// done) happens on a thread inside an ordo::CompletionThread scope.
}  // namespace detail

/// Where a reactor's completions were consumed (io_uring; all zero on the
/// thread backend). Counts CQEs, internal ones (cancels, timeouts) included.
struct ReactorStats {
  std::uint64_t by_reaper = 0;      ///< the reaper thread
  std::uint64_t by_workers = 0;     ///< an idle engine worker waiting in the ring (IoOptions::idle_workers_reap)
  std::uint64_t by_submitters = 0;  ///< the submitting thread, right after its io_uring_enter
  /// Times an idle worker entered the kernel to wait in the ring (each ends
  /// in a wake-up: a completion, the engine's call for work, or a bound
  /// without either, when it looks again, a bound that grows while nothing
  /// happens: docs/io.md, "Idle cost"). Idle workers wait there only while
  /// requests are in flight.
  std::uint64_t worker_waits = 0;
  /// Requests done on the submitting thread with a plain non-blocking
  /// syscall, without the ring: sends the socket had room for, and reads
  /// the page cache served whole (IoOptions::cached_reads_inline).
  std::uint64_t direct = 0;
  /// Times the reaper thread woke from a wait (its futex or the kernel),
  /// whatever woke it. With worker_waits, what an idle process costs.
  std::uint64_t reaper_wakeups = 0;
};

namespace detail {

class BackendImpl {
 public:
  virtual ~BackendImpl() = default;
  /// Starts `r` (any thread, concurrently). Never fails synchronously: a
  /// request that cannot start is finished with its -errno. The backend may
  /// deliver `r` (and others that completed meanwhile) before submit returns,
  /// on the calling thread inside a CompletionThread scope (io_uring does, for
  /// requests the kernel completed during submission): callers hold no lock
  /// that a delivery takes. The thread backend never does.
  virtual void submit(Request* r) noexcept = 0;
  /// Tries to cancel `r`, for which the caller took one extra reference
  /// (so r is still in flight or at least not delivered). The backend
  /// releases that reference once the attempt is resolved. If the op had not
  /// completed, it finishes with -ECANCELED; if it had, the attempt is a
  /// no-op: exactly one outcome is ever delivered.
  virtual void cancel(Request* r) noexcept = 0;
  /// No more submits after this. Cancels everything in flight and returns
  /// once every request has been delivered and every backend thread joined.
  virtual void shutdown() noexcept = 0;
  [[nodiscard]] virtual Backend kind() const noexcept = 0;
  /// Whether submit() can run requests of `code`; the Reactor hands the
  /// others to a thread backend of its own (io_uring has no getdents; an
  /// older kernel lacks the mkdirat/unlinkat/renameat opcodes). Asked only
  /// for those and the listings: every backend runs all the other requests.
  [[nodiscard]] virtual bool supports(OpCode code) const noexcept {
    (void)code;
    return true;
  }
  /// Requests submitted and not yet delivered, internal ones included.
  [[nodiscard]] virtual std::size_t in_flight() const noexcept = 0;
  /// Idle workers of the engine wait in this backend's ring (io_uring only).
  [[nodiscard]] virtual bool workers_reap() const noexcept { return false; }
  /// The ring runs completion work cooperatively (IoOptions::cooperative_taskrun took effect).
  [[nodiscard]] virtual bool cooperative_taskrun() const noexcept { return false; }
  [[nodiscard]] virtual ReactorStats stats() const noexcept { return {}; }
};

}  // namespace detail
}  // namespace ordo::io

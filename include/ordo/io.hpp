// ordo/io.hpp - disk and network I/O as engine work: io_uring completions
// (or, where io_uring is unavailable, a small blocking-syscall backend) finish
// async ops and resume coroutines; no engine worker ever waits for I/O.
//
//   ordo::io::Reactor io(engine);
//   // in a coroutine (an ordo::Task), maybe holding a lease on the buffer's variable:
//   std::size_t n = co_await io.read(fd, buf, offset);
//   co_await io.send(sock, reply).timeout(std::chrono::seconds(5));
//   // as a callback (runs on an engine worker), or as an op the reactor pushes:
//   io.read(fd, buf, 0).then([](ordo::io::Result r) { use(r.value()); });
//   io.push_read(buf_var, fd, buf, offset);  // later readers of buf_var see the data
//
// Every operation returns an IoOp: describe it (timeout, stop token, exact),
// then start it exactly once by co_await, then(callback) or then(OnComplete);
// docs/io.md, "Three ways to start a request".
#pragma once

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "ordo/detail/coro_runtime.hpp"
#include "ordo/engine.hpp"
#include "ordo/io/dir_entry.hpp"
#include "ordo/io/options.hpp"
#include "ordo/io/request.hpp"

namespace ordo::io {

/// Outcomes that are not an errno.
enum class errc {
  eof = 1,         ///< an exact read (or recv) found the end of the data before reading anything
  short_transfer,  ///< an exact read/write/recv/send transferred only part of the buffer (EOF or peer closed)
};
[[nodiscard]] const std::error_category& io_category() noexcept;
[[nodiscard]] inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), io_category()}; }

/// A failed request: the errno (std::generic_category(), e.g. ENOENT, EBADF,
/// ECANCELED, ETIMEDOUT) or an io errc; names the operation, the path(s) of
/// requests given one (open, stat, mkdir, unlink, rmdir, rename, list_dir;
/// a relative path given with a directory fd says so) and, for exact
/// transfers that fell short, how many bytes did move. what() reads
/// "ordo::io open '/tmp/x/missing.txt': No such file or directory", or
/// "ordo::io rename 'a' (in directory fd 7) to 'b' (in directory fd 7): File exists".
class IoError : public std::system_error {
 public:
  /// `dirfd`, `new_dirfd`: the directories the paths are relative to (AT_FDCWD: none named).
  IoError(std::error_code ec, const char* op, std::size_t transferred = 0, std::string_view path = {},
          std::string_view new_path = {}, int dirfd = AT_FDCWD, int new_dirfd = AT_FDCWD);
  [[nodiscard]] const char* op() const noexcept { return op_; }
  [[nodiscard]] std::size_t transferred() const noexcept { return transferred_; }
  /// The path the request was given (rename: the old one); empty for requests without one.
  [[nodiscard]] const std::string& path() const noexcept;
  /// rename: the new path; empty for the others.
  [[nodiscard]] const std::string& new_path() const noexcept;

 private:
  struct Paths {
    std::string path, new_path;
  };
  const char* op_;
  std::size_t transferred_;
  // Shared, not string members: copying an exception must not throw.
  std::shared_ptr<const Paths> paths_;
};

/// What a request produced, handed to then() callbacks.
class Result {
 public:
  /// `req`: the finished request (its path, statx or listing), valid during the callback.
  Result(std::int64_t res, std::error_code ec, std::size_t transferred, const detail::Request& req) noexcept
      : res_(res), ec_(ec), transferred_(transferred), req_(&req) {}
  [[nodiscard]] bool ok() const noexcept { return !ec_; }
  [[nodiscard]] std::error_code error() const noexcept { return ec_; }
  /// Bytes transferred, the new fd (open/accept), the entry count (list_dir)
  /// or 0; throws IoError on failure.
  [[nodiscard]] std::size_t value() const;
  /// statx/fstat: the result (valid during the callback); throws IoError on failure.
  [[nodiscard]] const struct statx& stat() const;
  /// list_dir: the entries (valid during the callback; moving them out is
  /// fine); throws IoError on failure.
  [[nodiscard]] std::vector<DirEntry>& entries() const;
  /// Throws the IoError of a failed request.
  void rethrow_if_error() const;
  [[nodiscard]] std::exception_ptr exception() const;
  [[nodiscard]] const char* op() const noexcept;

 private:
  std::int64_t res_;
  std::error_code ec_;
  std::size_t transferred_;
  const detail::Request* req_;
};

class Reactor;
class Handle;
template <class T>
class IoOp;

namespace detail {

const char* op_name(OpCode code) noexcept;
/// The name errors use: op_name, but "rmdir" for an unlinkat with AT_REMOVEDIR.
const char* op_name(const Request& r) noexcept;

/// Small type-erased, move-only void(Result) callback.
class Callback {
 public:
  Callback() = default;
  template <class F>
  explicit Callback(F&& f) {
    using D = std::decay_t<F>;
    if constexpr (sizeof(D) <= sizeof(buf_) && alignof(D) <= alignof(std::max_align_t) &&
                  std::is_nothrow_move_constructible_v<D>) {
      ::new (static_cast<void*>(buf_)) D(std::forward<F>(f));
      call_ = [](Callback& c, const Result& r) { (*std::launder(reinterpret_cast<D*>(c.buf_)))(r); };
      destroy_ = [](Callback& c) noexcept { std::launder(reinterpret_cast<D*>(c.buf_))->~D(); };
      relocate_ = [](Callback& to, Callback& from) noexcept {
        D* src = std::launder(reinterpret_cast<D*>(from.buf_));
        ::new (static_cast<void*>(to.buf_)) D(std::move(*src));
        src->~D();
      };
    } else {
      heap_ = new D(std::forward<F>(f));
      call_ = [](Callback& c, const Result& r) { (*static_cast<D*>(c.heap_))(r); };
      destroy_ = [](Callback& c) noexcept { delete static_cast<D*>(c.heap_); };
    }
  }
  Callback(Callback&& o) noexcept { take(o); }
  Callback& operator=(Callback&& o) noexcept {
    if (this != &o) {
      reset();
      take(o);
    }
    return *this;
  }
  Callback(const Callback&) = delete;
  Callback& operator=(const Callback&) = delete;
  ~Callback() { reset(); }
  void reset() noexcept {
    if (destroy_ != nullptr) destroy_(*this);
    destroy_ = nullptr;
    call_ = nullptr;
    relocate_ = nullptr;
    heap_ = nullptr;
  }
  void operator()(const Result& r) { call_(*this, r); }
  [[nodiscard]] explicit operator bool() const noexcept { return call_ != nullptr; }

 private:
  void take(Callback& o) noexcept {
    if (o.call_ == nullptr) return;
    if (o.relocate_ != nullptr) {
      o.relocate_(*this, o);
    } else {
      heap_ = o.heap_;
    }
    call_ = o.call_;
    destroy_ = o.destroy_;
    relocate_ = o.relocate_;
    o.call_ = nullptr;
    o.destroy_ = nullptr;
    o.relocate_ = nullptr;
    o.heap_ = nullptr;
  }

  alignas(std::max_align_t) unsigned char buf_[48];
  void* heap_ = nullptr;
  void (*call_)(Callback&, const Result&) = nullptr;
  void (*destroy_)(Callback&) noexcept = nullptr;
  void (*relocate_)(Callback&, Callback&) noexcept = nullptr;  ///< null: on the heap
};

/// Common part of IoOp<T>, with the await machinery.
class IoOpBase {
 public:
  /// Moving is allowed before the start only (throws ordo::Error after).
  IoOpBase(IoOpBase&& o);
  IoOpBase& operator=(IoOpBase&&) = delete;
  IoOpBase(const IoOpBase&) = delete;
  IoOpBase& operator=(const IoOpBase&) = delete;
  ~IoOpBase();

 protected:
  IoOpBase(Reactor* io, OpCode code) noexcept : io_(io) { req_.code = code; }

  void set_timeout(std::chrono::nanoseconds d);
  void set_stop(std::stop_token token) { token_ = std::move(token); }
  void set_exact();
  /// Starts the request for a suspending coroutine; false: it has already
  /// finished and this thread is a worker where the resumption would be
  /// posted, so the coroutine goes on here (no queue hop).
  bool suspend(std::coroutine_handle<> h);
  /// After resumption: throws IoError on failure, else returns the raw value.
  std::int64_t outcome();
  Handle start_callback(Callback cb);
  Handle start_completion(OnComplete done);

  Reactor* io_;
  Request req_;
  std::unique_ptr<struct statx> stx_;  ///< statx/fstat only: the result (kept off every other awaitable)
  std::unique_ptr<std::vector<DirEntry>> entries_;  ///< list_dir only: the result
  bool exact_ = false;
  bool started_ = false;
  std::size_t total_ = 0;        ///< exact: bytes to move
  std::size_t transferred_ = 0;  ///< exact: bytes moved so far
  std::error_code ec_;           ///< the outcome, once delivered
  std::int64_t value_ = 0;
  std::coroutine_handle<> waiter_{};
  std::atomic<int> stop_state_{0};  ///< 0 not submitted, 1 submitted, 2 stop before submit
  std::atomic<bool> gate_{false};   ///< set by suspend's end and by delivery: the second resumes
  std::stop_token token_;
  struct StopFn {
    IoOpBase* op;
    void operator()() const noexcept;
  };
  std::optional<std::stop_callback<StopFn>> on_stop_;

  friend class ordo::io::Reactor;
  static void on_done(Request* r) noexcept;
  template <class>
  friend class ordo::io::IoOp;
};

}  // namespace detail

/// Cancels a request started with then(). Two words; a handle to a request
/// that has finished (and whose record was reused) is detected, never UB.
class Handle {
 public:
  Handle() = default;
  /// Requests cancellation: the request finishes with ECANCELED unless it
  /// completed first (exactly one outcome is delivered either way). Returns
  /// false if it had already been delivered.
  bool cancel() const;

 private:
  friend class detail::IoOpBase;
  friend class Reactor;
  Handle(Reactor* io, detail::Request* r, std::uint64_t gen) noexcept : io_(io), r_(r), gen_(gen) {}
  Reactor* io_ = nullptr;
  detail::Request* r_ = nullptr;
  std::uint64_t gen_ = 0;
};

/// One I/O operation, described and not started. Start it once:
///  - `co_await op`: the coroutine suspends (its worker goes on with other
///    work) and continues on an engine worker (IoOptions::resume_ctx) with
///    the value, or IoError thrown;
///  - `op.then(callback)`: callback(Result) runs on an engine worker;
///  - `op.then(done)` with an ordo::OnComplete: the async op finishes when the
///    I/O does (done() on success, done(IoError) on failure; for reads and
///    writes a short transfer is a failure: the op has no other way to say).
/// Movable until started (not after). The buffers it names must live until
/// it finishes.
template <class T>
class [[nodiscard]] IoOp : public detail::IoOpBase {
 public:
  /// A deadline, relative to the start: a request still pending then finishes
  /// with ETIMEDOUT (requests already running a blocking syscall on the
  /// thread backend complete).
  IoOp& timeout(std::chrono::nanoseconds d) & {
    set_timeout(d);
    return *this;
  }
  IoOp&& timeout(std::chrono::nanoseconds d) && {
    set_timeout(d);
    return std::move(*this);
  }
  /// Awaitable form: a stop request cancels the I/O (ECANCELED unless it completed).
  IoOp& stop_token(std::stop_token t) & {
    set_stop(std::move(t));
    return *this;
  }
  IoOp&& stop_token(std::stop_token t) && {
    set_stop(std::move(t));
    return std::move(*this);
  }
  /// read/write/recv/send: transfer the whole buffer, resubmitting after short
  /// transfers; ending early fails with errc::eof (nothing moved) or
  /// errc::short_transfer (IoError::transferred() says how much did).
  IoOp& exact() & {
    set_exact();
    return *this;
  }
  IoOp&& exact() && {
    set_exact();
    return std::move(*this);
  }

  [[nodiscard]] bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> h) { return suspend(h); }
  T await_resume() {
    const std::int64_t v = outcome();
    if constexpr (std::is_same_v<T, void>) {
      (void)v;
    } else if constexpr (std::is_same_v<T, struct statx>) {
      (void)v;
      return *stx_;
    } else if constexpr (std::is_same_v<T, std::vector<DirEntry>>) {
      (void)v;
      return std::move(*entries_);
    } else {
      return static_cast<T>(v);
    }
  }

  /// Starts the request; `f(Result)` runs on an engine worker when it finishes.
  template <class F>
    requires std::is_invocable_v<F&, const Result&>
  Handle then(F&& f) {
    return start_callback(detail::Callback(std::forward<F>(f)));
  }
  /// Starts the request as the body of an async op: `done` finishes the op.
  Handle then(OnComplete done) { return start_completion(done); }

 private:
  friend class Reactor;
 public:
  IoOp(IoOp&&) = default;

 private:
  template <class Fill>
  IoOp(Reactor* io, detail::OpCode code, Fill&& fill) : IoOpBase(io, code) {
    if constexpr (std::is_same_v<T, struct statx>) {
      stx_ = std::make_unique<struct statx>();
      req_.addr = stx_.get();
    } else if constexpr (std::is_same_v<T, std::vector<DirEntry>>) {
      entries_ = std::make_unique<std::vector<DirEntry>>();
      req_.addr = entries_.get();
    }
    fill(req_);
  }
};

/// The I/O reactor of an engine: owns the backend (an io_uring ring and its
/// reaper thread, or the thread backend) and hands every completion to the
/// engine: OnComplete calls happen on the reaper (bookkeeping only), callbacks
/// and coroutine resumptions are posted to the engine's workers. Requests
/// io_uring cannot run (list_dir; mkdir/unlink/rmdir/rename on a kernel
/// without their opcodes) go to a thread backend of the reactor's own,
/// started at the first one.
///
/// Timers: the engine's first io_uring Reactor also serves the engine's
/// timers (ordo::sleep_for / sleep_until / with_timeout, ordo/timer.hpp) as
/// timeouts in its ring, so the engine starts no timer thread; they count in
/// in_flight(). sleep_for() here is the same kernel timer. A `.timeout()`
/// stays the request's own linked timeout: it must cancel that request.
///
/// Destruction cancels every request still in flight, waits until each was
/// delivered and until every callback and resumption it posted has run. The
/// engine's sleeps it served are not cancelled: they move to the engine's
/// timer thread with their deadlines. Do not destroy a Reactor from inside
/// an op or coroutine that it must wait for.
///
/// Destroy a Reactor before its Engine (declare it after). If the engine
/// goes first, the engine's destructor does the above for the reactor
/// before it drains (the cancelled requests' callbacks and coroutines run
/// on the engine, seeing ECANCELED); from then on the reactor never
/// touches the engine: a request or push_read/push_write started on it
/// throws ordo::Error{Errc::shutting_down}, engine() must not be used, and
/// its destructor only frees its memory.
///
/// @par Thread safety
/// Every member may be called from any thread, concurrently, except the
/// destructor.
class Reactor {
 public:
  explicit Reactor(Engine& engine, IoOptions options = {});
  ~Reactor();
  Reactor(const Reactor&) = delete;
  Reactor& operator=(const Reactor&) = delete;

  [[nodiscard]] Backend backend() const noexcept { return kind_; }
  /// Why this backend was chosen (e.g. why io_uring was not usable).
  [[nodiscard]] const std::string& backend_reason() const noexcept { return reason_; }
  [[nodiscard]] Engine& engine() const noexcept { return engine_; }
  [[nodiscard]] const IoOptions& options() const noexcept { return opts_; }
  /// Requests started and not yet delivered (the engine's sleeps it serves included).
  [[nodiscard]] std::size_t in_flight() const noexcept;
  /// True when idle CPU workers of the engine wait in this reactor's ring
  /// and deliver its completions (IoOptions::idle_workers_reap, io_uring on
  /// Linux 6.7+, and no other reactor attached to the engine's workers).
  [[nodiscard]] bool idle_workers_reap() const noexcept;
  /// True when the ring runs completion work cooperatively
  /// (IoOptions::cooperative_taskrun, io_uring on Linux 5.19+, no SQPOLL).
  [[nodiscard]] bool cooperative_taskrun() const noexcept;
  /// Who consumed the completions so far.
  [[nodiscard]] ReactorStats stats() const noexcept;

  // Files. Offsets are absolute; kCurrent reads/writes at the file position.
  static constexpr std::uint64_t kCurrent = detail::kNoOffset;
  IoOp<int> open(std::string path, int flags, mode_t mode = 0644);
  IoOp<void> close(int fd);
  IoOp<std::size_t> read(int fd, std::span<std::byte> buf, std::uint64_t offset);
  IoOp<std::size_t> write(int fd, std::span<const std::byte> buf, std::uint64_t offset);
  IoOp<std::size_t> readv(int fd, std::span<const iovec> iov, std::uint64_t offset);
  IoOp<std::size_t> writev(int fd, std::span<const iovec> iov, std::uint64_t offset);
  IoOp<void> fsync(int fd);
  IoOp<void> fdatasync(int fd);
  IoOp<struct statx> stat(std::string path, unsigned mask = STATX_BASIC_STATS, int flags = 0);
  IoOp<struct statx> fstat(int fd, unsigned mask = STATX_BASIC_STATS);

  // The file system. A relative path is resolved against the working
  // directory, or against `dirfd` in the forms that take one: an open
  // directory (open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)), which stays
  // the caller's; AT_FDCWD is the working directory, and an absolute path
  // ignores it (openat(2)). Failures are IoErrors naming the op and the path.
  IoOp<int> open(int dirfd, std::string path, int flags, mode_t mode = 0644);
  IoOp<struct statx> stat(int dirfd, std::string path, unsigned mask = STATX_BASIC_STATS, int flags = 0);
  IoOp<void> mkdir(std::string path, mode_t mode = 0755);
  IoOp<void> mkdir(int dirfd, std::string path, mode_t mode = 0755);
  /// Removes a name that is not a directory (unlinkat(2)).
  IoOp<void> unlink(std::string path);
  IoOp<void> unlink(int dirfd, std::string path);
  /// Removes an empty directory (unlinkat(2) with AT_REMOVEDIR): ENOTEMPTY otherwise.
  IoOp<void> rmdir(std::string path);
  IoOp<void> rmdir(int dirfd, std::string path);
  /// renameat2(2): `flags` 0, RENAME_NOREPLACE (EEXIST if `to` exists),
  /// RENAME_EXCHANGE or RENAME_WHITEOUT (<stdio.h>, or <linux/fs.h>).
  IoOp<void> rename(std::string from, std::string to, unsigned flags = 0);
  IoOp<void> rename(int from_dirfd, std::string from, int to_dirfd, std::string to, unsigned flags = 0);
  /// The entries of a directory, sorted by name, without "." and "..". Runs
  /// on a blocking thread (io_uring has no getdents): on the io_uring
  /// backend, the reactor's own thread backend, started at the first such
  /// request. A timeout or stop ends it while queued; a running listing completes.
  IoOp<std::vector<DirEntry>> list_dir(std::string path);
  IoOp<std::vector<DirEntry>> list_dir(int dirfd, std::string path);
  /// The next entries of the open directory `dir_fd` from its position on,
  /// in the order the file system keeps them ("." and ".." left out): one
  /// getdents64(2) batch (32 KiB of records), which advances the position;
  /// empty at the end. One read_dir at a time per descriptor. Runs where
  /// list_dir does. ordo::io::dir_entries (ordo/io/files.hpp) streams a
  /// directory with it.
  IoOp<std::vector<DirEntry>> read_dir(int dir_fd);

  // Sockets.
  IoOp<int> accept(int listen_fd);
  IoOp<void> connect(int fd, const sockaddr* addr, socklen_t len);
  IoOp<std::size_t> recv(int fd, std::span<std::byte> buf, int flags = 0);
  IoOp<std::size_t> send(int fd, std::span<const std::byte> buf, int flags = 0);

  // Time. A kernel timer (io_uring timeout; the thread backend's poll
  // thread), cancellable like any request; ordo::sleep_for needs no reactor.
  IoOp<void> sleep_for(std::chrono::nanoseconds d);

  /// Pushes an op mutating `buffer_var` (and reading `file_var`, if given:
  /// so it comes after earlier writes of the file pushed with that variable)
  /// that reads exactly buf.size() bytes at `offset` into `buf`: ops pushed
  /// later that read `buffer_var` see the data; an I/O error (EOF and short
  /// reads included) becomes the op's error and marks `buffer_var` like an
  /// exception would. The read is issued where the op becomes ready (no
  /// worker waits for it).
  void push_read(Var buffer_var, int fd, std::span<std::byte> buf, std::uint64_t offset, Var file_var = {},
                 OpAttrs attrs = {});
  /// Pushes an op reading `buffer_var` (and mutating `file_var` if given) that
  /// writes all of `buf` at `offset`.
  void push_write(Var buffer_var, int fd, std::span<const std::byte> buf, std::uint64_t offset,
                  Var file_var = {}, OpAttrs attrs = {});

 private:
  friend class detail::IoOpBase;
  friend class Handle;
  struct Pooled;
  static void pooled_done(detail::Request* r) noexcept;
  /// Begins r's slice in the engine's trace (profiling on only).
  void profile_start(detail::Request* r) noexcept;
  Handle start_pooled(detail::IoOpBase& op, bool completion, detail::Callback* cb, OnComplete done);
  void start(detail::Request* r);
  void cancel(detail::Request* r);
  /// The backend that runs requests of `code` (creates the blocking one at
  /// the first request the main backend does not support); may throw.
  detail::BackendImpl& route(detail::OpCode code);
  Pooled* alloc_pooled();
  void free_pooled(Pooled* p) noexcept;
  void post_resume(std::coroutine_handle<> h) noexcept;
  /// The calling thread is a worker where post_resume's post could run.
  [[nodiscard]] bool resume_here() const noexcept { return engine_.on_worker_of(opts_.resume_ctx); }
  void post_callback(Pooled* p) noexcept;
  void task_done() noexcept;
  /// The destructor's work, also done by the engine's destructor when the
  /// engine goes first (State::engine_closing): every request cancelled and
  /// delivered, every posted task run. Once only.
  void close() noexcept;
  /// Throws Errc::shutting_down once the engine was destroyed (close() ran for it).
  void check_engine() const;

  Engine& engine_;
  IoOptions opts_;
  Backend kind_ = Backend::automatic;
  std::string reason_;
  std::unique_ptr<detail::BackendImpl> backend_;
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ordo::io

template <>
struct std::is_error_code_enum<ordo::io::errc> : std::true_type {};

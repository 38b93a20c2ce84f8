// io/reactor.cpp - ordo::io::Reactor: backend choice, request delivery to the
// engine (OnComplete, posted callbacks, coroutine resumption), exact
// transfers, cancellation and an orderly shutdown.
#include <fcntl.h>

#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <mutex>
#include <string_view>
#include <vector>

#include "backends.hpp"
#include "ordo/detail/env.hpp"
#include "ordo/detail/extension.hpp"
#include "ordo/io.hpp"

namespace ordo::io {

// ---------------------------------------------------------------------------
// Options, errors, results

// The parsing (on/off spellings, numbers, the error naming the variable) is
// the core's detail::env_*, shared with Options::from_env.
IoOptions IoOptions::from_env() {
  IoOptions o;
  if (const auto b = ordo::detail::env_value("ORDO_IO_BACKEND")) {
    if (*b == "uring" || *b == "io_uring") {
      o.backend = Backend::uring;
    } else if (*b == "threads") {
      o.backend = Backend::threads;
    } else if (*b == "auto" || b->empty()) {
      o.backend = Backend::automatic;
    } else {
      ordo::detail::bad_env("ORDO_IO_BACKEND", *b, "a backend", "auto, uring or threads");
    }
  }
  ordo::detail::env_integer("ORDO_IO_THREADS", o.threads, 1U, 1024U);
  ordo::detail::env_bool("ORDO_IO_IDLE_WORKERS_REAP", o.idle_workers_reap);
  ordo::detail::env_bool("ORDO_IO_COOPERATIVE_TASKRUN", o.cooperative_taskrun);
  ordo::detail::env_bool("ORDO_IO_CACHED_READS_INLINE", o.cached_reads_inline);
  return o;
}

namespace {
class IoCategory final : public std::error_category {
 public:
  [[nodiscard]] const char* name() const noexcept override { return "ordo.io"; }
  [[nodiscard]] std::string message(int v) const override {
    switch (static_cast<errc>(v)) {
      case errc::eof:
        return "end of file (nothing transferred)";
      case errc::short_transfer:
        return "short transfer (end of data before the buffer was complete)";
    }
    return "unknown ordo.io error " + std::to_string(v);
  }
};

// A path in an error message; a relative one given with a directory fd
// names the fd too, as the path alone does not say where it was looked up.
void append_path(std::string& s, std::string_view path, int dirfd) {
  s += " '";
  s += path;
  s += '\'';
  if (dirfd != AT_FDCWD && path.front() != '/') s += " (in directory fd " + std::to_string(dirfd) + ")";
}

// std::system_error appends ": " + ec.message() to this prefix, so what()
// reads "ordo::io read: Bad file descriptor" (the message is not repeated),
// or "ordo::io open '/tmp/x': No such file or directory" for a request given
// a path: an errno alone does not say which file was missing.
std::string describe(std::error_code ec, const char* op, std::size_t transferred, std::string_view path,
                     std::string_view new_path, int dirfd, int new_dirfd) {
  std::string s = std::string("ordo::io ") + op;
  if (!path.empty()) append_path(s, path, dirfd);
  if (!new_path.empty()) {
    s += " to";
    append_path(s, new_path, new_dirfd);
  }
  if (ec == errc::short_transfer) s += " after " + std::to_string(transferred) + " bytes";
  return s;
}
}  // namespace

const std::error_category& io_category() noexcept {
  static const IoCategory category;
  return category;
}

IoError::IoError(std::error_code ec, const char* op, std::size_t transferred, std::string_view path,
                 std::string_view new_path, int dirfd, int new_dirfd)
    : std::system_error(ec, describe(ec, op, transferred, path, new_path, dirfd, new_dirfd)),
      op_(op),
      transferred_(transferred),
      paths_(path.empty() && new_path.empty() ? nullptr
                                               : std::make_shared<const Paths>(Paths{std::string(path),
                                                                                     std::string(new_path)})) {}

const std::string& IoError::path() const noexcept {
  static const std::string none;
  return paths_ ? paths_->path : none;
}

const std::string& IoError::new_path() const noexcept {
  static const std::string none;
  return paths_ ? paths_->new_path : none;
}

namespace {
/// The IoError of a failed request, naming its op and paths.
IoError request_error(std::error_code ec, std::size_t transferred, const detail::Request& r) {
  const bool two = r.code == detail::OpCode::renameat;
  return IoError(ec, detail::op_name(r), transferred, r.path, two ? std::string_view(r.path2) : std::string_view(),
                 r.path.empty() ? AT_FDCWD : r.fd, two ? r.fd2 : AT_FDCWD);
}
}  // namespace

const char* Result::op() const noexcept { return detail::op_name(*req_); }

void Result::rethrow_if_error() const {
  if (ec_) throw request_error(ec_, transferred_, *req_);
}

std::size_t Result::value() const {
  rethrow_if_error();
  return static_cast<std::size_t>(res_);
}

const struct statx& Result::stat() const {
  rethrow_if_error();
  if (req_->code != detail::OpCode::statx) {
    throw Error(Errc::invalid_argument, std::string("Result::stat() of a ") + op() + " request");
  }
  return *static_cast<const struct statx*>(req_->addr);
}

std::vector<DirEntry>& Result::entries() const {
  rethrow_if_error();
  if (req_->code != detail::OpCode::list_dir && req_->code != detail::OpCode::read_dir) {
    throw Error(Errc::invalid_argument, std::string("Result::entries() of a ") + op() + " request");
  }
  return *static_cast<std::vector<DirEntry>*>(req_->addr);
}

std::exception_ptr Result::exception() const {
  if (!ec_) return nullptr;
  return std::make_exception_ptr(request_error(ec_, transferred_, *req_));
}

namespace detail {

const char* op_name(OpCode code) noexcept {
  switch (code) {
    case OpCode::nop: return "nop";
    case OpCode::openat: return "open";
    case OpCode::close: return "close";
    case OpCode::read: return "read";
    case OpCode::write: return "write";
    case OpCode::readv: return "readv";
    case OpCode::writev: return "writev";
    case OpCode::fsync: return "fsync";
    case OpCode::statx: return "statx";
    case OpCode::accept: return "accept";
    case OpCode::connect: return "connect";
    case OpCode::recv: return "recv";
    case OpCode::send: return "send";
    case OpCode::timer: return "sleep_for";
    case OpCode::mkdirat: return "mkdir";
    case OpCode::unlinkat: return "unlink";
    case OpCode::renameat: return "rename";
    case OpCode::list_dir: return "list_dir";
    case OpCode::read_dir: return "read_dir";
  }
  return "io";
}

const char* op_name(const Request& r) noexcept {
  if (r.code == OpCode::unlinkat && (r.op_flags & AT_REMOVEDIR) != 0) return "rmdir";
  return op_name(r.code);
}

namespace {

void copy_description(const Request& from, Request& to) {
  to.code = from.code;
  to.fd = from.fd;
  to.addr = from.addr;
  to.len = from.len;
  to.off = from.off;
  to.op_flags = from.op_flags;
  to.mode = from.mode;
  to.deadline_ns = from.deadline_ns;
  to.path = from.path;
  to.fd2 = from.fd2;
  to.path2 = from.path2;
  to.sa = from.sa;
  to.sa_len = from.sa_len;
  to.res = 0;
  to.backend_flags = 0;
  to.backend_state.store(0, std::memory_order_relaxed);
}

/// Progress of an exact transfer.
struct Exact {
  bool on = false;
  std::size_t total = 0;
  std::size_t moved = 0;
};

/// After a short exact transfer: advances the request and returns true if it
/// must be submitted again.
bool advance_exact(Request* r, Exact& x) {
  if (!x.on || r->res <= 0) return false;
  x.moved += static_cast<std::size_t>(r->res);
  if (x.moved >= x.total) return false;
  r->addr = static_cast<std::byte*>(r->addr) + r->res;
  r->len -= static_cast<std::uint64_t>(r->res);
  if (r->off != kNoOffset) r->off += static_cast<std::uint64_t>(r->res);
  return true;
}

/// The request's final outcome.
void settle(const Request* r, const Exact& x, std::error_code& ec, std::int64_t& value) {
  if (r->res < 0) {
    ec = std::error_code(static_cast<int>(-r->res), std::generic_category());
    value = 0;
    return;
  }
  if (!x.on) {
    ec = {};
    value = r->res;
    return;
  }
  if (x.moved >= x.total) {
    ec = {};
    value = static_cast<std::int64_t>(x.total);
  } else {
    ec = make_error_code(x.moved == 0 ? errc::eof : errc::short_transfer);
    value = static_cast<std::int64_t>(x.moved);
  }
}

}  // namespace

// ---------------------------------------------------------------------------
// IoOpBase: the awaitable form

IoOpBase::~IoOpBase() = default;

IoOpBase::IoOpBase(IoOpBase&& o) : io_(o.io_) {
  if (o.started_) throw Error(Errc::invalid_argument, "an ordo::io::IoOp was moved after it started");
  copy_description(o.req_, req_);
  stx_ = std::move(o.stx_);  // on the heap: req_.addr stays valid
  entries_ = std::move(o.entries_);
  exact_ = o.exact_;
  token_ = std::move(o.token_);
}

void IoOpBase::set_timeout(std::chrono::nanoseconds d) {
  if (started_) throw Error(Errc::invalid_argument, "IoOp::timeout after the request started");
  if (d.count() <= 0) throw Error(Errc::invalid_argument, "IoOp::timeout needs a positive duration");
  if (req_.code == OpCode::timer) throw Error(Errc::invalid_argument, "IoOp::timeout on sleep_for");
  req_.deadline_ns = d.count();
}

void IoOpBase::set_exact() {
  if (started_) throw Error(Errc::invalid_argument, "IoOp::exact after the request started");
  switch (req_.code) {
    case OpCode::read:
    case OpCode::write:
    case OpCode::recv:
    case OpCode::send:
      exact_ = true;
      return;
    default:
      throw Error(Errc::invalid_argument, std::string("IoOp::exact on ") + op_name(req_.code) +
                                              " (only read, write, recv and send)");
  }
}

void IoOpBase::StopFn::operator()() const noexcept {
  int s = op->stop_state_.load(std::memory_order_acquire);
  if (s == 0 && op->stop_state_.compare_exchange_strong(s, 2, std::memory_order_acq_rel)) return;  // before submit
  if (s == 1) op->io_->cancel(&op->req_);
}

bool IoOpBase::suspend(std::coroutine_handle<> h) {
  if (started_) throw Error(Errc::invalid_argument, "an ordo::io::IoOp was started twice");
  io_->check_engine();
  started_ = true;
  waiter_ = h;
  total_ = static_cast<std::size_t>(req_.len);
  req_.user = this;
  req_.done = &IoOpBase::on_done;
  if (token_.stop_possible()) on_stop_.emplace(token_, StopFn{this});
  io_->start(&req_);
  int s = 0;
  if (!stop_state_.compare_exchange_strong(s, 1, std::memory_order_acq_rel)) io_->cancel(&req_);  // stopped meanwhile
  // The request may already be delivered: whichever of this and on_done
  // comes second resumes the coroutine (the frame stays valid until then).
  if (!gate_.exchange(true, std::memory_order_acq_rel)) return true;  // on_done will
  // Delivered during the submit (io_uring reaps what the kernel completed
  // inline). On a worker where the resumption would be posted, go on here:
  // the same place, one queue hop and maybe a cross-core migration less.
  if (io_->resume_here()) return false;
  const ReleasedBy released(req_);  // the resumption is what the request released
  io_->post_resume(waiter_);
  return true;
}

void IoOpBase::on_done(Request* r) noexcept {
  auto* op = static_cast<IoOpBase*>(r->user);
  Exact x{op->exact_, op->total_, op->transferred_};
  if (advance_exact(r, x)) {
    op->transferred_ = x.moved;
    op->io_->start(r);
    return;
  }
  op->transferred_ = x.moved;
  settle(r, x, op->ec_, op->value_);
  Reactor* io = op->io_;
  const std::coroutine_handle<> waiter = op->waiter_;
  if (op->gate_.exchange(true, std::memory_order_acq_rel)) io->post_resume(waiter);
}

std::int64_t IoOpBase::outcome() {
  on_stop_.reset();
  if (ec_) throw request_error(ec_, transferred_, req_);
  return value_;
}

}  // namespace detail

// ---------------------------------------------------------------------------
// Reactor

/// A request started with then(): lives in the reactor's pool (never freed
/// before the reactor, so a stale Handle only finds a bumped generation).
struct Reactor::Pooled {
  detail::Request req;
  Reactor* io = nullptr;
  struct statx stx{};
  std::vector<DirEntry> entries;
  detail::Callback cb;
  OnComplete done;
  bool completion = false;
  detail::Exact exact;
  Pooled* free_next = nullptr;
};

/// Besides its own state, the reactor serves its engine's timers
/// (ordo::sleep_for / sleep_until, and so with_timeout) when it is the
/// engine's first io_uring reactor: each is a timeout request in the ring,
/// at the timer's absolute deadline, so no timer thread is started and the
/// expiry is delivered as io's own sleeps are (by an idle worker waiting in
/// the ring, or the reaper). The TimerService decides and arbitrates; this
/// only turns a timer into a request and back (docs/coroutines.md, "Timers").
struct Reactor::State final : ordo::detail::TimerService::Delegate,
                              ordo::detail::StatsSource,
                              ordo::detail::EngineWatcher {
  using TimerService = ordo::detail::TimerService;

  /// Every request this reactor starts points here (Request::tap).
  detail::IoTap tap;
  std::string backend_name;  ///< "io_uring" or "threads", for Engine::stats()

  /// Engine::stats(): requests per kind, registered while the reactor lives.
  void add_to(EngineStats& out) const noexcept override {
    try {
      if (!out.io_backend.empty()) out.io_backend += ',';
      out.io_backend += backend_name;
      for (int c = 0; c < detail::kOpCodes; ++c) {
        // delivered first: a request is counted as started before it can be
        // delivered, so started - delivered never goes below zero.
        const std::uint64_t delivered = tap.delivered[c].load(std::memory_order_relaxed);
        const std::uint64_t started = tap.started[c].load(std::memory_order_relaxed);
        if (started == 0) continue;
        const char* kind = detail::op_name(static_cast<detail::OpCode>(c));
        auto it = std::find_if(out.io.begin(), out.io.end(), [&](const IoKindStats& k) { return k.kind == kind; });
        if (it == out.io.end()) it = out.io.insert(out.io.end(), IoKindStats{kind, 0, 0});
        it->submitted += started;
        it->in_flight += started - std::min(started, delivered);
      }
    } catch (...) {  // out of memory: the snapshot lacks these rows
    }
  }

  /// The engine's destructor began while this reactor lives: it shuts down
  /// now (requests cancelled and delivered, callbacks run by the engine
  /// that is still draining), and never touches the engine again.
  void engine_closing() noexcept override {
    io->close();
    engine_gone.store(true, std::memory_order_release);
  }
  /// Set by engine_closing (release); read (acquire) by the destructor and
  /// by every request or push started afterwards, which throw.
  std::atomic<bool> engine_gone{false};

  /// One engine timer in the ring: freed by its delivery, after settle().
  struct Sleep : TimerService::Claim {
    detail::Request req;
    TimerService* service = nullptr;
  };

  bool arm(TimerService& service, TimerService::Timer* t) noexcept override {
    auto* sleep = new (std::nothrow) Sleep;
    if (sleep == nullptr) return false;
    sleep->service = &service;
    sleep->req.code = detail::OpCode::timer;
    sleep->req.op_flags = detail::kTimerAbsolute;
    sleep->req.deadline_ns = t->deadline_ns > 0 ? t->deadline_ns : 1;
    sleep->req.user = sleep;
    sleep->req.done = &State::sleep_done;
    TimerService::hold(*sleep, t, this);
    io->start(&sleep->req);  // closed: delivered here, cancelled (handed back)
    return true;
  }
  /// Expired (0): fires; cancelled by the reactor's destruction (or failed):
  /// back to the service, which keeps the deadline on its thread. A timer
  /// disarmed before is no longer in the claim: nothing happens.
  static void sleep_done(detail::Request* r) noexcept {
    auto* sleep = static_cast<Sleep*>(r->user);
    sleep->service->settle(sleep, r->res == 0);
    delete sleep;
  }
  bool retain(TimerService::Claim* c) noexcept override { return detail::try_retain(&static_cast<Sleep*>(c)->req); }
  void cancel(TimerService::Claim* c) noexcept override { io->backend_->cancel(&static_cast<Sleep*>(c)->req); }

  Reactor* io = nullptr;
  TimerService* timers = nullptr;  ///< the engine's, when this reactor serves them (attached)

  std::mutex pool_mutex;
  std::vector<std::unique_ptr<Pooled>> pool_storage;  ///< guarded by pool_mutex
  Pooled* pool_free = nullptr;                        ///< guarded by pool_mutex

  std::atomic<bool> closed{false};
  std::atomic<int> starting{0};  ///< start() calls in progress
  /// Posted callbacks/resumptions not yet finished, plus one held by the
  /// reactor itself until its destructor drops it: so the count reaches zero
  /// exactly once, in the destructor or in the task_done() of the last task,
  /// and only that one thread touches the mutex below (no lock per task).
  /// Incremented (relaxed: the post that follows publishes the task) before
  /// each post, decremented (acq_rel) when the task has finished.
  std::atomic<std::int64_t> tasks{1};
  std::mutex drained_mutex;
  std::condition_variable drained_cv;
  bool drained = false;  ///< guarded by drained_mutex: set by whoever brings `tasks` to zero

  /// A thread backend for the requests the main backend does not support
  /// (io_uring: list_dir, and the file-system opcodes an older kernel
  /// lacks). Made once, by the first start() that needs it (under
  /// blocking_mutex); `blocking` is published with release, read with
  /// acquire; shut down and destroyed with the reactor.
  std::mutex blocking_mutex;
  std::unique_ptr<detail::BackendImpl> blocking_owner;  ///< guarded by blocking_mutex
  std::atomic<detail::BackendImpl*> blocking{nullptr};
};

Reactor::Reactor(Engine& engine, IoOptions options)
    : engine_(engine), opts_(std::move(options)), state_(std::make_unique<State>()) {
  state_->io = this;
  std::string why_not;
  if (opts_.backend != Backend::threads) {
#if defined(ORDO_IO_HAVE_URING)
    backend_ = detail::make_uring_backend(opts_, &engine_, why_not);
#else
    why_not = "ordo was built without liburing";
#endif
    if (!backend_ && opts_.backend == Backend::uring) {
      throw Error(Errc::invalid_argument, "ordo::io::Reactor: io_uring requested but unavailable: " + why_not);
    }
  }
  if (backend_) {
    kind_ = Backend::uring;
    reason_ = opts_.backend == Backend::uring ? "io_uring (requested)" : "io_uring (available)";
    if (opts_.cooperative_taskrun) {
      reason_ += backend_->cooperative_taskrun() ? ", cooperative task running"
                                                 : opts_.sqpoll ? ", cooperative task running not used with SQPOLL"
                                                                : ", cooperative task running unavailable (Linux 5.19+)";
    }
  } else {
    backend_ = detail::make_threads_backend(opts_);
    kind_ = Backend::threads;
    reason_ = opts_.backend == Backend::threads ? "threads (requested)" : "threads: " + why_not;
  }
  state_->backend_name = kind_ == Backend::uring ? "io_uring" : "threads";
  state_->tap.profiler = ordo::detail::EngineExtension::profiler(engine_);
  if (opts_.log) {
    opts_.log("ordo::io: backend " + reason_);
  } else if (opts_.backend == Backend::automatic && kind_ == Backend::threads) {
    std::fprintf(stderr, "ordo::io: io_uring unavailable (%s); using the thread backend\n", why_not.c_str());
  }
  // After the log (a user function that may throw); undone if the timers throw.
  ordo::detail::EngineExtension::add_stats_source(engine_, state_.get());
  // The ring's timeouts serve the engine's timers; the thread backend's poll
  // thread would be one more timer thread (with a linear scan), so there the
  // engine's own thread stays.
  if (kind_ == Backend::uring) {
    try {
      ordo::detail::TimerService& timers = ordo::detail::EngineExtension::timers(engine_);
      if (timers.attach(state_.get())) state_->timers = &timers;
    } catch (...) {
      ordo::detail::EngineExtension::remove_stats_source(engine_, state_.get());
      throw;
    }
  }
  try {
    ordo::detail::EngineExtension::watch(engine_, state_.get());
  } catch (...) {
    ordo::detail::EngineExtension::remove_stats_source(engine_, state_.get());
    close();
    throw;
  }
}

Reactor::~Reactor() {
  State& s = *state_;
  // Destroyed after its engine: the engine's destructor closed it already.
  if (s.engine_gone.load(std::memory_order_acquire)) return;
  if (!ordo::detail::EngineExtension::unwatch(engine_, &s)) return;  // the engine's destructor took it
  ordo::detail::EngineExtension::remove_stats_source(engine_, &s);
  close();
}

void Reactor::check_engine() const {
  if (state_->engine_gone.load(std::memory_order_acquire)) {
    throw Error(Errc::shutting_down,
                "ordo::io::Reactor: a request started after the reactor's engine was destroyed (the engine's "
                "destructor shut this reactor down; destroy a Reactor before its Engine)");
  }
}

void Reactor::close() noexcept {
  State& s = *state_;
  // No new engine timer comes here; those in the ring are cancelled by the
  // shutdown below and handed back to the engine's timer thread.
  if (s.timers != nullptr) s.timers->detach(&s);
  s.timers = nullptr;
  s.closed.store(true, std::memory_order_seq_cst);
  while (s.starting.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  backend_->shutdown();  // every request delivered: their callbacks and resumptions are posted
  if (detail::BackendImpl* b = s.blocking.load(std::memory_order_acquire)) b->shutdown();
  if (s.tasks.fetch_sub(1, std::memory_order_acq_rel) != 1) {
    std::unique_lock lock(s.drained_mutex);
    s.drained_cv.wait(lock, [&] { return s.drained; });
  }
}

std::size_t Reactor::in_flight() const noexcept {
  const detail::BackendImpl* b = state_->blocking.load(std::memory_order_acquire);
  return backend_->in_flight() + (b != nullptr ? b->in_flight() : 0);
}

detail::BackendImpl& Reactor::route(detail::OpCode code) {
  switch (code) {  // only these may be unsupported: the hot path asks no virtual question
    case detail::OpCode::mkdirat:
    case detail::OpCode::unlinkat:
    case detail::OpCode::renameat:
    case detail::OpCode::list_dir:
    case detail::OpCode::read_dir:
      break;
    default:
      return *backend_;
  }
  if (backend_->supports(code)) return *backend_;
  State& s = *state_;
  if (detail::BackendImpl* b = s.blocking.load(std::memory_order_acquire)) return *b;
  std::lock_guard lock(s.blocking_mutex);
  if (!s.blocking_owner) {
    s.blocking_owner = detail::make_threads_backend(opts_);
    s.blocking.store(s.blocking_owner.get(), std::memory_order_release);
  }
  return *s.blocking_owner;
}
bool Reactor::idle_workers_reap() const noexcept { return backend_->workers_reap(); }
bool Reactor::cooperative_taskrun() const noexcept { return backend_->cooperative_taskrun(); }
ReactorStats Reactor::stats() const noexcept { return backend_->stats(); }

void Reactor::start(detail::Request* r) {
  State& s = *state_;
  r->refs.store(1, std::memory_order_relaxed);
  r->tap = &s.tap;
  s.tap.started[static_cast<int>(r->code)].fetch_add(1, std::memory_order_relaxed);
  if (s.tap.profiler != nullptr) [[unlikely]] profile_start(r);
  s.starting.fetch_add(1, std::memory_order_seq_cst);
  if (s.closed.load(std::memory_order_seq_cst)) {
    s.starting.fetch_sub(1, std::memory_order_seq_cst);
    // The reactor is shutting down: the request is cancelled at once. Its
    // delivery is bookkeeping (a post or an OnComplete), fine on this thread.
    const CompletionThread scope;
    detail::finish_op(r, -ECANCELED);
    return;
  }
  detail::BackendImpl* backend = nullptr;
  std::int64_t failed = 0;
  try {
    backend = &route(r->code);
  } catch (const std::system_error& e) {  // no blocking backend: no eventfd or thread
    failed = e.code().category() == std::generic_category() ? -e.code().value() : -EAGAIN;
  } catch (...) {
    failed = -ENOMEM;
  }
  if (backend != nullptr) {
    backend->submit(r);
  } else {
    const CompletionThread scope;
    detail::finish_op(r, failed);
  }
  s.starting.fetch_sub(1, std::memory_order_seq_cst);
}

void Reactor::profile_start(detail::Request* r) noexcept {
  std::uint64_t bytes = 0;
  switch (r->code) {
    case detail::OpCode::read:
    case detail::OpCode::write:
    case detail::OpCode::recv:
    case detail::OpCode::send:
      bytes = r->len;
      break;
    case detail::OpCode::readv:
    case detail::OpCode::writev:
      for (std::uint64_t i = 0; i < r->len; ++i) bytes += static_cast<const iovec*>(r->addr)[i].iov_len;
      break;
    default:
      break;
  }
  // The backend that runs it: the thread backend serves what io_uring cannot.
  const char* track = kind_ == Backend::uring && backend_->supports(r->code) ? "io_uring" : "threads";
  r->prof_id = ordo::detail::profile_slice_begin(state_->tap.profiler, ordo::detail::SliceCategory::io,
                                                 detail::op_name(*r), track, bytes);
}

void Reactor::cancel(detail::Request* r) {
  // route() cannot throw here: the request was submitted, so its backend exists.
  if (detail::try_retain(r)) route(r->code).cancel(r);  // else delivered (or being delivered): too late
}

bool Handle::cancel() const {
  if (r_ == nullptr || !detail::try_retain(r_)) return false;
  if (r_->gen.load(std::memory_order_acquire) != gen_) {
    // The record was reused by another request: undo (the drop may deliver it).
    const CompletionThread scope;
    detail::release(r_);
    return false;
  }
  io_->route(r_->code).cancel(r_);
  return true;
}

Reactor::Pooled* Reactor::alloc_pooled() {
  State& s = *state_;
  std::lock_guard lock(s.pool_mutex);
  Pooled* p = s.pool_free;
  if (p != nullptr) {
    s.pool_free = p->free_next;
    return p;
  }
  s.pool_storage.push_back(std::make_unique<Pooled>());
  return s.pool_storage.back().get();
}

void Reactor::free_pooled(Pooled* p) noexcept {
  p->cb.reset();
  p->done = OnComplete{};
  std::vector<DirEntry>().swap(p->entries);
  p->req.gen.fetch_add(1, std::memory_order_acq_rel);
  State& s = *state_;
  std::lock_guard lock(s.pool_mutex);
  p->free_next = s.pool_free;
  s.pool_free = p;
}

void Reactor::task_done() noexcept {
  State& s = *state_;
  if (s.tasks.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // The last task after the destructor dropped its reference: it waits for this.
  std::lock_guard lock(s.drained_mutex);
  s.drained = true;
  s.drained_cv.notify_all();
}

void Reactor::post_resume(std::coroutine_handle<> h) noexcept {
  state_->tasks.fetch_add(1, std::memory_order_relaxed);
  try {
    engine_.post([this, h] {
      ordo::detail::resume(h);
      task_done();
    }, opts_.resume_ctx, {.name = "ordo::io resume"});
  } catch (...) {
    // Out of memory for the post: resuming here is the only way not to lose the coroutine.
    ordo::detail::resume(h);
    task_done();
  }
}

void Reactor::post_callback(Pooled* p) noexcept {
  state_->tasks.fetch_add(1, std::memory_order_relaxed);
  auto run = [this, p] {
    struct Finish {
      Reactor* io;
      Pooled* p;
      ~Finish() {
        io->free_pooled(p);
        io->task_done();
      }
    } finish{this, p};
    std::error_code ec;
    std::int64_t value = 0;
    detail::settle(&p->req, p->exact, ec, value);
    const Result result(value, ec, p->exact.moved, p->req);
    p->cb(result);
  };
  try {
    engine_.post(run, opts_.resume_ctx, {.name = "ordo::io callback"});
  } catch (...) {
    run();
  }
}

void Reactor::pooled_done(detail::Request* r) noexcept {
  auto* p = static_cast<Pooled*>(r->user);
  Reactor* io = p->io;
  if (detail::advance_exact(r, p->exact)) {
    io->start(r);
    return;
  }
  if (!p->completion) {
    io->post_callback(p);
    return;
  }
  std::error_code ec;
  std::int64_t value = 0;
  detail::settle(r, p->exact, ec, value);
  const OnComplete done = p->done;
  std::exception_ptr error;
  if (ec) {
    try {
      error = std::make_exception_ptr(request_error(ec, p->exact.moved, *r));
    } catch (...) {
      error = std::current_exception();
    }
  }
  io->free_pooled(p);
  try {
    done(error);
  } catch (...) {
    // A second completion of the same op: the op's owner broke the
    // one-completion rule; the engine reports it through the OnComplete.
    std::fprintf(stderr, "ordo::io: the OnComplete given to then() was already called\n");
  }
}

Handle Reactor::start_pooled(detail::IoOpBase& op, bool completion, detail::Callback* cb, OnComplete done) {
  if (op.started_) throw Error(Errc::invalid_argument, "an ordo::io::IoOp was started twice");
  check_engine();
  op.started_ = true;
  Pooled* p = alloc_pooled();
  detail::copy_description(op.req_, p->req);
  if (p->req.code == detail::OpCode::statx) p->req.addr = &p->stx;
  if (p->req.code == detail::OpCode::list_dir || p->req.code == detail::OpCode::read_dir) p->req.addr = &p->entries;
  p->io = this;
  p->completion = completion;
  if (cb != nullptr) p->cb = std::move(*cb);
  p->done = done;
  p->exact = detail::Exact{op.exact_, static_cast<std::size_t>(op.req_.len), 0};
  p->req.user = p;
  p->req.done = &Reactor::pooled_done;
  const Handle h(this, &p->req, p->req.gen.load(std::memory_order_acquire));
  start(&p->req);
  return h;
}

Handle detail::IoOpBase::start_callback(Callback cb) {
  if (!cb) throw Error(Errc::invalid_argument, "IoOp::then with an empty callback");
  return io_->start_pooled(*this, false, &cb, OnComplete{});
}

Handle detail::IoOpBase::start_completion(OnComplete done) { return io_->start_pooled(*this, true, nullptr, done); }

// ---------------------------------------------------------------------------
// Operations

IoOp<int> Reactor::open(std::string path, int flags, mode_t mode) {
  return open(AT_FDCWD, std::move(path), flags, mode);
}

IoOp<int> Reactor::open(int dirfd, std::string path, int flags, mode_t mode) {
  return IoOp<int>(this, detail::OpCode::openat, [&](detail::Request& req) {
    req.fd = dirfd;
    req.path = std::move(path);
    req.op_flags = static_cast<std::uint32_t>(flags);
    req.mode = mode;
  });
}

IoOp<void> Reactor::close(int fd) {
  return IoOp<void>(this, detail::OpCode::close, [&](detail::Request& req) {
    req.fd = fd;
  });
}

IoOp<std::size_t> Reactor::read(int fd, std::span<std::byte> buf, std::uint64_t offset) {
  return IoOp<std::size_t>(this, detail::OpCode::read, [&](detail::Request& req) {
    req.fd = fd;
    req.addr = buf.data();
    req.len = buf.size();
    req.off = offset;
  });
}

IoOp<std::size_t> Reactor::write(int fd, std::span<const std::byte> buf, std::uint64_t offset) {
  return IoOp<std::size_t>(this, detail::OpCode::write, [&](detail::Request& req) {
    req.fd = fd;
    req.addr = const_cast<std::byte*>(buf.data());  // never written through
    req.len = buf.size();
    req.off = offset;
  });
}

IoOp<std::size_t> Reactor::readv(int fd, std::span<const iovec> iov, std::uint64_t offset) {
  return IoOp<std::size_t>(this, detail::OpCode::readv, [&](detail::Request& req) {
    req.fd = fd;
    req.addr = const_cast<iovec*>(iov.data());
    req.len = iov.size();
    req.off = offset;
  });
}

IoOp<std::size_t> Reactor::writev(int fd, std::span<const iovec> iov, std::uint64_t offset) {
  return IoOp<std::size_t>(this, detail::OpCode::writev, [&](detail::Request& req) {
    req.fd = fd;
    req.addr = const_cast<iovec*>(iov.data());
    req.len = iov.size();
    req.off = offset;
  });
}

IoOp<void> Reactor::fsync(int fd) {
  return IoOp<void>(this, detail::OpCode::fsync, [&](detail::Request& req) {
    req.fd = fd;
  });
}

IoOp<void> Reactor::fdatasync(int fd) {
  return IoOp<void>(this, detail::OpCode::fsync, [&](detail::Request& req) {
    req.fd = fd;
    req.op_flags = detail::kFsyncDatasync;
  });
}

IoOp<struct statx> Reactor::stat(std::string path, unsigned mask, int flags) {
  return stat(AT_FDCWD, std::move(path), mask, flags);
}

IoOp<struct statx> Reactor::stat(int dirfd, std::string path, unsigned mask, int flags) {
  return IoOp<struct statx>(this, detail::OpCode::statx, [&](detail::Request& req) {
    req.fd = dirfd;
    req.path = std::move(path);
    req.op_flags = static_cast<std::uint32_t>(flags);
    req.mode = mask;
  });
}

IoOp<void> Reactor::mkdir(std::string path, mode_t mode) { return mkdir(AT_FDCWD, std::move(path), mode); }

IoOp<void> Reactor::mkdir(int dirfd, std::string path, mode_t mode) {
  return IoOp<void>(this, detail::OpCode::mkdirat, [&](detail::Request& req) {
    req.fd = dirfd;
    req.path = std::move(path);
    req.mode = mode;
  });
}

IoOp<void> Reactor::unlink(std::string path) { return unlink(AT_FDCWD, std::move(path)); }

IoOp<void> Reactor::unlink(int dirfd, std::string path) {
  return IoOp<void>(this, detail::OpCode::unlinkat, [&](detail::Request& req) {
    req.fd = dirfd;
    req.path = std::move(path);
  });
}

IoOp<void> Reactor::rmdir(std::string path) { return rmdir(AT_FDCWD, std::move(path)); }

IoOp<void> Reactor::rmdir(int dirfd, std::string path) {
  return IoOp<void>(this, detail::OpCode::unlinkat, [&](detail::Request& req) {
    req.fd = dirfd;
    req.path = std::move(path);
    req.op_flags = AT_REMOVEDIR;
  });
}

IoOp<void> Reactor::rename(std::string from, std::string to, unsigned flags) {
  return rename(AT_FDCWD, std::move(from), AT_FDCWD, std::move(to), flags);
}

IoOp<void> Reactor::rename(int from_dirfd, std::string from, int to_dirfd, std::string to, unsigned flags) {
  return IoOp<void>(this, detail::OpCode::renameat, [&](detail::Request& req) {
    req.fd = from_dirfd;
    req.path = std::move(from);
    req.fd2 = to_dirfd;
    req.path2 = std::move(to);
    req.op_flags = flags;
  });
}

IoOp<std::vector<DirEntry>> Reactor::list_dir(std::string path) { return list_dir(AT_FDCWD, std::move(path)); }

IoOp<std::vector<DirEntry>> Reactor::list_dir(int dirfd, std::string path) {
  return IoOp<std::vector<DirEntry>>(this, detail::OpCode::list_dir, [&](detail::Request& req) {
    req.fd = dirfd;
    req.path = std::move(path);
  });
}

IoOp<std::vector<DirEntry>> Reactor::read_dir(int dir_fd) {
  return IoOp<std::vector<DirEntry>>(this, detail::OpCode::read_dir, [&](detail::Request& req) {
    req.fd = dir_fd;
  });
}

IoOp<struct statx> Reactor::fstat(int fd, unsigned mask) {
  return IoOp<struct statx>(this, detail::OpCode::statx, [&](detail::Request& req) {
    req.fd = fd;
    req.op_flags = AT_EMPTY_PATH;
    req.mode = mask;
  });
}

IoOp<int> Reactor::accept(int listen_fd) {
  return IoOp<int>(this, detail::OpCode::accept, [&](detail::Request& req) {
    req.fd = listen_fd;
  });
}

IoOp<void> Reactor::connect(int fd, const sockaddr* addr, socklen_t len) {
  if (addr == nullptr || len == 0 || len > sizeof(sockaddr_storage)) {
    throw Error(Errc::invalid_argument, "Reactor::connect: bad socket address");
  }
  return IoOp<void>(this, detail::OpCode::connect, [&](detail::Request& req) {
    req.fd = fd;
    std::memcpy(&req.sa, addr, len);
    req.sa_len = len;
  });
}

IoOp<std::size_t> Reactor::recv(int fd, std::span<std::byte> buf, int flags) {
  return IoOp<std::size_t>(this, detail::OpCode::recv, [&](detail::Request& req) {
    req.fd = fd;
    req.addr = buf.data();
    req.len = buf.size();
    req.op_flags = static_cast<std::uint32_t>(flags);
    req.off = detail::kNoOffset;
  });
}

IoOp<std::size_t> Reactor::send(int fd, std::span<const std::byte> buf, int flags) {
  return IoOp<std::size_t>(this, detail::OpCode::send, [&](detail::Request& req) {
    req.fd = fd;
    req.addr = const_cast<std::byte*>(buf.data());
    req.len = buf.size();
    req.op_flags = static_cast<std::uint32_t>(flags);
    req.off = detail::kNoOffset;
  });
}

IoOp<void> Reactor::sleep_for(std::chrono::nanoseconds d) {
  return IoOp<void>(this, detail::OpCode::timer, [&](detail::Request& req) {
    req.deadline_ns = d.count() > 0 ? d.count() : 1;
  });
}

// The launchers' bodies only start the request (a Pooled record, a submit)
// and run no user code: they may run on their pusher and start on a
// completion thread (kLauncher). Its delivery completes the op, on the
// reaper or on the submitting thread.
namespace {
constexpr std::uint8_t kLauncher = ordo::detail::kRunsOnPusher | ordo::detail::kNoUserCode;
}  // namespace

void Reactor::push_read(Var buffer_var, int fd, std::span<std::byte> buf, std::uint64_t offset, Var file_var,
                        OpAttrs attrs) {
  if (attrs.name == nullptr) attrs.name = "ordo::io read";
  check_engine();
  attrs.prop = FnProperty::async;
  auto body = [this, fd, buf, offset](RunContext, OnComplete done) { read(fd, buf, offset).exact().then(done); };
  if (file_var.empty()) {
    ordo::detail::EngineExtension::push(engine_, body, opts_.resume_ctx, {}, {buffer_var}, attrs, kLauncher);
  } else {
    ordo::detail::EngineExtension::push(engine_, body, opts_.resume_ctx, {file_var}, {buffer_var}, attrs,
                                        kLauncher);
  }
}

void Reactor::push_write(Var buffer_var, int fd, std::span<const std::byte> buf, std::uint64_t offset, Var file_var,
                         OpAttrs attrs) {
  if (attrs.name == nullptr) attrs.name = "ordo::io write";
  check_engine();
  attrs.prop = FnProperty::async;
  auto body = [this, fd, buf, offset](RunContext, OnComplete done) { write(fd, buf, offset).exact().then(done); };
  if (file_var.empty()) {
    ordo::detail::EngineExtension::push(engine_, body, opts_.resume_ctx, {buffer_var}, {}, attrs, kLauncher);
  } else {
    ordo::detail::EngineExtension::push(engine_, body, opts_.resume_ctx, {buffer_var}, {file_var}, attrs,
                                        kLauncher);
  }
}

}  // namespace ordo::io

// io/dist/dist.cpp - ordo::dist: the books every rank keeps, and the
// transfer ops it pushes (ordo/dist.hpp, docs/dist.md).
#include <mpi.h>

#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>

#include "ordo/detail/extension.hpp"
#include "ordo/detail/op_fn.hpp"
#include "ordo/dist.hpp"
#include "progress.hpp"
#include "sequence.hpp"

namespace ordo::dist {

// ---------------------------------------------------------------- Mpi

namespace {
void init_mpi(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized != 0) return;
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
    throw Error(Errc::invalid_argument, "ordo::dist::Mpi: MPI_Init_thread failed");
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    throw Error(Errc::invalid_argument,
                "ordo::dist::Mpi: this MPI gives no MPI_THREAD_SERIALIZED (the progress thread is not the main thread)");
  }
}
}  // namespace

Mpi::Mpi(int& argc, char**& argv) { init_mpi(&argc, &argv); }
Mpi::Mpi() { init_mpi(nullptr, nullptr); }
Mpi::~Mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized == 0) MPI_Finalize();
}
int Mpi::world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int Mpi::world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// ---------------------------------------------------------------- the books

namespace detail {

/// One registered variable, as every rank's books see it. Written only by
/// the pushing thread (one at a time: the Dist's contract), except
/// `data`/`size`/`codec`, fixed at registration and read by ops.
struct Entry {
  DistImpl* dist = nullptr;  // the Dist that registered it (a transfer op's body reaches it from here)
  std::uint64_t id = 0;
  int owner = 0;
  Var local;
  void* data = nullptr;
  std::size_t size = 0;
  Codec codec;  // used when `has_codec`
  bool has_codec = false;
  std::uint64_t version = 0;  // writes pushed on it
  std::uint64_t seq = 0;      // transfers pushed of it
  /// Ranks holding its current version (the owner always does: a remote
  /// write goes back to it). One bit per rank.
  std::vector<std::uint64_t> valid;

  [[nodiscard]] bool holds(int r) const noexcept { return (valid[std::size_t(r) / 64] >> (r % 64)) & 1u; }
  void add(int r) noexcept { valid[std::size_t(r) / 64] |= std::uint64_t{1} << (r % 64); }
  void only(int r) noexcept {
    std::fill(valid.begin(), valid.end(), 0);
    add(r);
  }
};

class DistImpl {
 public:
  DistImpl(Engine& engine, Options options) : engine_(engine), opts_(options) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized == 0) {
      throw Error(Errc::invalid_argument, "ordo::dist::Dist: MPI is not initialised (construct an ordo::dist::Mpi first)");
    }
    int level = 0;
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_SERIALIZED) {
      throw Error(Errc::invalid_argument,
                  "ordo::dist::Dist: MPI was initialised below MPI_THREAD_SERIALIZED; the progress thread needs it");
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    // Errors come back to Progress::check, which says which call failed and
    // then ends the job; the program's own communicators keep their handler.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    pending_.impl = this;
    progress_ = std::make_unique<Progress>(comm_, engine_, rank_);
  }

  ~DistImpl() {
    // Drain this rank's ops (transfers included), then the collective end.
    const auto timeout = opts_.shutdown_timeout;
    bool ok = true;
    {
      std::unique_lock lock(mu_);
      auto drained = [&] { return ops_ == 0; };
      if (timeout.count() == 0) {
        cv_.wait(lock, drained);
      } else {
        ok = cv_.wait_for(lock, timeout, drained);
      }
    }
    if (ok) ok = progress_->shutdown(timeout);
    if (!ok) {
      std::fprintf(stderr,
                   "ordo::dist: rank %d: shutdown: transfers still outstanding after %lld ms (a peer died, or the "
                   "ranks' programs diverged); ending the job with MPI_Abort\n",
                   rank_, static_cast<long long>(timeout.count()));
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (progress_->leftovers() != 0) {
      std::fprintf(stderr, "ordo::dist: rank %d: %zu transfers never matched at shutdown (programs diverged?)\n", rank_,
                   progress_->leftovers());
    }
    progress_.reset();
    MPI_Comm_free(&comm_);
    for (Entry& e : entries_) {
      try {
        engine_.delete_variable(e.local);
      } catch (...) {
        // The engine is being torn down around us: nothing to recycle.
      }
    }
  }

  DistVar add(void* data, std::size_t size, Codec* codec, int owner, std::uint64_t id) {
    if (owner < 0 || owner >= size_) {
      throw Error(Errc::invalid_argument, "ordo::dist: owner rank " + std::to_string(owner) + " is not in [0, " +
                                              std::to_string(size_) + ")");
    }
    const auto index = static_cast<std::uint32_t>(entries_.size());
    Entry& e = entries_.emplace_back();
    e.dist = this;
    e.id = id == Dist::kAutoId ? index : id;
    e.owner = owner;
    e.data = data;
    e.size = size;
    if (codec != nullptr) {
      e.codec = std::move(*codec);
      e.has_codec = true;
    }
    e.valid.assign((std::size_t(size_) + 63) / 64, 0);
    e.add(owner);
    e.local = engine_.new_variable();
    return DistVar(index, e.id, owner, e.local);
  }

  Entry& entry(const DistVar& v) {
    if (v.empty()) throw Error(Errc::invalid_argument, "ordo::dist: an empty (default-constructed) DistVar");
    if (v.index_ >= entries_.size() || !(entries_[v.index_].local == v.local())) {
      throw Error(Errc::invalid_argument, "ordo::dist: DistVar " + std::to_string(v.id()) + " (owner rank " +
                                              std::to_string(v.owner()) + ") was not registered by this Dist");
    }
    return entries_[v.index_];
  }

  int executor(DistSpan reads, DistSpan writes, int rank) {
    int exec = 0;
    if (rank >= 0) {
      exec = rank;
    } else if (!writes.span().empty()) {
      exec = entry(writes.span()[0]).owner;
    } else if (!reads.span().empty()) {
      exec = entry(reads.span()[0]).owner;
    }
    if (exec >= size_) {
      throw Error(Errc::invalid_argument,
                  "ordo::dist: rank " + std::to_string(exec) + " is not in [0, " + std::to_string(size_) + ")");
    }
    return exec;
  }

  /// Moves `e`'s current value from `src` to `dst`: a send op there, a
  /// receive op here, or nothing on a third rank but the books.
  void transfer(Entry& e, int src, int dst);

  /// Collective (every rank, at the same point of its sequence): compares
  /// the ranks' pushes so far and learns of a push that failed anywhere.
  /// Returns the error every rank then throws (the same on all), or null.
  std::exception_ptr check_sequences();
  /// A round in which not every rank did what this one does (`here`): the
  /// error for it, naming a rank that destroyed its Dist if one did.
  [[nodiscard]] std::exception_ptr parted(const Vote& vote, const char* here) const;
  /// Posts `vote` and waits for every rank's; if they were not all doing
  /// the same (`here`), fails the Dist and throws parted's error.
  void round(Vote& vote, const char* here);

  Engine& engine_;
  Options opts_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::deque<Entry> entries_;  // a deque: ops keep pointers to entries while more are registered
  std::unique_ptr<Progress> progress_;
  PendingOps pending_{};
  std::uint64_t checks_ = 0;  // collective checks entered (the pushing thread's)
  Sequence sequence_;  // this rank's pushes so far (the pushing thread's): names a failed one, checks the ranks agree
  std::uint64_t ops_run_ = 0, cache_hits_ = 0, transfers_ = 0;  // the pushing thread's; stats() reads them racily-safe below
  std::atomic<std::uint64_t> ops_run_pub_{0}, cache_hits_pub_{0}, transfers_pub_{0};

  // Ops of this Dist the engine still holds. Guarded by mu_; cv_ tells the destructor.
  std::mutex mu_;
  std::condition_variable cv_;
  std::size_t ops_ = 0;
};

void PendingOps::add() noexcept {
  std::lock_guard lock(impl->mu_);
  ++impl->ops_;
}
void PendingOps::done() noexcept {
  std::lock_guard lock(impl->mu_);
  if (--impl->ops_ == 0) impl->cv_.notify_all();
}

namespace {

std::string describe(const std::exception_ptr& e, int rank, int& origin) {
  origin = rank;
  try {
    std::rethrow_exception(e);
  } catch (const RemoteError& r) {
    origin = r.rank();
    return r.what();
  } catch (const std::exception& x) {
    return "rank " + std::to_string(rank) + ": " + x.what();
  } catch (...) {
    return "rank " + std::to_string(rank) + ": an exception not derived from std::exception";
  }
}

std::vector<std::byte> envelope(const Envelope& h, const void* payload, std::size_t size) {
  std::vector<std::byte> m(sizeof h + size);
  Envelope hh = h;
  hh.size = size;
  std::memcpy(m.data(), &hh, sizeof hh);
  if (size != 0) std::memcpy(m.data() + sizeof hh, payload, size);
  return m;
}

/// The owner's half of a transfer: reads the local variable, packs it and
/// hands it to the progress thread (then it is done: the message is a copy).
/// Skipped because the variable carries an error: sends the error instead,
/// so the receiving rank's copy carries it too.
class SendBody {
 public:
  SendBody(Entry* e, int dst, std::uint64_t seq, Stamp stamp) : e_(e), seq_(seq), stamp_(stamp), dst_(dst) {
    e_->dist->pending_.add();
  }
  SendBody(SendBody&& o) noexcept
      : e_(std::exchange(o.e_, nullptr)), seq_(o.seq_), stamp_(o.stamp_), dst_(o.dst_), ran_(o.ran_) {}
  SendBody& operator=(SendBody&&) = delete;
  ~SendBody() {
    if (e_ == nullptr) return;
    if (!ran_) {
      // Destroyed without running: skipped (skip_reason names why), or the push failed (nothing to send).
      if (std::exception_ptr why = Engine::skip_reason()) send_error(why);
    }
    e_->dist->pending_.done();
  }
  void operator()() {
    ran_ = true;
    Envelope h = header();
    if (e_->has_codec) {
      std::vector<std::byte> bytes;
      try {
        bytes = e_->codec.save();
      } catch (...) {
        send_error(std::current_exception());
        throw;  // and this rank's wait_for_all sees it
      }
      e_->dist->progress_->send(dst_, envelope(h, bytes.data(), bytes.size()));
    } else {
      e_->dist->progress_->send(dst_, envelope(h, e_->data, e_->size));
    }
  }

 private:
  Envelope header() const {
    Envelope h;
    h.var_id = e_->id;
    h.seq = seq_;
    h.push = stamp_.push;
    h.hash = stamp_.hash;
    return h;
  }
  void send_error(const std::exception_ptr& why) {
    Envelope h = header();
    h.status = Envelope::kFailed;
    const std::string text = describe(why, e_->dist->rank_, h.origin);
    e_->dist->progress_->send(dst_, envelope(h, text.data(), text.size()));
  }

  // Laid out to fit the op record's inline storage (no allocation per transfer).
  Entry* e_;  // null once moved from
  std::uint64_t seq_;
  Stamp stamp_;  // the push that made this transfer: the receiver checks it made it too
  int dst_;
  bool ran_ = false;
};
static_assert(sizeof(SendBody) <= ordo::detail::OpFn::kInlineSize);

/// The receiving half: an async op holding the local variable for writing
/// until the progress thread has landed the value (or an error) in it.
/// Skipped (the copy already carries an error): its message is dropped.
class RecvBody {
 public:
  RecvBody(Entry* e, int src, std::uint64_t seq, Stamp stamp) : e_(e), seq_(seq), stamp_(stamp), src_(src) {
    e_->dist->pending_.add();
  }
  RecvBody(RecvBody&& o) noexcept
      : e_(std::exchange(o.e_, nullptr)), seq_(o.seq_), stamp_(o.stamp_), src_(o.src_), ran_(o.ran_) {}
  RecvBody& operator=(RecvBody&&) = delete;
  ~RecvBody() {
    if (e_ == nullptr) return;
    if (!ran_ && Engine::skip_reason() != nullptr) e_->dist->progress_->discard(key());
    e_->dist->pending_.done();
  }
  void operator()(const RunContext&, OnComplete done) {
    ran_ = true;
    Target t;
    if (e_->has_codec) {
      t.codec = &e_->codec;
    } else {
      t.data = e_->data;
      t.size = e_->size;
    }
    e_->dist->progress_->want(key(), stamp_, t, std::move(done));
  }

 private:
  [[nodiscard]] Key key() const noexcept { return Key{src_, e_->id, seq_}; }
  // Laid out to fit the op record's inline storage, as SendBody.
  Entry* e_;  // null once moved from
  std::uint64_t seq_;
  Stamp stamp_;
  int src_;
  bool ran_ = false;
};
static_assert(sizeof(RecvBody) <= ordo::detail::OpFn::kInlineSize);

}  // namespace

void DistImpl::transfer(Entry& e, int src, int dst) {
  const std::uint64_t seq = e.seq++;
  const Stamp stamp{sequence_.pushes, sequence_.hash};
  ++transfers_;
  // The receive op and a flat buffer's send op run no user code and never
  // block (they pack or register, and hand over to the progress thread):
  // launchers, as ordo::io's, so they start where they become ready (on the
  // pusher, the worker that released them or the progress thread) instead
  // of queueing behind compute ops for a worker. A codec's save is user
  // code: that send op goes to a worker like any op.
  constexpr std::uint8_t kLauncher = ordo::detail::kRunsOnPusher | ordo::detail::kNoUserCode;
  if (rank_ == src) {
    if (e.has_codec) {
      engine_.push_sync(SendBody(&e, dst, seq, stamp), Context::cpu(), {e.local}, {},
                        {.name = "ordo::dist send"});
    } else {
      ordo::detail::EngineExtension::push(engine_, SendBody(&e, dst, seq, stamp), Context::cpu(),
                                          {e.local}, {}, {.prop = FnProperty::async, .name = "ordo::dist send"},
                                          kLauncher);
    }
  } else if (rank_ == dst) {
    ordo::detail::EngineExtension::push(engine_, RecvBody(&e, src, seq, stamp), Context::cpu(), {}, {e.local},
                                        {.prop = FnProperty::async, .name = "ordo::dist receive"}, kLauncher);
  }
}

std::exception_ptr DistImpl::check_sequences() {
  Sequence& sq = sequence_;
  SequenceSummary mine;
  mine.pushes = sq.pushes;
  mine.hash = sq.hash;
  mine.recent = sq.recent;
  Vote vote(Vote::kCheck, progress_->lowest_failed(), sq.pushes, sq.hash, rank_, size_);
  std::vector<SequenceSummary> all;
  // Announced to every rank first: one blocked in a wait_for_var learns
  // where this one stands (Progress::heard). If this rank's progress thread
  // joined this check already, on this thread's behalf, its outcome is this one's.
  if (progress_->join_check(++checks_, mine)) {
    progress_->collective([&](MPI_Comm comm, MPI_Request* r) { vote.post(comm, r); });
    if (vote.gathers(size_)) {
      // The sequences differ: every rank's recent pushes say where (the
      // failure path only; the same verdict on every rank).
      all.resize(static_cast<std::size_t>(size_));
      progress_->collective([&](MPI_Comm comm, MPI_Request* r) { Vote::post_gather(mine, all.data(), comm, r); });
    }
  } else {
    progress_->joined_check(vote, all);
  }
  if (vote.lowest_failed() < std::uint64_t(size_)) {
    // Its report was sent before that rank entered this collective: it is
    // on its way if it has not landed yet.
    const int failed = int(vote.lowest_failed());
    std::exception_ptr failure = progress_->wait_failure(std::chrono::seconds(1));
    if (!failure) {
      failure = std::make_exception_ptr(RemoteError(
          failed, "ordo::dist: rank " + std::to_string(failed) + ": a push failed there (its report has not reached rank " +
                      std::to_string(rank_) + ")"));
    }
    return failure;
  }
  if (!vote.unanimous()) return parted(vote, "wait_for_all or barrier");
  if (vote.agrees()) {
    sq.verified = sq.pushes;
    return nullptr;
  }
  const Divergence dv = diagnose(all, sq.verified);
  return std::make_exception_ptr(DivergedError(dv.rank, dv.push, dv.what));
}

std::exception_ptr DistImpl::parted(const Vote& vote, const char* here) const {
  const std::string tail = " while rank " + std::to_string(rank_) + " was in " + here +
                           "; the ranks' collectives no longer line up, so every wait of this Dist fails";
  if (vote.leaving() < std::uint64_t(size_)) {
    const int gone = int(vote.leaving());
    return std::make_exception_ptr(RemoteError(
        gone, "ordo::dist: rank " + std::to_string(gone) +
                  " destroyed its Dist (its program left the ranks' common sequence of collectives, on an exception "
                  "or a return)" + tail));
  }
  return std::make_exception_ptr(Error(
      Errc::invalid_argument, "ordo::dist: the ranks called different collectives of a Dist (wait_for_all, barrier "
                              "and allreduce_sum must come in the same order on every rank)" + tail));
}

void DistImpl::round(Vote& vote, const char* here) {
  progress_->collective([&](MPI_Comm comm, MPI_Request* r) { vote.post(comm, r); });
  if (vote.unanimous()) return;
  const std::exception_ptr error = parted(vote, here);
  progress_->fail(error);
  std::rethrow_exception(error);
}

}  // namespace detail

// ---------------------------------------------------------------- Dist

Dist::Dist(Engine& engine, Options options) : impl_(std::make_unique<detail::DistImpl>(engine, options)) {
  pending_ = &impl_->pending_;
}

Dist::~Dist() = default;

int Dist::rank() const noexcept { return impl_->rank_; }
int Dist::size() const noexcept { return impl_->size_; }
Engine& Dist::engine() const noexcept { return impl_->engine_; }

DistVar Dist::register_bytes(void* data, std::size_t size, int owner, std::uint64_t id) {
  return impl_->add(data, size, nullptr, owner, id);
}

DistVar Dist::register_codec(Codec codec, int owner, std::uint64_t id) {
  if (!codec.save || !codec.load) throw Error(Errc::invalid_argument, "ordo::dist: a Codec needs save and load");
  return impl_->add(nullptr, 0, &codec, owner, id);
}

int Dist::executor(DistSpan reads, DistSpan writes, int rank) const { return impl_->executor(reads, writes, rank); }

Dist::Plan& Dist::begin_push(DistSpan reads, DistSpan writes, int rank) {
  detail::DistImpl& d = *impl_;
  Plan& p = plan_;
  detail::Sequence& sq = d.sequence_;
  ++sq.pushes;
  p.exec = d.executor(reads, writes, rank);
  p.runs_here = p.exec == d.rank_;
  p.reads.clear();
  p.writes.clear();
  p.written.clear();
  // Validate every handle before the books change, so a bad push changes
  // nothing, and fold the push into this rank's running hash on the way.
  std::uint64_t h = sq.hash;
  for (const DistVar& v : reads.span()) h = detail::Sequence::step(h, detail::Sequence::read_word(d.entry(v).id));
  for (const DistVar& v : writes.span()) h = detail::Sequence::step(h, detail::Sequence::write_word(d.entry(v).id));
  if (!writes.span().empty()) {
    sq.close(h, reads.span().size(), writes.span().size(), p.exec, writes.span()[0].id(), detail::PushRecord::kWritten);
  } else if (!reads.span().empty()) {
    sq.close(h, reads.span().size(), 0, p.exec, reads.span()[0].id(), detail::PushRecord::kRead);
  } else {
    sq.close(h, 0, 0, p.exec, 0, 0);
  }
  // Every variable the op touches must be at the executing rank at its
  // current version (a mutation may read the old value too).
  std::vector<std::uint32_t>& seen = p.written;  // reused below for the writes
  auto need = [&](const DistVar& v) {
    for (std::uint32_t i : seen) {
      if (i == v.index_) return;
    }
    seen.push_back(v.index_);
    detail::Entry& e = d.entries_[v.index_];
    if (e.owner == p.exec) return;
    if (d.opts_.cache && e.holds(p.exec)) {
      ++d.cache_hits_;
      return;
    }
    d.transfer(e, e.owner, p.exec);
    if (d.opts_.cache) e.add(p.exec);
  };
  for (const DistVar& v : writes.span()) need(v);
  for (const DistVar& v : reads.span()) need(v);
  seen.clear();
  for (const DistVar& v : writes.span()) {
    bool dup = false;
    for (std::uint32_t i : p.written) dup |= i == v.index_;
    if (!dup) p.written.push_back(v.index_);
  }
  if (p.runs_here) {
    for (const DistVar& v : reads.span()) p.reads.push_back(v.local());
    for (const DistVar& v : writes.span()) p.writes.push_back(v.local());
    ++d.ops_run_;
  }
  return p;
}

void Dist::end_push(Plan& p) {
  detail::DistImpl& d = *impl_;
  for (std::uint32_t i : p.written) {
    detail::Entry& e = d.entries_[i];
    ++e.version;
    e.only(p.exec);
    if (e.owner != p.exec) {
      d.transfer(e, p.exec, e.owner);  // the new value goes home
      e.add(e.owner);
    }
  }
  d.ops_run_pub_.store(d.ops_run_, std::memory_order_relaxed);
  d.cache_hits_pub_.store(d.cache_hits_, std::memory_order_relaxed);
  d.transfers_pub_.store(d.transfers_, std::memory_order_relaxed);
}

void Dist::check_books() const {
  if (impl_->progress_->failed()) std::rethrow_exception(impl_->progress_->failure());
}

void Dist::push_failed(const char* op_name) noexcept {
  detail::DistImpl& d = *impl_;
  if (d.progress_->failed()) return;  // the books differed already: the first failure tells
  try {
    std::string cause;
    try {
      throw;  // the exception the push threw, being handled by the caller
    } catch (const std::exception& e) {
      cause = e.what();
    } catch (...) {
      cause = "an exception not derived from std::exception";
    }
    const std::string text = "ordo::dist: rank " + std::to_string(d.rank_) + ": push #" + std::to_string(d.sequence_.pushes) +
                             " (" + (op_name != nullptr ? std::string("op '") + op_name + "'" : "an unnamed op") +
                             ") failed there (" + cause +
                             "); the ranks' books differ from that push on, so every wait of this Dist fails";
    d.progress_->fail(std::make_exception_ptr(RemoteError(d.rank_, text)));
    detail::Envelope h;
    h.status = detail::Envelope::kPushFailed;
    h.origin = d.rank_;
    for (int r = 0; r < d.size_; ++r) {
      if (r != d.rank_) d.progress_->send(r, detail::envelope(h, text.data(), text.size()));
    }
  } catch (...) {
    // Out of memory while telling the others: ending the job is the one way
    // left not to let them read values that will never come.
    std::fprintf(stderr, "ordo::dist: rank %d: push #%llu failed and the other ranks could not be told; "
                         "ending the job with MPI_Abort\n",
                 d.rank_, static_cast<unsigned long long>(d.sequence_.pushes));
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

void Dist::wait_for_var(DistVar v) {
  check_books();
  detail::DistImpl& d = *impl_;
  const Var local = d.entry(v).local;
  // While it blocks, a peer that entered a collective check may prove the
  // books diverged: then this wait's receive fails (Progress::heard).
  struct Waiting {
    detail::Progress& p;
    ~Waiting() { p.waiting(nullptr); }
  } waiting{*d.progress_};
  d.progress_->waiting(&d.sequence_);
  d.engine_.wait_for_var(local);
  check_books();  // the wait ended before the failure was known, or on a value no transfer replaced
}

void Dist::wait_for_all() {
  detail::DistImpl& d = *impl_;
  // The check comes first: where the ranks' books differ, the local wait
  // could wait for a transfer that no rank will make, and a failed verdict
  // fails every receive before the wait begins.
  const std::exception_ptr verdict = d.check_sequences();
  if (verdict) d.progress_->fail(verdict);
  std::exception_ptr error;
  try {
    d.engine_.wait_for_all();
  } catch (...) {
    error = std::current_exception();
  }
  if (verdict) std::rethrow_exception(verdict);  // on every rank alike: no barrier is owed
  // Every rank's pushes have finished everywhere once every rank is here.
  detail::Vote here(detail::Vote::kWaited, d.size_, 0, 0, d.rank_, d.size_);
  d.round(here, "wait_for_all");
  if (error) std::rethrow_exception(error);
}

void Dist::barrier() {
  // The check's allreduce is a barrier itself.
  if (const std::exception_ptr verdict = impl_->check_sequences()) {
    impl_->progress_->fail(verdict);
    std::rethrow_exception(verdict);
  }
}

void Dist::allreduce_sum(std::span<std::uint64_t> values) {
  detail::DistImpl& d = *impl_;
  // A header round first: the sum's length differs from every other round's.
  detail::Vote header(detail::Vote::kSum, d.size_, values.size(), 0, d.rank_, d.size_);
  d.round(header, "allreduce_sum");
  if (!header.agrees()) {
    throw Error(Errc::invalid_argument, "ordo::dist: allreduce_sum: the ranks passed different numbers of values (" +
                                            std::to_string(values.size()) + " on rank " + std::to_string(d.rank_) + ")");
  }
  d.progress_->collective([&](MPI_Comm comm, MPI_Request* r) {
    MPI_Iallreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_UINT64_T, MPI_SUM, comm, r);
  });
}

Stats Dist::stats() const {
  const detail::DistImpl& d = *impl_;
  const detail::ProgressCounters& c = d.progress_->counters();
  Stats s;
  s.ops_run = d.ops_run_pub_.load(std::memory_order_relaxed);
  s.cache_hits = d.cache_hits_pub_.load(std::memory_order_relaxed);
  s.transfers = d.transfers_pub_.load(std::memory_order_relaxed);
  s.messages_sent = c.messages_sent.load(std::memory_order_relaxed);
  s.bytes_sent = c.bytes_sent.load(std::memory_order_relaxed);
  s.messages_received = c.messages_received.load(std::memory_order_relaxed);
  s.bytes_received = c.bytes_received.load(std::memory_order_relaxed);
  s.early_messages = c.early_messages.load(std::memory_order_relaxed);
  s.progress_cpu_seconds = d.progress_->cpu_seconds();
  return s;
}

}  // namespace ordo::dist

// io/dist/progress.hpp - the one thread that makes every MPI call of a Dist.
//
// Thread level: MPI_THREAD_SERIALIZED. Workers never call MPI: a send op
// packs its envelope and hands it here; a receive op registers what it
// wants and returns (an async op); this thread posts MPI_Issend /
// MPI_Imrecv, tests them (MPI_Testsome), matches arrivals with wants by the
// envelope's (source, variable id, transfer number) and completes the
// receive ops through their OnComplete, inside a CompletionThread scope
// (bookkeeping only: dependants go to the engine's workers). A user codec's
// load is user code: it is posted to the engine, never run here.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "ordo/detail/profile_hooks.hpp"
#include "ordo/dist.hpp"
#include "sequence.hpp"

namespace ordo::dist::detail {

/// Every message a Dist sends: this header, then the payload (the value's
/// bytes, or on failure the error's what()). MPI tags are only guaranteed
/// up to 32767, so everything that identifies a transfer is here; one tag
/// serves all of them.
struct Envelope {
  std::uint64_t var_id = 0;
  std::uint64_t seq = 0;       ///< the variable's transfer number: (source, var_id, seq) is unique
  std::uint64_t push = 0;      ///< the sender's push that made this transfer (Sequence::pushes then)
  std::uint64_t hash = 0;      ///< the sender's running hash after that push (Sequence::hash)
  std::uint64_t size = 0;      ///< payload bytes
  std::int32_t status = 0;     ///< kOk, or kFailed: the payload is the error's what()
  std::int32_t origin = 0;     ///< the rank where the failure happened (kFailed)
  static constexpr std::int32_t kOk = 0;
  static constexpr std::int32_t kFailed = 1;
  /// A push failed on `origin` (the payload says which and why): the ranks'
  /// books differ from there on. Not a transfer: var_id and seq are 0.
  static constexpr std::int32_t kPushFailed = 2;
  /// The sender entered its collective check number `seq` (1-based) with
  /// `push` pushes; the payload is its SequenceSummary. Not a transfer.
  static constexpr std::int32_t kAnnounce = 3;
};
static_assert(sizeof(Envelope) == 48);

inline constexpr int kDataTag = 7;

/// Where a received value goes.
struct Target {
  void* data = nullptr;   ///< a flat buffer of `size` bytes, or
  std::size_t size = 0;
  const Codec* codec = nullptr;  ///< a codec (load posted to the engine)
};

/// The push that made a transfer, as the receiving rank's books saw it: the
/// sender's books made the same transfer at the same push, with the same
/// history, unless the ranks pushed different sequences.
struct Stamp {
  std::uint64_t push = 0;
  std::uint64_t hash = 0;
};

/// Identifies one transfer on the receiving side.
struct Key {
  int source = 0;
  std::uint64_t var_id = 0;
  std::uint64_t seq = 0;
  friend bool operator<(const Key& a, const Key& b) noexcept {
    return std::tie(a.source, a.var_id, a.seq) < std::tie(b.source, b.var_id, b.seq);
  }
};

/// Every collective of a Dist is one round of this shape, or follows one
/// that every rank posted with the same kind: the collective check of
/// wait_for_all and barrier, the barrier after wait_for_all, the header of
/// allreduce_sum, each round of the destructor's drain. So ranks whose
/// programs part (one leaves its scope on an exception and destroys its
/// Dist while the others wait in wait_for_all) still post matching
/// collectives, and each learns what the others were doing; MPI never pairs
/// an allreduce with a barrier (MPI_ERR_TRUNCATE, or a result made of
/// another collective's bytes). One allreduce of minima (min(~x) is
/// ~max(x)) gives every rank the lowest rank where a push failed, whether
/// every rank posted the same kind, the least and greatest of two words
/// (a check's push count and hash, a sum's length) and the lowest rank in
/// its destructor.
struct Vote {
  enum Kind : std::uint64_t { kCheck = 1, kWaited = 2, kSum = 3, kShutdown = 4 };
  std::uint64_t v[8];
  Vote(Kind kind, std::uint64_t lowest_failed, std::uint64_t a, std::uint64_t b, int rank, int size) noexcept
      : v{lowest_failed, kind, ~std::uint64_t{kind}, a, ~a, b, ~b, std::uint64_t(kind == kShutdown ? rank : size)} {}
  void post(MPI_Comm comm, MPI_Request* r) { MPI_Iallreduce(MPI_IN_PLACE, v, 8, MPI_UINT64_T, MPI_MIN, comm, r); }
  /// The lowest rank where a push failed, or `size` (none).
  [[nodiscard]] std::uint64_t lowest_failed() const noexcept { return v[0]; }
  /// Every rank posted this round with the same kind.
  [[nodiscard]] bool unanimous() const noexcept { return v[1] == ~v[2]; }
  /// ... and the same two words.
  [[nodiscard]] bool agrees() const noexcept { return unanimous() && v[3] == ~v[4] && v[5] == ~v[6]; }
  /// The lowest rank whose Dist is in its destructor, or `size` (none).
  [[nodiscard]] std::uint64_t leaving() const noexcept { return v[7]; }
  /// A check where no push failed and every rank took part, whose counts or
  /// hashes differ: the ranks then exchange their summaries to name the difference.
  [[nodiscard]] bool gathers(int size) const noexcept { return v[0] >= std::uint64_t(size) && unanimous() && !agrees(); }
  static void post_gather(const SequenceSummary& mine, SequenceSummary* all, MPI_Comm comm, MPI_Request* r) {
    MPI_Iallgather(&mine, sizeof mine, MPI_BYTE, all, sizeof mine, MPI_BYTE, comm, r);
  }
};

/// Counters the progress thread writes (relaxed: statistics only).
struct ProgressCounters {
  std::atomic<std::uint64_t> messages_sent{0}, bytes_sent{0}, messages_received{0}, bytes_received{0},
      early_messages{0};
};

/// @par Thread safety
/// send, want, discard, collective and shutdown may be called from any
/// thread; everything else in here runs on the progress thread.
class Progress {
 public:
  Progress(MPI_Comm comm, Engine& engine, int rank);
  /// Joins the thread (after shutdown() returned true, or to abandon it).
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// Sends `message` (an Envelope and its payload) to `dest`; detached: the
  /// caller is done with it.
  void send(int dest, std::vector<std::byte> message);
  /// The receive op of `key`, made by the push `stamp`, has started: deliver
  /// into `target` and call `done`. A message whose envelope names another
  /// push or history is not delivered: the receive fails with a
  /// DivergedError, and so does every receive after it.
  void want(const Key& key, Stamp stamp, Target target, OnComplete done);
  /// The receive op of `key` was skipped: drop its message.
  void discard(const Key& key);
  /// A push failed (here, or on the rank a kPushFailed envelope came from):
  /// from now on every receive this rank waits for, or starts to, completes
  /// with `error` (a RemoteError naming the rank and the push), so no wait
  /// blocks on a transfer that the diverged books will never make. The first
  /// failure is kept; later ones change nothing.
  void fail(std::exception_ptr error);
  /// The failure fail() recorded (here or received), or null.
  [[nodiscard]] std::exception_ptr failure() const;
  /// The rank where the push that failure() reports failed, or the number
  /// of ranks: none failed (a divergence is not a failed push).
  [[nodiscard]] std::uint64_t lowest_failed() const;
  /// One relaxed load: whether failure() may be non-null (for the push path).
  [[nodiscard]] bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }
  /// Waits up to `limit` for failure() to be non-null (a kPushFailed
  /// envelope on its way); returns it, or null.
  std::exception_ptr wait_failure(std::chrono::milliseconds limit);
  /// The pushing thread is about to enter collective check number `check`
  /// with `mine`: tells every other rank (one message each), so that a rank
  /// blocked in a wait_for_var learns that this one will make no more
  /// pushes before the check. Returns false if this rank's progress thread
  /// joined that check already on its behalf (heard): the pushing thread
  /// must not post it again, and takes its outcome from joined_check.
  bool join_check(std::uint64_t check, const SequenceSummary& mine);
  /// The outcome of the check the progress thread joined on the pushing
  /// thread's behalf (waits until it is over): the vote and, if the ranks
  /// exchanged them, every rank's summary.
  void joined_check(Vote& vote, std::vector<SequenceSummary>& all);
  /// The pushing thread blocks in a wait on `books` (null: the wait ended).
  /// While it does, a peer's announcement that proves the books diverged
  /// fails this rank's receives and the Dist, and the progress thread joins
  /// the check the peer waits in with `books`, so that no rank hangs there.
  void waiting(const Sequence* books);
  /// Runs `start` (which posts one nonblocking collective on the comm) on
  /// the progress thread and blocks until its request completes.
  void collective(const std::function<void(MPI_Comm, MPI_Request*)>& start);
  /// The final drain: once this rank's sends are all matched (MPI_Issend),
  /// a Vote of kind kShutdown, again until every rank posted one (a peer
  /// still in a collective of its own fails it and comes later); after it
  /// every message to this rank has been matched too, so once the receives
  /// have landed the thread ends. Returns false if that did not happen
  /// within `timeout` (zero: forever).
  bool shutdown(std::chrono::milliseconds timeout);

  [[nodiscard]] const ProgressCounters& counters() const noexcept { return counters_; }
  /// CPU seconds the progress thread has used so far.
  [[nodiscard]] double cpu_seconds() const noexcept;
  /// Messages received and never claimed, wants never served (after shutdown: both should be 0).
  [[nodiscard]] std::size_t leftovers() const noexcept { return leftovers_.load(std::memory_order_relaxed); }

 private:
  struct Command;
  struct Slot;
  /// Keeps `error` as the failure unless one is kept already (mu_ held).
  void keep_failure(std::exception_ptr error) noexcept;
  /// Fails every pending want, and every later one, with `error` unless they
  /// fail already (progress thread).
  void fail_wants(const std::exception_ptr& error);
  /// A message met a want made by another push (progress thread): fails
  /// that receive and every other one with a DivergedError.
  void mismatch(const Key& key, const Envelope& h, const Stamp& mine, const OnComplete& done);
  void loop();
  void run_command(Command& c);
  void post_receives();
  bool test_requests();
  void arrived(int source, std::vector<std::byte> message);
  struct Wanted;
  void deliver(const Key& key, const Envelope& h, std::vector<std::byte> message, const Wanted& w);
  void check(int rc, const char* call) const;
  void post_send(int dest, std::vector<std::byte> buffer, std::uint64_t slice);
  /// An announcement from `source`: kept until this rank joins that check.
  void announced(int source, const Envelope& h, const std::vector<std::byte>& message);
  /// Compares the announcements heard with the books of a waiting pushing
  /// thread; on a divergence, fails and joins the check (progress thread).
  void heard();
  /// Sends an announcement to every other rank.
  void announce(const std::vector<std::byte>& message);
  /// A request of the check joined on the pushing thread's behalf finished.
  void check_request_done();
  /// Posts a round of the destructor's drain.
  void post_shutdown_round();

  /// Begins a transfer's slice in the engine's trace (profiling on only).
  std::uint64_t profile_begin(const char* what, int peer, std::uint64_t var, std::uint64_t seq,
                              std::uint64_t bytes) noexcept;

  MPI_Comm comm_;
  Engine& engine_;
  const int rank_;
  int size_ = 1;
  /// The engine's profiler, null when profiling is off (one branch per transfer then).
  ordo::detail::ProfilerCore* const prof_;
  const std::string track_;  ///< the transfers' track in the trace: "rank R"
  ProgressCounters counters_;
  std::atomic<std::size_t> leftovers_{0};

  // Commands from other threads. Guarded by mu_; cv_ wakes the thread (and
  // the waiters of collective and shutdown, whose flags it also guards).
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Command> commands_;  // guarded by mu_
  bool shutdown_requested_ = false;  // guarded by mu_
  bool finished_ = false;            // guarded by mu_: the thread has left its loop
  bool abandon_ = false;             // guarded by mu_: leave now, drained or not (the destructor)
  /// The first failed push anywhere (fail()), guarded by mu_ (cv_ tells
  /// wait_failure); failed_ is set (release) once it is, for a lock-free test.
  std::exception_ptr failure_;
  std::atomic<bool> failed_{false};
  /// Collective checks this rank has entered (join_check, or heard on its
  /// behalf): guarded by mu_, so that the two never both post one.
  std::uint64_t checks_joined_ = 0;
  const Sequence* waiting_ = nullptr;  // guarded by mu_: the books of a pushing thread blocked in a wait
  bool news_ = false;  // guarded by mu_: an announcement or a wait came since heard() last compared

  // The progress thread's own state (nobody else touches it).
  std::vector<MPI_Request> requests_;
  std::vector<Slot> slots_;  // slots_[i] describes requests_[i]
  std::map<Key, std::vector<std::byte>> early_;  // arrived before their want
  struct Wanted {  // a receive op that has started and waits for its message
    Stamp stamp;
    Target target;
    OnComplete done;
    std::uint64_t slice = 0;  ///< its slice in the trace (0: none)
  };
  std::map<Key, Wanted> wants_;
  std::set<Key> discarded_;
  /// Once set, every receive completes with it at once: a failed push (the
  /// Dist's failure) or a transfer from another push (mismatch). A mismatch
  /// alone does not fail the Dist's pushes: only a collective check does,
  /// on every rank alike.
  std::exception_ptr receive_error_;
  struct Heard {
    int source = 0;
    std::uint64_t check = 0;
    SequenceSummary summary;
  };
  std::vector<Heard> heard_;  // announcements of checks this rank has not entered
  /// A check joined on the pushing thread's behalf (heard): its vote and,
  /// if the vote disagrees, the summaries' exchange, posted in turn. Other
  /// collectives wait in held_ until it is over, so every rank posts its
  /// collectives in the same order.
  struct Joined {
    bool active = false;  // written under mu_ (joined_check reads it there)
    Vote vote{Vote::kCheck, 0, 0, 0, 0, 0};
    SequenceSummary mine;
    std::vector<SequenceSummary> all;
  } joined_;
  std::vector<Command> held_;
  std::size_t sends_in_flight_ = 0;
  int shutdown_phase_ = 0;  // 0 running, 2 a drain round posted, 3 every rank drains
  Vote shutdown_vote_{Vote::kShutdown, 0, 0, 0, 0, 0};

  std::thread thread_;
};

}  // namespace ordo::dist::detail

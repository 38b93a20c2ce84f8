// ordo/dist.hpp - the same push(reads, writes) across processes, on MPI
// (target ordo::dist, built where MPI is found; docs/dist.md).
//
// The model is StarPU-MPI's: every rank runs the same program, registers the
// same variables (an owner rank and a 64-bit id each) and makes the same
// pushes in the same order. An op runs on one rank, by default the owner of
// the first variable it mutates ("owner computes"); the others keep their
// books and push the send and receive ops that move the values it needs and
// bring a remote write home. Transfers are engine ops, so no worker blocks in
// MPI: one progress thread per Dist makes every MPI call. A failed value
// crosses ranks as an ordo::dist::RemoteError.
//
// This header does not include <mpi.h>: the MPI objects live in io/dist/.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ordo/engine.hpp"

namespace ordo::dist {

namespace detail {
class DistImpl;
}

/// The failure of an op on another rank, as a transfer brought it here:
/// what() is "rank R: <the original what()>".
class RemoteError : public std::runtime_error {
 public:
  RemoteError(int rank, const std::string& what) : std::runtime_error(what), rank_(rank) {}
  /// The rank whose op failed.
  [[nodiscard]] int rank() const noexcept { return rank_; }

 private:
  int rank_;
};

/// Ranks that pushed different sequences of ops on a Dist (a skipped push,
/// another variable, another order): detected at the next collective wait,
/// or where a transfer made by one push meets the other rank's. what() names
/// the ranks, the push where the sequences first may differ and what each
/// rank pushed there; rank() is the lowest rank whose sequence differs from
/// rank 0's (or, seen at a transfer, the rank it came from).
class DivergedError : public RemoteError {
 public:
  DivergedError(int rank, std::uint64_t push, const std::string& what) : RemoteError(rank, what), push_(push) {}
  /// The push (1-based, in each rank's own order) where the sequences first may differ.
  [[nodiscard]] std::uint64_t push() const noexcept { return push_; }

 private:
  std::uint64_t push_;
};

/// MPI for the scope of this object: MPI_Init_thread asking for
/// MPI_THREAD_SERIALIZED (a Dist's progress thread makes every MPI call, and
/// it is not the main thread), MPI_Finalize at the end. Optional: a program
/// that initialises MPI itself must ask for MPI_THREAD_SERIALIZED or
/// MPI_THREAD_MULTIPLE, and must make no MPI call of its own while a Dist
/// exists unless it got MPI_THREAD_MULTIPLE.
///
/// @par Thread safety
/// Construct and destroy on the main thread, once per process.
class Mpi {
 public:
  Mpi(int& argc, char**& argv);
  Mpi();
  ~Mpi();
  Mpi(const Mpi&) = delete;
  Mpi& operator=(const Mpi&) = delete;
  /// This process's rank in MPI_COMM_WORLD, and the number of ranks.
  [[nodiscard]] static int world_rank();
  [[nodiscard]] static int world_size();
};

/// A user-supplied serialize / deserialize pair for a value that is not one
/// flat buffer. save runs on the rank that sends (on a worker, inside the
/// send op: it may read the value), load on the rank that receives (on a
/// worker, inside the receive op: it may overwrite it).
struct Codec {
  std::function<std::vector<std::byte>()> save;
  std::function<void(std::span<const std::byte>)> load;
};

/// A distributed variable: a cheap handle (copy freely) to what one Dist
/// registered. Its local() is the engine variable that orders every op and
/// transfer of it on this rank.
class DistVar {
 public:
  constexpr DistVar() noexcept = default;
  [[nodiscard]] std::uint64_t id() const noexcept { return id_; }
  [[nodiscard]] int owner() const noexcept { return owner_; }
  /// This rank's engine variable for it (its value on the owner; a cached
  /// copy, or nothing yet, elsewhere).
  [[nodiscard]] Var local() const noexcept { return local_; }
  [[nodiscard]] bool empty() const noexcept { return local_.empty(); }

 private:
  friend class Dist;
  friend class detail::DistImpl;
  DistVar(std::uint32_t index, std::uint64_t id, int owner, Var local) noexcept
      : index_(index), id_(id), owner_(owner), local_(local) {}
  std::uint32_t index_ = 0;  // registration order
  std::uint64_t id_ = 0;
  int owner_ = 0;
  Var local_{};
};

/// A non-owning list of distributed variables: `{a, b}`, one `a`, a vector or a span.
class DistSpan {
 public:
  constexpr DistSpan() noexcept = default;
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
#endif
  constexpr DistSpan(std::initializer_list<DistVar> il) noexcept : s_(il.begin(), il.size()) {}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  constexpr DistSpan(const DistVar& v) noexcept : s_(&v, 1) {}  // NOLINT: implicit on purpose
  constexpr DistSpan(std::span<const DistVar> s) noexcept : s_(s) {}
  DistSpan(const std::vector<DistVar>& v) noexcept : s_(v.data(), v.size()) {}  // NOLINT
  [[nodiscard]] constexpr std::span<const DistVar> span() const noexcept { return s_; }

 private:
  std::span<const DistVar> s_{};
};

/// How a Dist behaves.
struct Options {
  /// Keep received values and do not transfer a value again to a rank that
  /// holds it at the current version (StarPU-MPI's cache). Off: every
  /// remote access is a transfer (for measuring the cache).
  bool cache = true;
  /// How long the destructor waits for this rank's transfers and ops before
  /// it says so on stderr and ends the job with MPI_Abort: a peer that died
  /// or ranks whose programs diverged must not hang the job. Zero: forever.
  std::chrono::milliseconds shutdown_timeout{std::chrono::seconds(60)};
};

/// Counters of one rank (Dist::stats()).
struct Stats {
  std::uint64_t ops_run = 0;             ///< pushes whose op ran on this rank
  std::uint64_t messages_sent = 0;       ///< envelopes sent (values and errors)
  std::uint64_t bytes_sent = 0;          ///< their bytes, headers included
  std::uint64_t messages_received = 0;
  std::uint64_t bytes_received = 0;
  std::uint64_t early_messages = 0;      ///< arrived before their receive op had started
  std::uint64_t cache_hits = 0;          ///< remote accesses that needed no transfer (all ranks' books)
  std::uint64_t transfers = 0;           ///< transfers pushed in this rank's books (all ranks')
  double progress_cpu_seconds = 0;       ///< CPU time of the progress thread so far
};

namespace detail {
/// Counts a Dist's ops that the engine still holds (their bodies not yet
/// destroyed); the destructor waits for zero.
struct PendingOps {
  void add() noexcept;
  void done() noexcept;
  DistImpl* impl;
};
/// An op body handed to the engine: calls the user's body, and tells the
/// Dist when the engine destroys it (run or skipped).
template <class F>
class TrackedBody {
 public:
  TrackedBody(F fn, PendingOps* pending) : fn_(std::move(fn)), pending_(pending) { pending_->add(); }
  TrackedBody(TrackedBody&& o) noexcept(std::is_nothrow_move_constructible_v<F>)
      : fn_(std::move(o.fn_)), pending_(std::exchange(o.pending_, nullptr)) {}
  TrackedBody& operator=(TrackedBody&&) = delete;
  ~TrackedBody() {
    if (pending_ != nullptr) pending_->done();
  }
  void operator()(RunContext rc) {
    if constexpr (std::is_invocable_v<F&, RunContext>) {
      fn_(rc);
    } else {
      fn_();
    }
  }

 private:
  F fn_;
  PendingOps* pending_;
};
}  // namespace detail

/// One rank's share of a distributed engine, over MPI_COMM_WORLD (a
/// duplicate of it, so the Dist's messages never meet the program's own).
///
/// The rules every rank keeps, as in StarPU-MPI:
/// - the same registrations in the same order, and the same pushes in the
///   same order, each from one thread (a rank's books are replicated, not
///   exchanged: every rank decides alone where an op runs and what moves).
///   A rank makes every push, even one that does not concern it (a push
///   that does costs only its books there: a few table updates);
/// - a registered value lives at its address for the Dist's lifetime; on
///   the owner it holds the value, elsewhere the cached copy;
/// - wait_for_all, barrier, allreduce_sum and the destructor are
///   collective: every rank calls them, in the same order. A rank that
///   breaks this one (its program leaves the Dist's scope on an exception
///   while the others wait in wait_for_all) makes their collective throw,
///   naming the failure or the rank that left; its destructor waits for
///   theirs.
///
/// Ranks that break the second rule (a push skipped, made on another
/// variable, in another order, placed elsewhere) are told at the next
/// wait_for_all or barrier, with a DivergedError on every rank; a transfer
/// that meets a receive made by another push fails that receive instead of
/// landing, and a wait_for_var fails once a peer that entered a
/// wait_for_all or barrier proves the books diverged. Op bodies are not
/// compared (docs/dist.md).
///
/// @par Thread safety
/// register_*, push, the waits and the destructor: one thread at a time (the
/// same program order on every rank is the contract). rank(), size(),
/// stats() and executor(): any thread.
class Dist {
 public:
  /// Needs MPI initialised (ordo::dist::Mpi, or the program's own
  /// MPI_Init_thread with MPI_THREAD_SERIALIZED or more); throws
  /// ordo::Error{Errc::invalid_argument} otherwise. Starts the progress thread.
  explicit Dist(Engine& engine, Options options = {});
  /// Drains: waits for every op and transfer this rank pushed and for every
  /// rank to do the same (collective), then stops the progress thread.
  /// Never throws; never hangs past Options::shutdown_timeout (MPI_Abort).
  ~Dist();
  Dist(const Dist&) = delete;
  Dist& operator=(const Dist&) = delete;

  [[nodiscard]] int rank() const noexcept;
  [[nodiscard]] int size() const noexcept;
  [[nodiscard]] Engine& engine() const noexcept;

  /// Registers `value` (trivially copyable, at a stable address on every
  /// rank) owned by `owner`. `id`: any 64-bit id, the same on every rank
  /// (default: the registration's ordinal).
  template <class T>
  DistVar register_value(T& value, int owner, std::uint64_t id = kAutoId) {
    static_assert(std::is_trivially_copyable_v<T>, "register_value needs a trivially copyable T; use register_codec");
    return register_bytes(static_cast<void*>(&value), sizeof(T), owner, id);
  }
  /// A flat buffer of `size` bytes (the same size on every rank).
  DistVar register_bytes(void* data, std::size_t size, int owner, std::uint64_t id = kAutoId);
  /// A value moved by the user's serialize / deserialize pair.
  DistVar register_codec(Codec codec, int owner, std::uint64_t id = kAutoId);

  /// The rank where a push of these lists runs: `rank` if it is >= 0, else
  /// the owner of the first variable of `writes`, else of `reads`, else 0.
  [[nodiscard]] int executor(DistSpan reads, DistSpan writes, int rank = -1) const;

  /// Pushes `fn` (`void(RunContext)` or `void()`), which runs on
  /// executor(reads, writes, rank) reading `reads` and mutating `writes`
  /// there (their values at that rank's addresses). Every rank calls it.
  ///
  /// A push that throws here (a DistVar this Dist did not register, a
  /// deleted variable, ...) leaves this rank's books different from the
  /// others': the Dist tells every rank, and from then on every wait of
  /// every rank (the next wait_for_all on all of them, wait_for_var where a
  /// transfer was due) throws a RemoteError naming this rank, the push and
  /// the cause, and every later push throws it at once. No rank reads a
  /// value its books expected and never got.
  template <class F>
  void push(F&& fn, DistSpan reads, DistSpan writes, OpAttrs attrs = {}, int rank = -1) {
    static_assert(ordo::detail::is_sync_fn_v<std::decay_t<F>>,
                  "Dist::push needs a body callable as void(RunContext) or void()");
    ordo::detail::refuse_in_capture(&engine(), "ordo::dist::Dist::push");
    check_books();
    try {
      Plan& plan = begin_push(reads, writes, rank);
      if (plan.runs_here) {
        detail::TrackedBody<std::decay_t<F>> body(std::forward<F>(fn), pending_);
        engine().push_sync(std::move(body), Context::cpu(), plan.reads, plan.writes, attrs);
      }
      end_push(plan);
    } catch (...) {
      push_failed(attrs.name);
      throw;
    }
  }

  /// Waits until every op pushed so far on `v` has finished on this rank,
  /// including the transfers that bring a remote write back to the owner,
  /// and rethrows (and clears) the error this rank's copy carries: on the
  /// owner, the error of the last write, wherever it ran. Not collective,
  /// no barrier: a rank that holds no part of `v`'s history returns at
  /// once, and its copy may be stale (only the owner's is current). Once a
  /// push failed on some rank (see push), throws that failure wherever it
  /// is known; a transfer this rank waits for fails as soon as the news
  /// arrives, so the owner never returns with the value the push left stale.
  /// Throws a DivergedError if a peer that entered a wait_for_all or
  /// barrier meanwhile shows that the ranks pushed different sequences (this
  /// rank then takes its part in that collective, so the peers' fail too).
  void wait_for_var(DistVar v);
  /// Collective. First compares the ranks' sequences of pushes (one
  /// allreduce), then Engine::wait_for_all on this rank, then a barrier, so
  /// every rank's pushes so far have finished everywhere when any returns.
  /// Rethrows (after the barrier) what the local wait_for_all threw. If a
  /// push failed on any rank, throws that failure (RemoteError naming the
  /// rank and the push) on every rank; if the ranks pushed different
  /// sequences, a DivergedError, the same on every rank. Either way the
  /// Dist is failed from then on (every later push and wait throws it).
  void wait_for_all();
  /// Collective. Returns when every rank has called it (an allreduce on the
  /// progress thread: transfers go on meanwhile), after comparing the
  /// ranks' sequences of pushes as wait_for_all does (and throwing as it does).
  void barrier();
  /// Collective. Sums `values` element-wise over the ranks, in place
  /// (MPI_Iallreduce on the progress thread).
  void allreduce_sum(std::span<std::uint64_t> values);

  /// This rank's counters.
  [[nodiscard]] Stats stats() const;

  static constexpr std::uint64_t kAutoId = ~std::uint64_t{0};

 private:
  /// One push's plan: what this rank pushes for it (kept in the Dist: one push at a time).
  struct Plan {
    bool runs_here = false;
    int exec = 0;
    std::vector<Var> reads, writes;
    std::vector<std::uint32_t> written;  // registration indices of the mutated variables
  };
  Plan& begin_push(DistSpan reads, DistSpan writes, int rank);
  void end_push(Plan& plan);
  /// Throws the failure of a push on any rank, once known here (a relaxed
  /// load when there is none).
  void check_books() const;
  /// The push being made threw: records it here and tells every rank.
  void push_failed(const char* op_name) noexcept;

  std::unique_ptr<detail::DistImpl> impl_;
  detail::PendingOps* pending_ = nullptr;  // impl_'s
  Plan plan_;
};

}  // namespace ordo::dist

// src/core/engine_core.hpp - the engine behind ordo::Engine. Internal.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ordo/context.hpp"
#include "ordo/detail/op_record.hpp"
#include "ordo/error.hpp"
#include "ordo/fence.hpp"
#include "ordo/options.hpp"
#include "ordo/var.hpp"
#include "profiler/profiler.hpp"
#include "records.hpp"
#include "engine_kinds.hpp"
#include "stats.hpp"
#include "worker_pool.hpp"

namespace ordo::detail {

/// Ops made ready by one completion, kept in the order they were granted.
using ReadyList = OpList;

/// Where a ready op runs: EngineCore::place() decides, every path asks it.
enum class Place : std::uint8_t {
  now,     ///< on this thread, before the call returns (nested if it runs an op already)
  next,    ///< on this thread, after the op it runs (its trampoline)
  chain,   ///< as next, on a worker: its continuation, counted against its continuation budget
  launch,  ///< on this completion thread, inside its delivery loop (ops that run no user code)
  queue,   ///< queued to its pool (route()) for a worker
};

/// Where place() puts an op, and for Place::queue the pool.
struct Placement {
  Place where;
  WorkerPool* pool = nullptr;
};

/// Ops for one pool, queued together when flushed (WorkerPool::enqueue_list):
/// the ops one completion makes ready reach the queue under one lock, with
/// one wake-up. An op for another pool flushes the ops gathered so far.
class QueueBatch {
 public:
  QueueBatch() = default;
  QueueBatch(const QueueBatch&) = delete;
  QueueBatch& operator=(const QueueBatch&) = delete;
  ~QueueBatch() { flush(); }
  void add(WorkerPool* pool, OpRecord* op) {
    if (pool != pool_) flush();
    pool_ = pool;
    ops_.push(op);
  }
  void flush() {
    if (!ops_.empty()) pool_->enqueue_list(ops_.head);
    ops_ = OpList{};
  }

 private:
  WorkerPool* pool_ = nullptr;
  OpList ops_;
};

/// What made an op ready: its push (every access granted at once), the
/// completion of another op (or a fence's release), or a replay's recorded
/// op whose body has just returned on this thread (EngineCore::continuations_here).
enum class Origin : std::uint8_t { push, completion, finished };

/// What place() decides on: an op's record where it is made ready, or a
/// push that has none yet (the direct path, a lease granted at push,
/// ordo::asio's inline mode asking ahead).
struct OpShape {
  OpKind kind = OpKind::fn;
  std::uint8_t traits = kNoTraits;  ///< OpTraits bits
  FnProperty prop = FnProperty::normal;
  Context ctx{};
  bool skipped = false;  ///< carries an error and does not always run: bookkeeping only
  const IoSite* io = nullptr;  ///< pushed from an io thread (EngineCore::inline_at_io)
};

/// The engine's end, shared with the captured graphs that keep variables
/// (VarKeeper): closed when the engine is destroyed, after which a graph
/// (which may outlive its engine) leaves the variables alone.
struct KeeperRegistry {
  std::mutex mutex;
  bool closed = false;  ///< guarded by mutex
};

/// A captured graph's hold on its variables between replays
/// (src/graph/replay.cpp). When a replay's last recorded op on a variable
/// has ended and nothing waits on it, the access the replay was granted is
/// kept instead of released; what a release would leave on the variable
/// (its completed writes, its last write's outcome) waits in the keeper's
/// slot. The next replay takes the access over (kKept -> kTaken) and, at
/// its end, keeps it again (kTaken -> kKept): neither touches the variable.
/// A push on it takes it back first (EngineCore::unkeep, under the
/// variable's lock): a kept access ends then, its slot settled on the
/// variable; one a replay has taken is marked wanted (kTaken -> kWanted) and
/// that replay releases it at its end. Every order is as if released.
struct VarKeeper {
  enum State : std::uint8_t { kFree, kKept, kTaken, kWanted };
  /// What a release would have left on the variable, while its access is
  /// not free: owned by whoever holds the access (the keeper, or the replay
  /// that took it).
  struct Slot {
    ErrorRecord* error = nullptr;  ///< its error (a reference): a write's outcome, or what a read found
    std::atomic<std::uint64_t> writes{0};  ///< completed writes not yet counted in its version
  };
  VarKeeper(std::size_t vars, std::shared_ptr<KeeperRegistry> r)
      : state(std::make_unique<std::atomic<std::uint8_t>[]>(vars)),
        slots(std::make_unique<Slot[]>(vars)),
        n(vars),
        registry(std::move(r)) {}
  ~VarKeeper() {
    for (std::size_t k = 0; k < n; ++k) release(slots[k].error);  // an engine gone first
  }
  VarKeeper(const VarKeeper&) = delete;
  VarKeeper& operator=(const VarKeeper&) = delete;
  /// Held for kKept -> kTaken (a replay) and for a push's kKept -> kFree and
  /// kTaken -> kWanted; a replay's end (kTaken -> kKept) is one CAS.
  SpinLock lock;
  std::unique_ptr<std::atomic<std::uint8_t>[]> state;  ///< per variable of the graph
  std::unique_ptr<Slot[]> slots;
  std::size_t n;
  /// Slots with an error: a replay that takes accesses over reads their
  /// errors only when there are any.
  std::atomic<std::int64_t> errors{0};
  std::shared_ptr<KeeperRegistry> registry;
};

/// A replay's step inside its holders' push (EngineCore::submit_holders),
/// with every held variable locked and nothing granted yet: it takes the
/// graph's kept accesses over, or returns false when one of those it
/// counted on was taken back meanwhile (nothing is pushed; it retries).
/// Inside the push, so the whole replay is one atomic step to other pushes.
struct HoldStep {
  bool (*under_locks)(HoldStep* self);
};

/// What a holder (OpTraits::kHolder) does when its access i is granted,
/// under the variable's lock: inside the holders' push (`at_push`), or
/// later, by a completion, when ops it makes ready go to `ready`.
struct HolderHooks {
  void (*granted)(const HolderHooks* self, std::size_t i, VarRecord* v, ReadyList& ready, bool at_push);
};

class EngineCore final : public PoolHost {
 public:
  explicit EngineCore(Options options);
  ~EngineCore();
  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;

  /// Drains, joins the workers and reports unobserved errors. Returns false
  /// if async ops were abandoned (the core must then be kept alive).
  bool shutdown() noexcept;
  /// A held pusher (throttle()) goes on once no op has finished for this
  /// long: an op in flight may be waiting for something the pusher does next.
  static constexpr auto kStallPatience = std::chrono::milliseconds(10);

  // Variables.
  Var new_variable();
  std::uint64_t var_version(Var var);
  /// The record behind `var`, or throws (empty handle, another engine's).
  /// Deletion is checked later, under the variable's lock.
  VarRecord* checked_record(const Var& var) const {
    VarRecord* v = VarRecord::of(var);
    if (v != nullptr) prefetch_for_write(v);  // the push locks it soon (spin_lock.hpp)
    if (v != nullptr && v->engine == this) [[likely]] return v;
    bad_record(var);
  }
  [[noreturn]] void bad_record(const Var& var) const;

  // Pushing. push() gathers the lists itself; submit() takes a normalised
  // list (an operator's, a delete's, the direct path's).
  static constexpr std::size_t kPushLocal = 16;  ///< variables gathered on the stack; more go to the heap
  void push(OpRecord* op, Context ctx, VarSpan reads, VarSpan writes, const OpAttrs& attrs);
  void submit(OpRecord* op, Context ctx, const AccessSpec* specs, std::size_t n, const OpAttrs& attrs);
  static std::size_t normalize(VarSpan reads, VarSpan writes, AccessSpec* out, const EngineCore* owner);
  /// normalize() in two steps: the checked accesses in the caller's order
  /// (writes, then reads), then sorted by address with duplicates merged
  /// (throws for two handles of one variable of different generations).
  /// Inlined into its callers (all in engine_core.cpp): the direct path is
  /// short enough that a call and its register spills show.
  [[gnu::always_inline]] static inline std::size_t gather(VarSpan reads, VarSpan writes, AccessSpec* out,
                                                          const EngineCore* owner);
  static std::size_t sort_merge(AccessSpec* out, std::size_t n);

  // The direct path (detail::DirectRun) of an op pushed with
  // OpAttrs::inline_ok: whether a push may take it (before normalising: the
  // cheap checks), then the grant of all its accesses (Direct::granted: the
  // caller runs the body, then end_direct with the body's error, if any; an
  // owned reference).
  [[nodiscard]] bool direct_allowed(Context ctx, const OpAttrs& attrs, std::size_t n) const noexcept;
  /// Whether a push of `n` variables on `ctx` may go without an op record
  /// (the direct path, a lease granted at push).
  [[nodiscard]] bool recordless(Context ctx, std::size_t n) const noexcept;
  /// Specs as gathered (Direct::normalized then tells the caller to
  /// sort_merge them before the usual push). `oper`: a pre-built operator's
  /// run (specs: a copy of its OperatorRecord::direct_* list, read without a
  /// reference), granted only if `oper->gen` is still `oper_gen` once the
  /// variables are locked; `attrs` is read only then.
  /// Both inline (grants.hpp), in Engine's side of the direct path (engine.cpp).
  [[gnu::always_inline]] inline Direct begin_direct(DirectRun& run, Context ctx, const AccessSpec* specs,
                                                    std::size_t n, const OpAttrs& attrs,
                                                    OperatorRecord* oper = nullptr,
                                                    std::uint64_t oper_gen = 0) noexcept;
  [[gnu::always_inline]] inline void end_direct(DirectRun& run, ErrorRecord* own) noexcept;

  /// A coroutine lease granted inside its push, without the op's body
  /// (EngineExtension::grant_now): lease_direct_allowed (the cheap checks,
  /// before normalising), then, if every variable is free (specs sorted and
  /// merged), `op` becomes the started op its OnComplete completes, as if
  /// its body had run; false (nothing changed) if a variable is busy, stale
  /// or carries an error.
  [[nodiscard]] bool lease_direct_allowed(Context ctx, const OpAttrs& attrs, std::uint8_t traits,
                                          std::size_t n) const noexcept;
  /// EngineExtension::inline_ok_decides: place() at push, with and without OpTraits::kRunsOnPusher.
  [[nodiscard]] bool inline_ok_decides(Context ctx, const OpAttrs& attrs) const noexcept;
  /// EngineExtension::inline_at_io: whether place() runs an inline_ok op,
  /// pushed ready from an io thread, right there (ordo::asio's inline mode).
  [[nodiscard]] bool inline_at_io(Context ctx, const OpAttrs& attrs, const IoSite& site) const noexcept;
  /// An op pushed from an io thread (IoSite) runs there only if its body
  /// costs at most kInlineCostLimitNs, and, unless it costs at most
  /// kTrivialCostNs, only while neither the engine nor that io_context has
  /// other work: handing it to a worker costs two wake-ups (the worker's,
  /// then the io_context's for its completion), which a longer body or a
  /// busy server pays for.
  static constexpr std::int64_t kInlineCostLimitNs = 200'000;
  static constexpr std::int64_t kTrivialCostNs = 2'000;
  /// What every push stores in its record before granting: the engine, the
  /// attributes and the access count, with an access block where `n` does
  /// not fit inline (op_free() sizes it by n_access).
  [[gnu::always_inline]] inline void prepare(OpRecord* op, Context ctx, std::size_t n, const OpAttrs& attrs);
  [[nodiscard]] bool grant_lease_now(OpRecord* op, const AccessSpec* specs, std::size_t n) noexcept;

  // Operators.
  OperatorRecord* alloc_operator();
  void free_operator(OperatorRecord* rec) noexcept;
  void release_operator(OperatorRecord* rec) noexcept;
  /// delete_operator's part once `gen` is bumped: drops the handle's
  /// reference, or leaves it to the last direct run still in its body.
  void retire_operator(OperatorRecord* rec) noexcept;

  // Running and completing.
  /// Where `op`, ready now on this thread, runs: the one placement decision.
  [[nodiscard]] Placement place(const OpRecord* op, Origin origin) const;
  [[nodiscard]] Placement place(const OpShape& op, Origin origin) const;
  /// How many ops shaped like `op`, each made ready by the body that has
  /// just returned on this worker, may run here one after another as its
  /// continuations (place() says Place::chain; 0 when it does not): the
  /// caller runs them at once, without op records (a replay's recorded
  /// ops), and reports how many it ran (continued()).
  [[nodiscard]] std::uint32_t continuations_here(const OpShape& op) const;
  static void continued(std::uint32_t n) noexcept;
  /// `n` ops run by continuations_here's callers have finished (they were
  /// counted in flight when pushed, like any op).
  void finished_here(std::uint32_t n) noexcept {
    if (n > 0) op_finished(n);
  }
  /// Runs or queues a ready op where place() says (a fence gate may hold it
  /// first). With `batch`, an op to queue joins it (QueueBatch).
  void dispatch(OpRecord* op, Origin origin, QueueBatch* batch = nullptr);
  /// Dispatches the ops a completion made ready, in order; those queued to
  /// one pool reach it together (QueueBatch).
  void dispatch_ready(const ReadyList& ready);
  /// Runs or queues `op` as placed.
  void run_at(OpRecord* op, const Placement& at, QueueBatch* batch = nullptr);
  /// Fence gate (ordo/fence.hpp): installs (or, with null, removes) it.
  void set_fence_gate(FenceGate* gate) noexcept { gate_.store(gate, std::memory_order_release); }
  /// Whether a FenceGate is installed (ops may wait for device work behind
  /// their variables' fences).
  [[nodiscard]] bool fence_gate_installed() const noexcept { return gate_.load(std::memory_order_acquire) != nullptr; }
  /// HeldOp::release: dispatches a held op, failed with `error` if given.
  void release_held(OpRecord* op, std::exception_ptr error);
  void execute(OpRecord* op) override;
  void complete(OpRecord* op, ErrorRecord* own_error) noexcept;
  ErrorRecord* make_error(std::exception_ptr e, const char* op_name);
  void report_late_error(std::exception_ptr e, const char* op_name);

  // A replay's recorded ops (src/graph/replay.cpp): they wait in the
  // replay, not in variable queues; one push of holders holds the graph's
  // variables for them.
  /// Pushes holders (OpTraits::kHolder, each with its HolderHooks in
  /// `aux`) with the accesses `specs` (sorted by variable, each once), at
  /// most kMaxAccess each, in order: one atomic step, which also counts
  /// `ops` more in flight (the ops the holders stand for). Each access
  /// granted, now or later, calls its holder's hook; `step` runs first,
  /// under the locks. Returns n; the index of a deleted variable; or
  /// kDeclined when the step declined (nothing pushed or counted either way).
  std::size_t submit_holders(OpRecord* const* holders, const AccessSpec* specs, std::size_t n, const OpAttrs& attrs,
                             std::size_t ops, HoldStep& step);
  static constexpr std::size_t kDeclined = ~std::size_t{0};
  /// Before a replay takes or holds anything: waits for room as a push
  /// does (max_in_flight), so a loop of replays is held back as a loop of
  /// pushes is. Never while holding an access: the ops in flight may wait on it.
  void wait_for_room() {
    if (over_bound()) throttle();
  }
  static constexpr std::size_t kMaxAccess = 0xFFFF;  ///< an op's variables (OpRecord::n_access)
  /// A replay's last recorded op on v has ended; its access was granted to
  /// a holder. It ends as a completion would (`outcome` left on a written
  /// variable, `writes` completed writes counted on it), kept as access k
  /// of `keeper` if nothing waits on v and no other graph claims it, else
  /// released. Once all of a holder's accesses have ended, the holder is
  /// completed by end_holder (its layer knows when).
  void hold_ended(VarRecord* v, bool write, ErrorRecord* outcome, std::uint64_t writes, VarKeeper* keeper,
                  std::uint32_t k) noexcept;
  /// The same for an access the replay took over from `keeper`: kept again
  /// (one CAS, v untouched) unless a push wants it.
  void taken_ended(VarRecord* v, bool write, ErrorRecord* outcome, std::uint64_t writes, VarKeeper* keeper,
                   std::uint32_t k) noexcept;
  void end_holder(OpRecord* holder) noexcept;
  /// Under v's lock, v->keeper set: a kept access ends before anything
  /// queues on v; one a replay holds is marked wanted.
  [[gnu::cold, gnu::noinline]] static void unkeep(VarRecord* v) noexcept;
  /// At capture: each variable of specs[0..n) (the graph's, in its order)
  /// that nothing uses, waits on or holds now is granted and kept for the
  /// graph's first replay, which then starts as later ones do. Invisible
  /// to every push (the first on it takes the access back). Returns how
  /// many it kept.
  static std::size_t keep_idle(VarKeeper& keeper, const AccessSpec* specs, std::size_t n) noexcept;
  /// The registry a graph's VarKeeper shares with this engine.
  [[nodiscard]] const std::shared_ptr<KeeperRegistry>& keepers() const noexcept { return keepers_; }
  /// A graph's keeper going away: the accesses it keeps on specs[0..n)
  /// (its variables, in its order) end, unless the engine is gone.
  static void drop_kept(VarKeeper& keeper, const AccessSpec* specs, std::size_t n) noexcept;
  [[nodiscard]] bool live_error(const ErrorRecord* e) const noexcept { return live(e); }

  // Waiting.
  void wait_for_var(Var var);
  void wait_for_all();
  [[nodiscard]] bool on_worker_of(Context ctx) const noexcept;
  /// detail::EngineExtension: the CPU pool's idle workers may run `task`.
  bool attach_idle_task(IdleTask* task) noexcept {
    return kind_->cpu() != nullptr && kind_->cpu()->attach_task(task);
  }
  void detach_idle_task(IdleTask* task) noexcept {
    if (kind_->cpu() != nullptr) kind_->cpu()->detach_task(task);
  }
  void want_idle_task_runner() noexcept {
    if (kind_->cpu() != nullptr) kind_->cpu()->want_task_runner();
  }
  [[nodiscard]] std::size_t in_flight() const noexcept {
    return static_cast<std::size_t>(in_flight_.load(std::memory_order_relaxed));
  }
  std::size_t pending_errors();
  /// What the ops in flight wait for, as the variables show it: the op
  /// holding each variable's write, the reads holding one, the first op
  /// waiting on each; by name. For a stuck shutdown (kStuckNotice).
  struct PendingOps {
    std::vector<std::string> lines;         ///< "op 'holder' holds var 3", "op 'x' waits for var 3"
    std::vector<std::string> holder_names;  ///< names of the named ops holding a write
    [[nodiscard]] std::string describe(std::size_t most) const;
  };
  PendingOps pending_ops();
  /// A destructor whose ops make no progress for this long says on stderr
  /// what it waits for (then goes on waiting, up to shutdown_timeout).
  static constexpr auto kStuckNotice = std::chrono::seconds(1);

  const Options& options() const noexcept { return opts_; }
  /// The profiler, or null when profiling is off (Options::profile).
  ProfilerCore* profiler() const noexcept { return prof_; }
  /// Engine::stats() (assembled in stats.cpp): completions and the layers' sources.
  StatsHub& stats_hub() noexcept { return stats_; }
  /// Errors raised so far (ErrorRecords made: ops that failed, late errors).
  [[nodiscard]] std::uint64_t errors_raised() const noexcept {
    return error_epoch_.load(std::memory_order_relaxed);
  }
  /// The pools started so far.
  [[nodiscard]] std::vector<const WorkerPool*> pools() const { return kind_->pools(); }
  void flush_finished() noexcept override;
  void worker_idle() noexcept override;

  /// Marks an engine call on this thread for its duration (see CallScope).
  class Call {
   public:
    explicit Call(EngineCore* core) noexcept;
    ~Call();
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

   private:
    CallScope scope_;
  };

 private:
  /// The pool that runs a queued op: the engine kind's decision.
  template <class Spec>
  void enter(OpRecord* op, Context ctx, Spec* specs, std::size_t n, const OpAttrs& attrs);
  template <class Op>
  WorkerPool* route(const Op& op) const { return kind_->route(op.ctx, op.prop); }
  template <class Op>
  [[gnu::always_inline]] inline Placement place_of(const Op& op, Origin origin) const;
  /// The cost rule above, for an op pushed from an io thread.
  [[nodiscard]] bool io_runs_here(const IoSite& io) const noexcept;
  void run_now(OpRecord* op);
  /// Runs the ops trampolined on this thread (run_later) until none is left.
  static void drain_inline(ThreadState& ts);
  void run_later(OpRecord* op);
  void op_finished(std::uint32_t n = 1) noexcept;
  bool must_notify(std::int64_t after) const noexcept;
  std::int64_t held_back_count() const noexcept;
  /// Ops held back reach Options::max_in_flight (0: no bound): a push
  /// (or a replay's holders) waits for room in throttle().
  bool over_bound() const noexcept {
    return opts_.max_in_flight != 0 && held_back_count() >= static_cast<std::int64_t>(opts_.max_in_flight);
  }
  void subtract_finished(std::int64_t n) noexcept;
  /// Wakes the idle and throttle waiters; only where the engine outlives the call.
  void wake_idle_waiters() noexcept;
  bool live(const ErrorRecord* e) const noexcept {
    return e != nullptr && e->epoch > cleared_epoch_.load(std::memory_order_relaxed);
  }
  void inherit(OpRecord* op, ErrorRecord* e) const noexcept;
  // Grants (engine_core.cpp): the one place that locks an op's variables,
  // grants or queues its accesses, and on release grants what waits behind
  // them. A push, the direct path, a lease granted at push and a
  // completion all go through these; nothing else locks variables to
  // grant or release.

  /// Locks the variables of `specs` one by one, asking check(spec) of each
  /// once it is held: in address order (the global lock order), waiting;
  /// with TryOnly in the given order, without waiting. Returns n with every
  /// lock held, or the index of the access whose lock was busy (TryOnly) or
  /// whose check failed, with none held.
  template <bool TryOnly, class Check>
  static std::size_t lock_vars(const AccessSpec* specs, std::size_t n, Check&& check) noexcept;
  static void unlock_vars(const AccessSpec* specs, std::size_t n) noexcept;
  /// Under its lock: the access may be granted now (its variable current,
  /// free for it and carrying no live error).
  bool grantable(const AccessSpec& spec) const noexcept;
  /// Under the locks: grants every access (each was grantable); `by` the
  /// op that holds them (null: the direct path); `unlock`: releases each
  /// lock as it goes.
  static void grant_all(const AccessSpec* specs, std::size_t n, const OpRecord* by, bool unlock) noexcept;
  /// Under the locks: links op's accesses; grants those free now (the op
  /// inherits their errors) and queues the rest; returns how many it granted.
  std::int32_t grant_or_queue(OpRecord* op, const AccessSpec* specs, std::size_t n, bool is_delete) noexcept;
  /// The same, with granted(i, v) called for each access granted instead.
  template <class Granted>
  std::int32_t grant_or_queue(OpRecord* op, const AccessSpec* specs, std::size_t n, bool is_delete,
                              Granted&& granted) noexcept;
  /// Ends granted accesses (op->access or a direct run's specs): each under
  /// its variable's lock, released with `outcome`; then, where
  /// under_lock(i, v) says so, what waits behind it is granted and the ops
  /// that makes ready collected in `ready`.
  template <bool Profiled, class Access, class UnderLock>
  void release_all(const Access* list, std::size_t n, ErrorRecord* outcome, ReadyList& ready, const OpRecord* by,
                   UnderLock&& under_lock);
  /// Completion: releases op's accesses, collects the ops they make ready;
  /// returns the variable a delete_var op deleted. Profiled: records edges.
  template <bool Profiled>
  [[gnu::always_inline]] inline VarRecord* release_accesses(OpRecord* op, ErrorRecord* outcome, ReadyList& ready);
  template <bool Profiled>
  void grant_waiting(VarRecord* v, ReadyList& ready, const OpRecord* by);
  /// The profiled completion (records the end and every grant), out of line
  /// so that the unprofiled one keeps its code.
  [[gnu::noinline, gnu::cold]] VarRecord* release_accesses_profiled(OpRecord* op, ErrorRecord* own_error,
                                                                   ErrorRecord* outcome, ReadyList& ready);
  /// May this thread run an op with `traits` that is ready at its push? The
  /// push-side rule of place(), shared with the direct paths.
  [[nodiscard]] bool pusher_runs(std::uint8_t traits, const ThreadState& ts) const noexcept {
    if (serial_) return true;
    return (traits & kRunsOnPusher) != 0 && (!ts.completion_thread || (traits & kNoUserCode) != 0);
  }
  bool all_idle() const noexcept;
  /// Backpressure (Options::max_in_flight): holds a pusher while too many
  /// ops are held back; it only waits, it never runs an op.
  void throttle();
  void recycle_var(VarRecord* v) noexcept;
  bool fence_hold(FenceGate* gate, OpRecord* op);

  Options opts_;
  /// The installed FenceGate or null. Written by set_fence_gate; read relaxed
  /// at every dispatch: a gate's fences are only set by ops pushed after it
  /// was installed, and those happen-before the dispatches that must see them.
  std::atomic<FenceGate*> gate_{nullptr};
  /// The count a throttled pusher waits for (half of max_in_flight); read by
  /// completions to decide whether to wake it (a hint: see throttle()).
  std::int64_t resume_at_ = 0;
  /// After no op finished for kStallPatience: how many ops held back pushers
  /// may go on to before they wait again (one more bound); 0 otherwise
  /// (throttle()). Relaxed: a hint.
  std::atomic<std::int64_t> stall_limit_{0};
  /// The naive engine: every op runs on the thread that makes it ready.
  bool serial_ = false;
  /// Profiling: null when off; every hook is one predictable branch on it
  /// (three per op: push, start, completion). Immutable after construction;
  /// owned by prof_storage_.
  ProfilerCore* prof_ = nullptr;
  std::unique_ptr<ProfilerCore> prof_storage_;
  /// Live counters (Engine::stats()): completions counted per thread where
  /// the in-flight count is kept; never on the push path of a queued op.
  StatsHub stats_;

  /// The engine kind: its pools and routes (immutable after construction).
  std::unique_ptr<EngineKindPolicy> kind_;

  // Variables. A spin lock: held for a free-list pop or a bump (a chunk's
  // allocation once per kVarChunk), never across a wait.
  SpinLock var_mutex_;
  std::vector<std::unique_ptr<VarRecord[]>> var_chunks_;  ///< guarded by var_mutex_
  std::size_t var_chunk_used_ = 0;                         ///< guarded by var_mutex_
  VarRecord* var_free_ = nullptr;                          ///< guarded by var_mutex_
  /// Closed by the destructor (the graphs' keepers then leave the variables alone).
  std::shared_ptr<KeeperRegistry> keepers_ = std::make_shared<KeeperRegistry>();

  // Operators.
  std::mutex oper_mutex_;
  std::deque<OperatorRecord> oper_storage_;  ///< guarded by oper_mutex_ (stable addresses)
  OperatorRecord* oper_free_ = nullptr;      ///< guarded by oper_mutex_

  // In-flight accounting. in_flight_ is incremented by submit before the op
  // can run, decremented by op_finished as the op's last touch of the engine.
  // seq_cst between the decrement and the waiter-count loads (Dekker with the
  // waiters, who increment their count and then load in_flight_).
  std::atomic<std::int64_t> in_flight_{0};
  /// Async ops whose body started and that have not completed (see
  /// held_back_count); relaxed: a hint for backpressure only.
  std::atomic<std::int64_t> async_started_{0};
  std::atomic<int> idle_waiters_{0};
  std::atomic<int> throttle_waiters_{0};
  std::mutex idle_mutex_;
  std::condition_variable idle_cv_;

  // Errors.
  std::atomic<std::uint64_t> error_epoch_{0};    ///< last epoch handed to an ErrorRecord
  std::atomic<std::uint64_t> cleared_epoch_{0};  ///< errors with epoch <= this are dead (wait_for_all)
  std::mutex error_mutex_;
  std::deque<ErrorRecord*> errors_;  ///< original errors, oldest first (owned refs; guarded)
};

}  // namespace ordo::detail

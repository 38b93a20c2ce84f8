// src/engine_core.hpp - the engine behind ordo::Engine. Internal.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "ordo/engine.hpp"
#include "profiler.hpp"
#include "records.hpp"
#include "worker_pool.hpp"

namespace ordo::detail {

inline constexpr int kMaxDevices = 64;

/// Worker pools of one GPU device (per_device engine), created on first use.
struct DevicePools {
  std::unique_ptr<WorkerPool> compute;
  std::unique_ptr<WorkerPool> copy_in;
  std::unique_ptr<WorkerPool> copy_out;
};

/// Ops made ready by one completion, kept in the order they were granted.
using ReadyList = OpList;

class EngineCore {
 public:
  explicit EngineCore(Options options);
  ~EngineCore();
  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;

  /// Drains, joins the workers and reports unobserved errors. Returns false
  /// if async ops were abandoned (the core must then be kept alive).
  bool shutdown() noexcept;
  /// steady_clock in nanoseconds (op timing; the worker pool's Keep).
  static std::int64_t now_ns() noexcept;
  /// How long after a worker (or a lender) takes a batch from its pool's
  /// queue the ops that its completions make ready may run ahead of the
  /// rest of the batch (dispatch()). Past it they are queued: the batch's
  /// ops, which no other worker can take, wait at most this long for them.
  /// W6 (10 us bodies) is as fast at 300 us as with no limit; 30 us loses
  /// ~1% (bench/, interleaved runs).
  static constexpr std::int64_t kAheadNs = 300'000;

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

  // Pushing.
  void submit(OpRecord* op, Context ctx, const AccessSpec* specs, std::size_t n, const OpAttrs& attrs);
  static std::size_t normalize(VarSpan reads, VarSpan writes, AccessSpec* out, const EngineCore* owner);
  /// normalize() in two steps: the checked accesses in the caller's order
  /// (writes, then reads), then sorted by address with duplicates merged
  /// (throws for two handles of one variable of different generations).
  /// Inlined into its callers (all in engine_core.cpp): the direct path
  /// paid a call and its register spills for it (callgrind, W2).
  [[gnu::always_inline]] static inline std::size_t gather(VarSpan reads, VarSpan writes, AccessSpec* out,
                                                          const EngineCore* owner);
  static std::size_t sort_merge(AccessSpec* out, std::size_t n);

  // The direct path (detail::DirectRun): whether a push may take it (before
  // normalising: the cheap checks), then the grant of all its accesses
  // (Direct::granted: the caller runs the body, then end_direct with the
  // body's error, if any; an owned reference).
  [[nodiscard]] bool direct_allowed(Context ctx, const OpAttrs& attrs, std::size_t n) const noexcept {
    return attrs.prop == FnProperty::normal && direct_allowed_here(ctx, n);
  }
  /// The checks of direct_allowed that do not look at the op.
  [[nodiscard]] bool direct_allowed_here(Context ctx, std::size_t n) const noexcept;
  /// Specs as gathered (Direct::normalized then tells the caller to
  /// sort_merge them before the usual push). `oper`: a pre-built operator's
  /// run (specs: a copy of its OperatorRecord::direct_* list, read without a
  /// reference), granted only if `oper->gen` is still `oper_gen` once the
  /// variables are locked; `attrs` is read only then.
  /// Both inlined into Engine's side of the direct path (engine_core.cpp).
  [[gnu::always_inline]] inline Direct begin_direct(DirectRun& run, Context ctx, const AccessSpec* specs,
                                                    std::size_t n, const OpAttrs& attrs,
                                                    OperatorRecord* oper = nullptr,
                                                    std::uint64_t oper_gen = 0) noexcept;
  [[gnu::always_inline]] inline void end_direct(DirectRun& run, ErrorRecord* own) noexcept;

  /// Work first for coroutine leases, without the op's body: a lease pushed
  /// where dispatch() would grant it at once (lease_direct_allowed: the
  /// cheap checks, before normalising) whose variables are all free (specs
  /// sorted and merged) is granted inside the push. `op` becomes the
  /// started fn_lease op its OnComplete completes, as if its body had run;
  /// false (nothing changed) if a variable is busy, stale or carries an error.
  [[nodiscard]] bool lease_direct_allowed(Context ctx, const OpAttrs& attrs, std::size_t n) const noexcept;
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
  void dispatch(OpRecord* op, bool from_push);
  /// Fence gate (ordo/fence.hpp): installs (or, with null, removes) it.
  void set_fence_gate(FenceGate* gate) noexcept { gate_.store(gate, std::memory_order_release); }
  /// HeldOp::release: dispatches a held op, failed with `error` if given.
  void release_held(OpRecord* op, std::exception_ptr error);
  void execute(OpRecord* op);
  void complete(OpRecord* op, ErrorRecord* own_error) noexcept;
  ErrorRecord* make_error(std::exception_ptr e, const char* op_name);
  void report_late_error(std::exception_ptr e, const char* op_name);

  // Waiting.
  void wait_for_var(Var var);
  void wait_for_all();
  [[nodiscard]] bool on_worker_of(Context ctx) const noexcept;
  /// detail::IdleRingAccess: the CPU pool's workers may wait in `ring`.
  bool attach_idle_ring(IdleRing* ring) noexcept {
    return opts_.kind != EngineKind::naive && cpu_ != nullptr && cpu_->attach_ring(ring);
  }
  void detach_idle_ring(IdleRing* ring) noexcept {
    if (cpu_ != nullptr) cpu_->detach_ring(ring);
  }
  void want_idle_ring_waiter() noexcept {
    if (cpu_ != nullptr) cpu_->want_ring_waiter();
  }
  [[nodiscard]] std::size_t in_flight() const noexcept {
    return static_cast<std::size_t>(in_flight_.load(std::memory_order_relaxed));
  }
  std::size_t pending_errors();

  const Options& options() const noexcept { return opts_; }
  /// The profiler, or null when profiling is off (Options::profile).
  ProfilerCore* profiler() const noexcept { return prof_; }
  void flush_finished() noexcept;
  void worker_idle() noexcept;

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
  WorkerPool* route(const OpRecord* op);
  DevicePools& device(int id);
  WorkerPool& helper_pool();
  void run_now(OpRecord* op);
  /// Runs the ops trampolined on this thread (run_later) until none is left.
  static void drain_inline(ThreadState& ts);
  void run_later(OpRecord* op);
  void op_finished() noexcept;
  bool must_notify(std::int64_t after) const noexcept;
  std::int64_t held_back_count() const noexcept;
  void subtract_finished(std::int64_t n) noexcept;
  /// Wakes the idle and throttle waiters; only where the engine outlives the call.
  void wake_idle_waiters() noexcept;
  bool live(const ErrorRecord* e) const noexcept {
    return e != nullptr && e->epoch > cleared_epoch_.load(std::memory_order_relaxed);
  }
  void inherit(OpRecord* op, ErrorRecord* e) const noexcept;
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
  /// Work first: whether `op` (ready at push) should run on its pusher. Only
  /// sync CPU ops, and only while the timed ones averaged under
  /// Options::inline_below_ns (no sample yet: no).
  [[nodiscard]] bool runs_short(const OpRecord* op) const noexcept {
    if (!sampled(op)) return false;
    const OpFn& fn = op->kind == OpKind::oper ? op->oper->fn : op->fn;
    return short_ops() && !fn.is_async();
  }
  /// Work first is on and the engine's timed CPU ops are short (false until
  /// one has been timed: an op of unknown length, which may wait for
  /// something its pusher does next, goes to a worker).
  [[nodiscard]] bool short_ops() const noexcept {
    const std::int64_t avg = avg_op_ns_.load(std::memory_order_relaxed);
    return avg >= 0 && avg < inline_below_ns_;
  }
  /// Work first for coroutines: a lease ready at push is granted on the
  /// pushing thread (the coroutine goes on there without suspending) while
  /// the timed leases, grant to release, averaged under kLeaseBoundFactor x
  /// Options::inline_below_ns. The factor: a lease's span includes the
  /// coroutine's own resume and release (~100-300 ns here), and handing a
  /// coroutine to a worker costs more than a sync op (a resumption there:
  /// ~1.2 us per op measured on the W2co chain, 1.5 us offloaded against
  /// 0.35 us granted at push). A lease held across a suspension (I/O, a
  /// timer, another op) is long and sends later ones to the workers again.
  static constexpr std::int64_t kLeaseBoundFactor = 4;
  [[nodiscard]] bool short_leases() const noexcept {
    const std::int64_t avg = lease_avg_ns_.load(std::memory_order_relaxed);
    return avg >= 0 && avg < kLeaseBoundFactor * inline_below_ns_;
  }
  /// When a lease granted now starts its timed hold (ns), or 0 if this one
  /// is not timed: the first kFirstSamples, then one in kSampleEvery per thread.
  [[nodiscard]] std::int64_t lease_start(ThreadState& ts) const noexcept;
  /// Leases whose hold time feeds lease_avg_ns_: CPU ones, routed normally.
  [[nodiscard]] static bool lease_sampled(const OpRecord* op) noexcept {
    return op->kind == OpKind::fn_lease && op->prop == FnProperty::normal && !op->ctx.is_gpu();
  }
  /// Ops whose duration feeds the average: what the CPU pool would run.
  [[nodiscard]] static bool sampled(const OpRecord* op) noexcept {
    return op->prop == FnProperty::normal && !op->ctx.is_gpu() &&
           (op->kind == OpKind::fn || op->kind == OpKind::oper);
  }
  /// Whether submit runs `op` (ready at push) to completion before it returns.
  [[nodiscard]] bool completes_in_push(const OpRecord* op) const noexcept;
  /// Backpressure's bound on held_back_count() for a pusher (max_in_flight
  /// != 0). While ops are short, at most kShortWindow: a pusher whose ops
  /// queue behind a worker's (the first ops of a chain go to a worker until
  /// one is timed) pushes them at the offload rate, which a worker running
  /// them as continuations only just outpaces, so neither gets ahead for
  /// tens of thousands of ops. Held back at a short window, the pusher waits
  /// for a full drain (throttle) and its next pushes find their variables
  /// free: they run on it. Ops that wait for their pusher are excluded by
  /// the work-first rule (docs/guide.md) already. The same holds for a chain
  /// of short coroutine leases.
  ///
  /// Long ops (work first's average at kLongOpFactor x inline_below_ns or
  /// more, 2.4 us by default; samples are clamped at 16x) are held back at
  /// kLongWindow too, but it is a soft window: a pusher held there goes on,
  /// up to max_in_flight, as soon as a CPU worker sleeps with nothing queued
  /// (see throttle()). Lookahead for
  /// parallelism is then taken where it is needed, and otherwise the ops in
  /// flight, their queue nodes and their variables' records stay in cache:
  /// W6 (10 us bodies, 2 workers) ran ~2% faster held at 256 than at 4096
  /// (bench/, interleaved runs); held at 4096 and resumed at 3968 it was as
  /// slow as resumed at 2048, so the gain is the footprint. Ops between
  /// short and long keep the bound: ~0.5 us ops on 64 chains (ordo_io_bench's
  /// "worker never blocked") ran ~20% slower held at 256, whose refill,
  /// 128 ops, is then ~30 us of work, less than a pusher's wake-up on a busy
  /// 2-core machine; at 2.4 us an op it is ~150 us.
  static constexpr std::int64_t kShortWindow = 256;
  static constexpr std::int64_t kLongWindow = 256;
  [[nodiscard]] std::int64_t window() const noexcept {
    const auto bound = static_cast<std::int64_t>(opts_.max_in_flight);
    if (short_ops() || short_leases()) return std::min(bound, kShortWindow);
    return long_ops() ? std::min(bound, kLongWindow) : bound;
  }
  /// Work first's average of CPU ops says they are long (see window()).
  static constexpr std::int64_t kLongOpFactor = 12;
  [[nodiscard]] bool long_ops() const noexcept {
    return inline_below_ns_ != 0 && avg_op_ns_.load(std::memory_order_relaxed) >= kLongOpFactor * inline_below_ns_;
  }
  /// A CPU worker sleeps (or waits in an I/O ring) with no op queued: a hint.
  [[nodiscard]] bool cpu_starved() const noexcept;
  /// A pusher held at the soft window `soft` with `held` ops held back may
  /// go on towards the bound: a CPU worker starves, lookahead is wanted.
  [[nodiscard]] bool past_soft_window(std::int64_t soft, std::int64_t held) const noexcept;
  void record_duration(std::int64_t ns) noexcept { average_in(avg_op_ns_, samples_, ns, inline_below_ns_); }
  void record_lease(std::int64_t ns) noexcept {
    average_in(lease_avg_ns_, lease_samples_, ns, kLeaseBoundFactor * inline_below_ns_);
  }
  /// One sample `ns` into a moving average judged against `bound`.
  static void average_in(std::atomic<std::int64_t>& avg, std::atomic<std::uint32_t>& samples, std::int64_t ns,
                         std::int64_t bound) noexcept;
  bool all_idle() const noexcept;
  void throttle();
  /// Held back (throttle(), long ops): runs the CPU pool's queued ops on
  /// this thread in place of a parked worker until the ops held back are
  /// down to `resume_at` (true), or returns false at once, or when nothing
  /// is queued, for the usual wait.
  bool help(std::int64_t soft, std::int64_t resume_at);
  /// Ends this thread's lending before it blocks in the engine.
  void stop_helping() noexcept {
    if (lending_) cpu_->unlend(&t_state);
  }
  /// Whether a throttled pusher helps (help()): work first is on
  /// (Options::inline_below_ns, which allows ops on a pushing thread), the
  /// CPU pool can lend (2 workers or more) and its workers fill the CPUs.
  bool lending_ = false;
  void recycle_var(VarRecord* v) noexcept;
  bool fence_hold(FenceGate* gate, OpRecord* op);

  Options opts_;
  /// The installed FenceGate or null. Written by set_fence_gate; read relaxed
  /// at every dispatch: a gate's fences are only set by ops pushed after it
  /// was installed, and those happen-before the dispatches that must see them.
  std::atomic<FenceGate*> gate_{nullptr};
  /// The count a throttled pusher waits for (half the window, or 0 under
  /// work first); written under idle_mutex_ by the last pusher to wait, read by
  /// completions to decide whether to wake it (a hint: see throttle()).
  std::atomic<std::int64_t> resume_at_{0};
  /// Work first: Options::inline_below_ns (0 = off; naive: off, it runs
  /// everything inline anyway), and the moving average of timed CPU ops
  /// in ns (-1: none timed yet). Relaxed: a hint.
  std::int64_t inline_below_ns_ = 0;
  std::atomic<std::int64_t> avg_op_ns_{-1};
  std::atomic<std::uint32_t> samples_{0};  ///< timed ops so far, counted up to kFirstSamples
  /// The same for coroutine leases (OpKind::fn_lease), grant to release.
  std::atomic<std::int64_t> lease_avg_ns_{-1};
  std::atomic<std::uint32_t> lease_samples_{0};
  /// Profiling: null when off; every hook is one predictable branch on it
  /// (three per op: push, start, completion). Immutable after construction;
  /// owned by prof_storage_.
  ProfilerCore* prof_ = nullptr;
  std::unique_ptr<ProfilerCore> prof_storage_;

  // Pools (immutable after construction, except lazily created device pools).
  std::unique_ptr<WorkerPool> cpu_;
  std::unique_ptr<WorkerPool> cpu_priority_;  ///< per_device only
  std::unique_ptr<WorkerPool> io_;            ///< pooled only
  /// naive only: one thread for posts and for work made ready by a completion
  /// thread (created on first use, under device_mutex_; published with release).
  std::atomic<WorkerPool*> helper_{nullptr};
  std::unique_ptr<WorkerPool> helper_storage_;  ///< guarded by device_mutex_
  std::mutex device_mutex_;
  /// Device pools, published with release after construction under device_mutex_.
  std::array<std::atomic<DevicePools*>, kMaxDevices> devices_{};
  std::vector<std::unique_ptr<DevicePools>> device_storage_;  ///< guarded by device_mutex_

  // Variables.
  std::mutex var_mutex_;
  std::vector<std::unique_ptr<VarRecord[]>> var_chunks_;  ///< guarded by var_mutex_
  std::size_t var_chunk_used_ = 0;                         ///< guarded by var_mutex_
  VarRecord* var_free_ = nullptr;                          ///< guarded by var_mutex_

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

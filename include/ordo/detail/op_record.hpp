// ordo/detail/op_record.hpp - the record behind one pushed op. Internal.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "ordo/context.hpp"
#include "ordo/detail/op_fn.hpp"
#include "ordo/on_complete.hpp"

namespace ordo::detail {

class EngineCore;
struct VarRecord;
struct OperatorRecord;
struct ErrorRecord;
struct OpRecord;

/// Where an op's body lives and how the core treats it. What an op *is*
/// beyond that (async, runs user code, fence-exempt) is in its OpTraits.
enum class OpKind : std::uint8_t {
  fn,    ///< body in OpRecord::fn (sync or async)
  oper,  ///< body in the pre-built operator OpRecord::oper
  // Kinds from here on are dispatched specially (one compare on the hot path).
  wait_var,  ///< internal: wakes a thread blocked in wait_for_var (no user code)
  posted,    ///< Engine::post: body in OpRecord::fn, no variables, never run on the
             ///< posting thread, never held back by max_in_flight
};

/// What an op is, for the placement decision (EngineCore::place) and the
/// fence gate. Set at push: from OpAttrs::inline_ok, or by a layer through
/// detail::EngineExtension. Bits of OpRecord::traits.
enum OpTraits : std::uint8_t {
  kNoTraits = 0,
  /// May run on the thread that pushes it, if it is ready then: a short
  /// body that never blocks (OpAttrs::inline_ok), or a layer's body that
  /// runs no user code at push (a coroutine lease publishing its grant).
  kRunsOnPusher = 1,
  /// Runs no user code wherever it runs, and only starts asynchronous work
  /// (ordo::io's launchers): may start on a completion thread.
  kNoUserCode = 2,
  /// Orders itself after its variables' fences (the gpu layer's stream
  /// ops, ordo/fence.hpp): a FenceGate never holds it.
  kFenceExempt = 4,
  /// Its body's destructor takes the op's own error (a reference, null on
  /// success) from OpRecord::error: a captured graph's replayed op, whose
  /// replay reports it to its awaiter and, without pushes, passes it on to
  /// the ops that wait in the replay (src/graph/replay.cpp).
  kOutcomeToBody = 8,
  /// Never runs: holds variables for a replay, its accesses granted one by
  /// one (each grant calls the HolderHooks in OpRecord::aux, under the
  /// variable's lock) and ended one by one (EngineCore::hold_ended).
  kHolder = 16,
};

/// A push from a thread that serves an io_context (ordo::asio's inline
/// mode): what EngineCore::place() weighs besides the op, as that thread
/// knows it.
struct IoSite {
  std::int64_t cost_ns = -1;  ///< the body's measured cost (a moving average); -1: it never ran
  bool pending = false;       ///< completions of earlier inline runs still wait on that io_context
};

/// One access of an op to one variable. While waiting it is linked into the
/// variable's queue (guarded by that variable's lock); once granted it is
/// unlinked and only the variable's counters remember it.
struct AccessNode {
  OpRecord* op;
  AccessNode* next;
  std::uintptr_t bits;  ///< VarRecord address | 1 for a write (records are 8-aligned)

  [[nodiscard]] VarRecord* var() const noexcept { return reinterpret_cast<VarRecord*>(bits & ~std::uintptr_t{1}); }
  [[nodiscard]] bool write() const noexcept { return (bits & 1U) != 0; }
  void set(VarRecord* v, bool w) noexcept { bits = reinterpret_cast<std::uintptr_t>(v) | (w ? 1U : 0U); }
};

inline constexpr int kInlineAccess = 3;

/// A normalised access used to build op access lists: sorted by `var`
/// address (the global lock order), duplicates merged, read+write = write.
struct AccessSpec {
  VarRecord* var;
  std::uint32_t gen;
  bool write;
};

/// The op whose body is on a thread's stack (ThreadState::running): what a
/// blocking wait called from that body needs to refuse it by name.
struct RunningOp {
  const EngineCore* engine = nullptr;
  const char* name = nullptr;
};

/// What Engine::begin_direct decided for a push.
enum class Direct : std::uint8_t {
  declined,    ///< not eligible: push the usual way
  normalized,  ///< eligible, but a variable is busy: push the usual way with DirectRun's specs
  granted,     ///< every access granted: run the body now, then Engine::end_direct
};

/// The direct path (Engine::push_sync, Engine::push(Operator)) of an op
/// pushed with OpAttrs::inline_ok: a sync CPU op whose variables are all
/// free when it is pushed runs on the pushing thread with no op record. Its accesses are granted under the
/// variables' locks as a push would grant them, the body is called in place
/// (not moved into a type-erased slot), and the accesses are released as a
/// completion would release them. Lives on the pusher's stack.
struct DirectRun {
  static constexpr std::size_t kMaxAccess = 8;
  const AccessSpec* specs = nullptr;  ///< `local` (for a pre-built operator too: its copy)
  std::uint32_t n = 0;
  /// A pre-built operator's run: counted in its OperatorRecord::direct_runs
  /// (no reference taken), which end_direct decrements.
  OperatorRecord* oper = nullptr;
  Context ctx{};
  bool error_to_awaiter = false;  ///< OpAttrs::error_to_awaiter (end_direct leaves no error on the variables)
  RunningOp self{};
  const RunningOp* outer = nullptr;  ///< the thread's ThreadState::running before
  AccessSpec local[kMaxAccess];
};

/// Ownership: allocated by op_alloc() in push, owned by the engine from the
/// moment push() succeeds until its completion, then returned by op_free().
/// Records are recycled, never returned to the OS, so `gen` stays readable by
/// stale OnComplete copies.
struct alignas(64) OpRecord {
  // Layout: what a completion touches to grant a waiting access comes
  // first. A grant reads the access node (linked in a variable's queue) and
  // decrements `wait`; the record was written by its pusher, most likely on
  // the other core, so each line it reads there is a transfer, one after
  // the other (the node names the record). With `wait` and the first two
  // inline nodes in the record's first (aligned) line, a grant through them
  // takes one transfer, not two; the third node has the second line to
  // itself. 256 bytes, four lines.

  /// Accesses still to be granted + 1 (the pusher's guard, removed when the
  /// push has appended every access). The thread that brings it to zero
  /// dispatches the op; acq_rel so the dispatcher sees every grant's writes.
  std::atomic<std::int32_t> wait{0};
  /// Async ops only: 1 while the body is on the executing thread's stack, 2
  /// if the op was completed meanwhile (the executor then frees the record
  /// once the body returns), 0 otherwise.
  std::atomic<std::uint8_t> body{0};
  OpKind kind = OpKind::fn;
  std::uint8_t traits = kNoTraits;  ///< OpTraits bits, set by the push
  FnProperty prop = FnProperty::normal;
  bool always_run = false;
  /// Async body started and not yet completed: not counted by backpressure
  /// (it waits on something outside the engine). Written by the executing
  /// thread before the body runs, read by the completing one (ordered by the
  /// OnComplete hand-off).
  bool async_started = false;
  /// Released by a FenceGate (ordo/fence.hpp): set by HeldOp::release just
  /// before its dispatch, which clears it. Only touched with a gate installed.
  bool fence_released = false;
  /// Counted in the engine's in-flight count (set by the push). An op that
  /// runs to completion inside its push is not (EngineCore::submit).
  bool counted = true;
  /// OpAttrs::error_to_awaiter: the op's own error is not left on its
  /// variables (EngineCore::complete). Set by the push.
  bool error_to_awaiter = false;
  std::uint16_t n_access = 0;
  /// The first accesses (in variable address order), if they fit inline.
  AccessNode inline_access[kInlineAccess];
  /// Where the accesses are: inline_access, or a block from access_alloc().
  AccessNode* access = inline_access;
  /// Completion token. Written only by the CAS that claims completion (from
  /// the thread completing the op); read by OnComplete to detect a second call.
  std::atomic<std::uint64_t> gen{0};
  /// Error inherited from a variable at grant time, or the op's own. Set by
  /// CAS from null (grants on different variables race); owned reference.
  std::atomic<ErrorRecord*> error{nullptr};

  EngineCore* engine = nullptr;
  OpRecord* next = nullptr;  ///< intrusive link: ready queues and free lists
  int priority = 0;
  /// Profiling on only: the op's id in the profile (set by the push, before
  /// the op can be granted; read by the hooks of every later event).
  std::uint32_t prof_id = 0;
  Context ctx{};
  const char* name = nullptr;
  OperatorRecord* oper = nullptr;
  void* aux = nullptr;  ///< wait_var: the waiting thread's state
  std::uint64_t seq = 0;  ///< FIFO tie-break in the priority pool
  OpFn fn;

  [[nodiscard]] OnComplete completion() noexcept {
    return OnComplete{this, gen.load(std::memory_order_relaxed), name};
  }
};

static_assert(sizeof(OpRecord) == 256, "OpRecord's layout: see its comment (checked in src/core/op_pool.cpp)");

/// An op as its push left it (detail::EngineExtension::push): the record and
/// the generation its completion ends, so that a later look at the record
/// recognises the op only while it has not completed.
struct PushedOp {
  OpRecord* op = nullptr;
  std::uint64_t gen = 0;
};

/// Thread-caching allocator of op records (process-wide slabs, never freed).
OpRecord* op_alloc();
/// Frees the record and its access nodes (whose size class follows n_access).
void op_free(OpRecord* op) noexcept;
/// Access nodes for an op of n > kInlineAccess variables (recycled blocks).
AccessNode* access_alloc(std::size_t n);
/// Sets the op's variable count to n (at most its count), its block to n's size class.
void access_shrink(OpRecord* op, std::size_t n);

/// Frees an op record if push fails before the engine took it over.
class OpGuard {
 public:
  explicit OpGuard(OpRecord* op) noexcept : op_(op) {}
  OpGuard(const OpGuard&) = delete;
  OpGuard& operator=(const OpGuard&) = delete;
  ~OpGuard() {
    if (op_ != nullptr) {
      op_->fn.reset();
      op_free(op_);
    }
  }
  OpRecord* release() noexcept { return std::exchange(op_, nullptr); }
  [[nodiscard]] OpRecord* get() const noexcept { return op_; }

 private:
  OpRecord* op_;
};

}  // namespace ordo::detail

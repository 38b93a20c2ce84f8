// src/core/records.hpp - variable, error and operator records. Internal.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "ordo/context.hpp"
#include "ordo/detail/op_record.hpp"
#include "ordo/fence.hpp"
#include "ordo/var.hpp"
#include "spin_lock.hpp"

namespace ordo::detail {

/// what() of a stored exception ("unknown exception" if it is no std::exception).
inline std::string describe(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "unknown exception";
  }
}

/// A stored op failure, shared by the op that failed and every variable it
/// reached. Reference counted (atomic); immutable after creation except the
/// `observed` flag.
struct ErrorRecord {
  std::exception_ptr exception;
  std::string op_name;
  std::uint64_t epoch = 0;  ///< creation order; errors with epoch <= the engine's cleared epoch are dead
  std::atomic<int> refs{1};
  /// Set (to true, never back) by the first waiter that got it: a wait of
  /// the engine that rethrew it, or a layer's waiter (detail::ErrorRef::observe).
  /// Read by wait_for_all, pending_errors and the shutdown report, which pass
  /// over an observed error (docs/guide.md, "Errors and exceptions").
  std::atomic<bool> observed{false};
};

inline ErrorRecord* retain(ErrorRecord* e) noexcept {
  if (e != nullptr) e->refs.fetch_add(1, std::memory_order_relaxed);
  return e;
}
inline void release(ErrorRecord* e) noexcept {
  // acq_rel: the last releaser sees every write made through other references.
  if (e != nullptr && e->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete e;
}

struct VarKeeper;

/// One engine variable: its dependency queue (the ThreadedVar of MXNet).
///
/// Invariants (all fields below `lock` are guarded by it):
///  - `write_running` and `running_reads > 0` are never both true;
///  - if `head` is not null, then `write_running` or `head->write`:
///    a read waits only behind a write;
///  - accesses are granted strictly in queue order.
struct VarRecord {
  SpinLock lock;
  std::uint32_t gen = 0;         ///< bumped by delete_variable; a Var handle must match it
  bool deleted = false;          ///< delete_variable was called; recycled when its op completes
  bool write_running = false;    ///< a granted write has not completed yet
  std::int32_t running_reads = 0;///< granted reads not completed yet
  AccessNode* head = nullptr;    ///< first waiting access
  AccessNode* tail = nullptr;    ///< last waiting access
  std::uint64_t version = 0;     ///< completed writes, failed and skipped ones included
  ErrorRecord* error = nullptr;  ///< error of the last write (owned ref), may be dead (epoch)
  /// The op of the running write, while write_running (null for one on the
  /// direct path, which has no record): what a stuck shutdown names.
  const OpRecord* writer = nullptr;
  /// The keeper of the captured graph that holds an access to it between
  /// replays (kept, or taken by a replay: VarKeeper), else null; never one
  /// whose state for it is kFree. A push takes it back before anything
  /// else (EngineCore::unkeep).
  VarKeeper* keeper = nullptr;
  std::uint32_t keep_index = 0;  ///< its place in the keeper's graph
  bool keep_write = false;       ///< the kept access is a write
  /// Not guarded by `lock`: owned by the engine's FenceGate, if any (see
  /// ordo/fence.hpp); the engine only tests it for null at dispatch.
  FenceSlot fence{nullptr};

  // Immutable while the record is in use.
  class EngineCore* engine = nullptr;
  std::uint32_t id = 0;
  VarRecord* free_next = nullptr;  ///< engine's free list (guarded by the engine's var mutex)

  // Grants and releases: every path (a push, the direct path, a lease
  // granted at push, a completion) goes through these three, under `lock`.

  /// No running access conflicts with one of this kind (reads share, a write is alone).
  [[nodiscard]] bool compatible(bool write) const noexcept { return !write_running && (!write || running_reads == 0); }
  /// An access of this kind may be granted at its push: nothing waits before it.
  [[nodiscard]] bool free_for(bool write) const noexcept { return head == nullptr && compatible(write); }
  /// Marks an access of `by` granted (free_for was true, or it is the queue's head).
  void grant(bool write, const OpRecord* by) noexcept {
    if (write) {
      write_running = true;
      writer = by;
    } else {
      ++running_reads;
    }
  }
  /// Ends a granted access. A write counts as a version and leaves its
  /// outcome as the variable's error (none on success; `outcome` is retained).
  void release_access(bool write, ErrorRecord* outcome) noexcept {
    if (!write) {
      --running_reads;
      return;
    }
    write_running = false;
    ++version;
    if (error != outcome) {
      release(error);
      error = retain(outcome);
    }
  }

  /// Ends a granted access whose completion was already counted (a kept
  /// one: its writes and outcome were left on the variable when it was kept).
  void ungrant(bool write) noexcept {
    if (write) {
      write_running = false;
      writer = nullptr;
    } else {
      --running_reads;
    }
  }

  // Var's private members, reached through the friend declaration in Var.
  static VarRecord* of(const Var& v) noexcept { return v.rec_; }
  static std::uint32_t gen_of(const Var& v) noexcept { return v.gen_; }
  static Var handle(VarRecord* r) noexcept { return Var{r, r->gen, r->id}; }
};

/// A pre-built operator.
struct OperatorRecord {
  /// Bumped by delete_operator; an Operator handle must match it. acquire
  /// loads in push pair with the release store in delete_operator.
  std::atomic<std::uint64_t> gen{0};
  /// 1 for the live handle + 1 per push not yet completed. Incremented only
  /// while non-zero (push), so a freed record is never resurrected.
  std::atomic<std::int64_t> refs{0};
  OpFn fn;
  std::vector<AccessSpec> access;

  // The direct path (DirectRun) without a reference: a push reads this copy
  // of `access` having checked nothing, locks the variables it names, and
  // only then checks `gen` (under the first variable's lock, which
  // delete_operator takes after bumping it): a stale handle may read a
  // recycled record's copy (relaxed atomics: values, not a data race) and
  // lock some other variables of the engine for a moment, never run a body.
  // direct_n = 0: not for the direct path (no variables, more than
  // DirectRun::kMaxAccess, not a normal sync op). Written by init_operator.
  std::atomic<std::uint32_t> direct_n{0};
  std::atomic<std::uint32_t> direct_writes{0};  ///< bit i: access i is a write
  std::atomic<VarRecord*> direct_var[DirectRun::kMaxAccess]{};
  std::atomic<std::uint32_t> direct_gen[DirectRun::kMaxAccess]{};
  /// Direct runs whose body has not returned, and whether delete_operator
  /// left the handle's reference for the last of them to drop. Both guarded
  /// by the lock of access[0].var (the lowest address: the one every direct
  /// run holds while it checks `gen` and while it ends).
  std::int32_t direct_runs = 0;
  bool release_deferred = false;
  OpAttrs attrs;
  std::uint8_t traits = 0;  ///< OpTraits of every push (EngineExtension::new_operator)
  std::string name;
  class EngineCore* engine = nullptr;
  OperatorRecord* free_next = nullptr;
};

/// The body of `op`: its own, or its pre-built operator's.
inline OpFn& op_fn(OpRecord* op) noexcept { return op->kind == OpKind::oper ? op->oper->fn : op->fn; }

}  // namespace ordo::detail

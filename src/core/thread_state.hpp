// src/core/thread_state.hpp - what the current thread is to the engine. Internal.
#pragma once

#include <cstdint>

#include "ordo/detail/op_record.hpp"

namespace ordo::detail {

class EngineCore;
class WorkerPool;
struct ErrorRecord;

/// A call into an engine (a push) on the current thread. Ops finished while
/// it lasts are counted here and subtracted from the in-flight count when it
/// ends: the engine cannot be destroyed during a call, so no lock is needed.
struct CallScope {
  EngineCore* engine = nullptr;
  std::int64_t finished = 0;
  CallScope* outer = nullptr;
};

/// A FIFO list of ops linked through OpRecord::next: a completion's ready
/// ops, a thread's inline work.
struct OpList {
  OpRecord* head = nullptr;
  OpRecord* tail = nullptr;
  [[nodiscard]] bool empty() const noexcept { return head == nullptr; }
  /// Appends `op` (it comes out after those already there).
  void push(OpRecord* op) noexcept {
    op->next = nullptr;
    if (tail != nullptr) {
      tail->next = op;
    } else {
      head = op;
    }
    tail = op;
  }
  /// Removes and returns the first op; the list must not be empty.
  OpRecord* pop() noexcept {
    OpRecord* op = head;
    head = op->next;
    if (head == nullptr) tail = nullptr;
    return op;
  }
};

/// What the current thread is to the engine. One per thread.
struct ThreadState {
  EngineCore* engine = nullptr;  ///< engine this thread is a worker of (null: foreign thread)
  WorkerPool* pool = nullptr;    ///< its pool
  int index = -1;                ///< its index in the pool
  const RunningOp* running = nullptr;  ///< op whose body is on this thread's stack
  int depth = 0;                 ///< >0 while the thread drains inline work
  /// Ops to run on this thread once the current one is done, in order: a
  /// worker's continuation (at most one op that runs user code: the rest
  /// of what a completion releases goes to its deque, where idle workers
  /// steal it), a pusher's or the naive engine's trampoline.
  OpList inline_ops;
  /// Workers: ops finished but not yet subtracted from the engine's in-flight
  /// count (flushed in batches, and whenever the worker runs out of work).
  std::int64_t finished = 0;
  /// Workers: ops run as continuations since the last take from a deque.
  std::uint32_t continuations = 0;
  /// The deque a foreign thread's next queued op goes to (round robin).
  std::uint32_t deal = 0;
  CallScope* call = nullptr;  ///< innermost engine call on this thread, if any
  /// While the body of a skipped op is destroyed: the error that skipped it
  /// (Engine::skip_reason, detail::ErrorRef::skipping; a reference held by
  /// EngineCore::complete for that time).
  ErrorRecord* skip_error = nullptr;
  /// Inside an ordo::CompletionThread scope: an I/O reaper or event watcher
  /// that must never run user code (work it makes ready always goes to a pool).
  bool completion_thread = false;
  /// Starting a launcher at once inside a delivery (EngineCore::dispatch):
  /// what that launch makes ready meanwhile goes the usual way.
  bool launching = false;
};

/// A worker's bookkeeping period, in ops: it publishes its finished ops to
/// the engine's in-flight count once this many have piled up (the count's
/// line stays with the pusher), and after this many continuations in a row
/// takes from its deque (a chain cannot hold queued ops back for ever).
inline constexpr std::uint32_t kPeriodOps = 64;

// constinit: no dynamic initialisation, so other translation units reach it
// without a call to its TLS init function (the direct path reads it 3 times a push).
extern constinit thread_local ThreadState t_state;

}  // namespace ordo::detail

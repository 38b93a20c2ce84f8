// src/graph/auto_recorder.hpp - ordo::AutoCapture's state: an iteration's
// pushes recorded and compared with the graph learned from an earlier one,
// then replayed with the iteration's bodies or pushed. Internal.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "graph_data.hpp"
#include "ordo/detail/graph_capture.hpp"
#include "ordo/var.hpp"

namespace ordo::detail {

struct BodyPool;

/// One iteration's bodies, indexed by op (an operator push's slot stays
/// empty). Its users are the replay that runs them, or each op pushed with
/// one (and the iteration's end while it pushes); the last one destroys the
/// bodies and gives the set back to its pool, for a later iteration.
struct BodySet final : ReplayBodies {
  /// Slots in chunks of kChunk (a slot never moves: an op pushed with the
  /// set, and the replay, hold its address), and each slot's address in
  /// order (ReplayBodies::fns; what recording indexes).
  static constexpr std::size_t kChunk = 64;
  std::vector<std::unique_ptr<OpFn[]>> chunks;
  std::vector<OpFn*> ptrs;
  std::size_t used = 0;     ///< slots of recorded ops
  std::size_t touched = 0;  ///< slots that may hold a body
  /// Set (relaxed) by the recording thread before it hands the set to a
  /// replay or a push (which publish it); acq_rel decrements: the last
  /// user sees every body's run before it destroys them.
  std::atomic<std::size_t> users{0};
  BodySet* next = nullptr;  ///< in the pool's free list
  BodyPool* pool = nullptr;

  /// Slot i, emptied (a body left by a push that failed to record goes).
  OpFn& slot(std::size_t i);
  /// One user gone; the last destroys the bodies and returns the set.
  void release() noexcept override;
};

/// The sets of one AutoCapture. Outlives it while sets are in flight (the
/// last one back frees it).
struct BodyPool {
  std::mutex lock;  ///< guards the three fields below
  BodySet* free = nullptr;
  std::size_t out = 0;  ///< sets taken and not back yet
  bool closed = false;  ///< its AutoCapture is gone

  BodySet* take();
  void put(BodySet* s) noexcept;
  /// The AutoCapture is gone: free the sets as they come back.
  void close() noexcept;
};

/// ordo::AutoCapture's recorder and what it learned (one thread at a time).
class AutoRecorder {
 public:
  explicit AutoRecorder(Engine& engine);
  ~AutoRecorder();
  AutoRecorder(const AutoRecorder&) = delete;
  AutoRecorder& operator=(const AutoRecorder&) = delete;

  /// run()'s start: this thread records through this recorder.
  void begin();
  /// run()'s end: the iteration replayed or pushed (and learned).
  void end();
  /// fn threw: the ops recorded before the throw are pushed.
  void fail();

  // GraphRecorder's calls while an iteration records.
  OpFn& begin_fn();
  void commit(const char* call, Context ctx, VarSpan reads, VarSpan writes, const OpAttrs& attrs);
  void record_operator(OperatorRecord* rec, std::uint64_t gen, Context ctx, const int* priority);
  [[noreturn]] static void refuse_group(const char* call, const OpAttrs& attrs);

  std::uint64_t replayed = 0;
  std::uint64_t pushed = 0;
  std::string mismatch;
  [[nodiscard]] std::size_t learned_size() const noexcept { return learned_ != nullptr ? learned_->nodes.size() : 0; }

 private:
  /// One recorded push.
  struct Op {
    const char* call;
    Context ctx;
    OpAttrs attrs;
    std::uint32_t access_at, access_n;      ///< its normalised list, in access_
    std::uint32_t vars_at, reads, writes;  ///< its lists as given, in vars_
    OperatorRecord* oper;                   ///< an operator's push; else a body in the set's slot
    std::uint64_t oper_gen;
    bool priority_set;  ///< the operator was pushed with a priority (attrs.priority)
    bool async;
    const void* type;  ///< the body's (OpFn::type())
  };

  Engine* engine_;
  std::optional<GraphRecorder> scope_;
  std::shared_ptr<const GraphData> learned_;
  BodyPool* pool_;
  BodySet* set_ = nullptr;
  std::vector<Op> ops_;
  std::vector<AccessSpec> access_;
  std::vector<Var> vars_;
  bool matching_ = false;

  /// Compares the op about to be op i with the learned graph's node i.
  void compare(std::size_t i, const Op& op);
  void differ(std::size_t i, const Op* op, const char* what);
  /// The ops pushed as the program would have, in order; the set's users
  /// settled whether or not a push throws.
  void push_all(BodySet* set);
  /// push_all, counted; the iteration's records cleared if it throws.
  void push_recorded(BodySet* set);
  /// The recorded ops become the learned graph (its bodies stay empty).
  void learn();
  void clear() noexcept;
};

}  // namespace ordo::detail

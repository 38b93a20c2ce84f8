// ordo/detail/graph_capture.hpp - what Engine's push calls see of a capture
// (ordo/graph.hpp): the thread's recorder, checked by one thread-local load
// at the top of each push, and the node a recorded push becomes. Internal.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ordo/context.hpp"
#include "ordo/detail/op_fn.hpp"
#include "ordo/detail/op_record.hpp"
#include "ordo/var.hpp"

namespace ordo {
class Engine;
}  // namespace ordo

namespace ordo::detail {

struct OperatorRecord;
class AutoRecorder;

/// A layer's recorded op that merges with the ones of the same key recorded
/// after it into one node (ordo::gpu: consecutive GPU ops of one device and
/// stream become one CUDA graph, gpu/graphs.cpp). The node's body owns it;
/// GraphRecorder::finish decides which nodes merge (docs/graphs.md).
struct GraphGroup {
  virtual ~GraphGroup() = default;
  /// Takes the members of `later`, a group of the same key recorded after
  /// this one's members (its node is then dropped).
  virtual void absorb(GraphGroup& later) = 0;
  /// Set by GraphRecorder::finish: the group has recorded ops after it,
  /// all of them groups (its layer orders those among themselves, on the
  /// device), and it is not among the last ops on any of its variables
  /// (nothing outside the graph waits for it through the replay). Its op
  /// may then complete before its work has finished.
  bool followed_by_groups_only = false;
};

/// One recorded push. Immutable once the capture has finished: replays of
/// one graph read it from several threads at once.
struct GraphNode {
  enum class Kind : std::uint8_t { fn, oper };
  /// The body (kind fn) while the capture records; moved to GraphData::fns
  /// when the graph is built, and never moved again.
  OpFn fn;
  Kind kind = Kind::fn;
  bool async = false;
  Context ctx{};
  OpAttrs attrs{};
  std::string name;  ///< attrs.name points here (the graph outlives its replays' ops)
  /// Normalised at capture (sorted by record, duplicates merged, read+write
  /// = write), with the generation of each handle: a replay after the
  /// variable was deleted fails as a push would.
  std::vector<AccessSpec> access;
  /// Kind oper: the pre-built operator pushed, and its handle's generation
  /// (a replay after delete_operator fails as the push would).
  OperatorRecord* oper = nullptr;
  std::uint64_t oper_gen = 0;
  /// A layer's mergeable op (commit_group): its group, owned by `fn`, and
  /// the key of the nodes it may merge with. Null for every other node.
  GraphGroup* group = nullptr;
  std::uint64_t group_key = 0;
  /// Kind fn: the body's type (OpFn::type()). A graph ordo::AutoCapture
  /// learned has no bodies of its own (each replay runs the iteration's):
  /// this is what the next iteration's bodies are compared with.
  const void* body_type = nullptr;
};

struct GraphData;

/// The capture in progress on this thread (Engine::capture, or an iteration
/// of ordo::AutoCapture::run): the push calls of its engine record through it
/// instead of pushing. Installs itself in t_recorder for its lifetime.
class GraphRecorder {
 public:
  /// Throws ordo::Error if the thread is capturing already.
  explicit GraphRecorder(Engine& engine);
  /// An iteration of ordo::AutoCapture::run: the pushes go to `sink`, which
  /// compares them with the graph it learned and keeps them for the end of
  /// the iteration (no graph is built).
  GraphRecorder(Engine& engine, AutoRecorder& sink);
  ~GraphRecorder();
  GraphRecorder(const GraphRecorder&) = delete;
  GraphRecorder& operator=(const GraphRecorder&) = delete;

  [[nodiscard]] Engine* engine() const noexcept { return engine_; }
  /// The scope the refused calls are named in: "Engine::capture" or
  /// "ordo::AutoCapture::run".
  [[nodiscard]] const char* scope() const noexcept;
  /// A new node whose body the caller emplaces, then commit_fn() (a node
  /// left uncommitted because the emplace threw is dropped by the next call).
  OpFn& begin_fn();
  /// Records the node begun last: `call` names the push for error messages.
  void commit_fn(const char* call, Context ctx, VarSpan reads, VarSpan writes, const OpAttrs& attrs);
  /// Records the node begun last as a layer's mergeable op: its body owns
  /// `group`; nodes of one `key` merge where finish() allows. The only way
  /// a GPU context is recorded (ordo::gpu::Runtime's ops).
  void commit_group(const char* call, Context ctx, VarSpan reads, VarSpan writes, const OpAttrs& attrs,
                    GraphGroup* group, std::uint64_t key);
  /// Records a push of a pre-built operator (Engine::push(Operator)).
  void record_operator(OperatorRecord* rec, std::uint64_t gen, Context ctx, const int* priority);
  /// Throws ordo::Error{Errc::invalid_argument}: `call` cannot be recorded
  /// (in the scope of this thread's recorder).
  [[noreturn]] static void refuse(const char* call);
  /// refuse() for a layer's push (detail::EngineExtension), named by its
  /// OpTraits: a coroutine's, ordo::io's or ordo::gpu's.
  [[noreturn]] static void refuse_layer_push(std::uint8_t traits);
  /// Ends the capture: resolves the edges and hands the graph over.
  std::shared_ptr<GraphData> finish();

 private:
  Engine* engine_;
  AutoRecorder* sink_ = nullptr;
  std::shared_ptr<GraphData> data_;
  std::unique_ptr<GraphNode> pending_;

  void commit(const char* call, Context ctx, VarSpan reads, VarSpan writes, const OpAttrs& attrs, GraphGroup* group,
              std::uint64_t key);
};

/// GraphRecorder::finish's work on recorded nodes (also how ordo::AutoCapture
/// learns an iteration): the groups merged, the edges resolved, the state of
/// a first replay made. `data` has its engine and nodes set.
std::shared_ptr<GraphData> build_graph(std::shared_ptr<GraphData> data);
/// The checks of a recorded push (capture's and AutoCapture's alike):
/// throws, naming `call` and the op, for what cannot be recorded.
void check_recordable(const char* call, Context ctx, const OpAttrs& attrs, bool group);
/// The same for a push of a pre-built operator.
void check_recordable_operator(const OperatorRecord* rec, std::uint64_t gen, Context ctx);

/// The recorder of the capture running on this thread, or null (nearly
/// always). constinit: read without a TLS wrapper call.
extern constinit thread_local GraphRecorder* t_recorder;

/// For the layers whose pushes a graph cannot replay (their op's body
/// belongs to one awaiter or one transfer): throws, naming `call`, when the
/// calling thread captures on `engine`.
inline void refuse_in_capture(const Engine* engine, const char* call) {
  if (const GraphRecorder* rec = t_recorder; rec != nullptr && rec->engine() == engine) [[unlikely]] {
    GraphRecorder::refuse(call);
  }
}

}  // namespace ordo::detail

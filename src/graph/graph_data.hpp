// src/graph/graph_data.hpp - a captured graph as its replays read it. Internal.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/spin_lock.hpp"
#include "ordo/detail/graph_capture.hpp"

namespace ordo::detail {

struct ErrorRecord;
struct ReplayState;
struct VarKeeper;
/// Deletes a replay's state (src/graph/replay.cpp, where it is complete).
struct ReplayStateFree {
  void operator()(ReplayState* s) const noexcept;
};

/// The state of one replay without pushes (src/graph/replay.cpp) that is
/// sized by the graph: what each recorded op still waits for, and each
/// variable as the replay sees it.
struct ReplayArrays {
  struct Held {
    /// Its last recorded ops (GraphData::Step::exits) not finished yet; the last
    /// one ends the hold.
    std::atomic<std::int32_t> left{0};
    /// The error its next access sees (a reference): the one it carried
    /// when the hold began, then each recorded write's outcome. Ordered by
    /// the graph's edges (a write follows every access before it).
    ErrorRecord* error = nullptr;
    // Neither is set when the replay took every variable (ReplayState::all_taken).
    bool at_push = false;  ///< granted inside the holders' push (read by the replaying thread only)
    bool taken = false;    ///< taken over from the graph's keeper (no holder holds it)
  };
  /// Decremented through std::atomic_ref; written whole (memcpy) before
  /// the replay's ops can run.
  std::unique_ptr<std::int32_t[]> waits;
  std::unique_ptr<Held[]> held;

  /// Sized for `ops` recorded ops on `vars` variables (and written: no page
  /// is first touched by a replay).
  static std::unique_ptr<ReplayArrays> make(std::size_t ops, std::size_t vars) {
    auto a = std::make_unique<ReplayArrays>();
    a->waits = std::make_unique<std::int32_t[]>(ops);
    a->held = std::make_unique<Held[]>(vars);
    return a;
  }
};

/// Built by one GraphRecorder, immutable from GraphRecorder::finish on
/// (but for `spare`, which has its own lock).
struct GraphData {
  GraphData() = default;
  /// Ends the accesses its keeper keeps (src/graph/replay.cpp).
  ~GraphData();
  GraphData(const GraphData&) = delete;
  GraphData& operator=(const GraphData&) = delete;

  Engine* engine = nullptr;
  /// In push order. unique_ptr: a node's body (OpFn) never moves.
  std::vector<std::unique_ptr<GraphNode>> nodes;
  std::size_t edges = 0;
  /// Each variable the graph touches once, with the generation its handle
  /// had (a replay checks these, not every access of every op), and the
  /// first recorded op that touches it (for the message). In address
  /// order (a replay locks them in that order).
  struct VarUse {
    AccessSpec spec;  ///< write: some recorded op writes it
    std::uint32_t first_op;
    std::uint32_t writes = 0;  ///< recorded ops that write it
    /// Its last recorded ops: the reads after its last write, or that write.
    std::uint32_t exit_ops = 0;
    /// The recorded ops whose access to it waits for no recorded op: they
    /// wait for the pushes before the replay on it (the replay's entry).
    std::vector<std::uint32_t> entry_ops;
  };
  std::vector<VarUse> vars;
  /// Per node, what a replay without pushes reads when its op ends, packed
  /// in two arrays (a graph of many small ops outgrows the caches, and a
  /// vector per node costs a miss per vector per op). The node's run in
  /// `flat` holds, from `at`: its accesses' indexes in `vars` (access order,
  /// kWrite set for a write), the variables it is among the last ops on
  /// (kSoleExit set where it is the only one), then its successors (kOneEdge
  /// set where this is the successor's only edge in, kOneWait where it is
  /// all the successor waits for: its count need not be decremented).
  struct Step {
    std::uint32_t at = 0;
    std::uint32_t succ = 0;
    std::uint16_t vars = 0;
    std::uint16_t exits = 0;
    std::uint8_t flags = 0;   ///< kAlwaysRun, kErrorToAwaiter, kOper, kAsync
    std::uint16_t shape = 0;  ///< its property and context: shapes[shape]
  };
  static constexpr std::uint32_t kWrite = 1u << 31;
  static constexpr std::uint32_t kSoleExit = 1u << 31;
  static constexpr std::uint32_t kIndex = kWrite - 1;
  static constexpr std::uint32_t kOneEdge = 1u << 31;
  static constexpr std::uint32_t kOneWait = 1u << 30;
  static constexpr std::uint32_t kNodeIndex = kOneWait - 1;
  static constexpr std::uint8_t kAlwaysRun = 1;
  static constexpr std::uint8_t kErrorToAwaiter = 2;
  static constexpr std::uint8_t kOper = 4;
  static constexpr std::uint8_t kAsync = 8;
  std::vector<Step> steps;
  std::vector<std::uint32_t> flat;
  /// The distinct (property, context) pairs of the nodes (Step::shape).
  struct Shape {
    FnProperty prop = FnProperty::normal;
    Context ctx{};
  };
  std::vector<Shape> shapes;
  /// Per node, its body (empty for an operator node, which runs its
  /// operator's, and in a graph ordo::AutoCapture learned) and its name,
  /// taken out of the nodes when the graph is built: a replay reads them
  /// with the steps, as streams in push order, and never touches a node on
  /// its way (a node is hundreds of bytes, a miss per op once the graph
  /// outgrows the caches). mutable: a replay calls the bodies.
  mutable std::vector<OpFn> fns;
  std::vector<const char*> names;
  /// Per node: what it waits for in a replay: its edges in, and its entries.
  std::vector<std::uint32_t> waits;
  /// Per node: its edges in only (what it waits for once every variable is
  /// granted).
  std::vector<std::uint32_t> edges_in;
  /// Nodes that wait for nothing (no variables): ready when the replay starts.
  std::vector<std::uint32_t> free_ops;
  /// Nodes that wait only for entries: ready once their variables are granted.
  std::vector<std::uint32_t> roots;
  /// Nodes without successors.
  std::size_t sinks = 0;
  /// Variables whose hold several recorded ops end (VarUse::exit_ops > 1):
  /// the only ones a replay counts down (ReplayArrays::Held::left).
  std::vector<std::uint32_t> counted_exits;
  /// Nodes that push a pre-built operator.
  std::vector<std::uint32_t> oper_ops;
  /// vars' specs, in the same order: what a replay's holders push.
  std::vector<AccessSpec> specs;
  /// Its variables' accesses kept between replays (VarKeeper; made at
  /// capture, indexed as `vars`).
  std::unique_ptr<VarKeeper> keeper;
  /// Whether the last replay took every access over from the keeper, or,
  /// before the first, whether the capture kept every one (a hint for the
  /// next replay's plan; replays may race on it).
  mutable std::atomic<bool> took_all{false};
  /// The states of finished replays, arrays included, for the next ones
  /// (the first made at capture): no allocation per replay once warm.
  mutable SpinLock spare_lock;
  mutable std::vector<std::unique_ptr<ReplayState, ReplayStateFree>> spare;
};

/// Puts the state of a first replay in g.spare (at capture).
void make_spare_replay(const GraphData& g);

/// A replay's bodies when they are not the graph's own (ordo::AutoCapture:
/// the iteration's), indexed as the graph's nodes (an operator node runs
/// its operator's). Released once, when the replay's last op is done.
struct ReplayBodies {
  OpFn* const* fns = nullptr;
  virtual void release() noexcept = 0;

 protected:
  ~ReplayBodies() = default;
};

/// Replays `graph` with `bodies`, not awaited, as Engine::replay does
/// (src/graph/replay.cpp). False where it pushed nothing and left `bodies`
/// to the caller: the engine replays by pushing the recorded ops one by one
/// (a profiler or a fence gate on), or the replay could not start (a
/// variable or operator deleted meanwhile, no memory): the caller then
/// pushes the ops itself, which fails as it should.
bool start_replay_bodies(Engine& engine, const std::shared_ptr<const GraphData>& graph, ReplayBodies* bodies);

}  // namespace ordo::detail

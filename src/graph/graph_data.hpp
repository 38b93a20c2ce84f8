// src/graph/graph_data.hpp - a captured graph as its replays read it. Internal.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "ordo/detail/graph_capture.hpp"

namespace ordo::detail {

struct ErrorRecord;

/// The state of one replay without pushes (src/graph/replay.cpp) that is
/// sized by the graph: what each recorded op still waits for, and each
/// variable as the replay sees it. A graph keeps those of finished replays
/// for its next ones (GraphData::spare): no allocation per replay once warm.
struct ReplayArrays {
  struct Held {
    /// Its last recorded ops (GraphData::exits) not finished yet; the last
    /// one ends the hold.
    std::atomic<std::int32_t> left{0};
    /// The error its next access sees (a reference): the one it carried
    /// when the hold began, then each recorded write's outcome. Ordered by
    /// the graph's edges (a write follows every access before it).
    ErrorRecord* error = nullptr;
    bool at_push = false;  ///< granted inside the holders' push (read by the replaying thread only)
  };
  std::unique_ptr<std::atomic<std::int32_t>[]> waits;
  std::unique_ptr<Held[]> held;
};

/// Built by one GraphRecorder, immutable from GraphRecorder::finish on
/// (but for `spare`, which has its own lock).
struct GraphData {
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
  /// Per node: the index in `vars` of each of its accesses, in access order.
  std::vector<std::vector<std::uint32_t>> var_index;
  /// Per node: what it waits for in a replay: its edges in, and its entries.
  std::vector<std::uint32_t> waits;
  /// Nodes that wait for nothing (no variables): ready when the replay starts.
  std::vector<std::uint32_t> free_ops;
  /// Per node: the variables (in `vars`) it is among the last ops on.
  std::vector<std::vector<std::uint32_t>> exits;
  /// Nodes without successors.
  std::size_t sinks = 0;
  /// Nodes that push a pre-built operator.
  std::vector<std::uint32_t> oper_ops;
  /// vars' specs, in the same order: what a replay's holders push.
  std::vector<AccessSpec> specs;
  /// Arrays of finished replays, for the next ones.
  mutable std::mutex spare_mutex;
  mutable std::vector<std::unique_ptr<ReplayArrays>> spare;
};

}  // namespace ordo::detail

// src/graph/graph_data.hpp - a captured graph as its replays read it. Internal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ordo/detail/graph_capture.hpp"

namespace ordo::detail {

/// Built by one GraphRecorder, immutable from GraphRecorder::finish on.
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
};

}  // namespace ordo::detail

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
  /// first recorded op that touches it (for the message).
  struct VarUse {
    AccessSpec spec;
    std::uint32_t first_op;
  };
  std::vector<VarUse> vars;
};

}  // namespace ordo::detail

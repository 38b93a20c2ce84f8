// src/graph/graph_data.hpp - a captured graph as its replays read it. Internal.
#pragma once

#include <cstddef>
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
};

}  // namespace ordo::detail

// bench/peers/tbb_peer.cpp - the oneTBB flow-graph peer: the trace turned
// into a DAG up front (what a dependency engine derives while it runs: an op
// depends on the last writer of each variable it reads, and on the readers
// since that write, or else the last writer, of each variable it writes),
// one continue_node per op, then executed by putting a message into every
// root and waiting for the graph.
//
// Figures: tbb-flow times the execution only (the graph is pre-built, as in
// the peer figures usually quoted); tbb-flow+build (--time-build) times
// construction + execution. Both report the construction time as well.
#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/info.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "peer_main.hpp"

namespace ordo_bench::peer {

namespace flow = oneapi::tbb::flow;
using Node = flow::continue_node<flow::continue_msg>;

namespace {
// Caps the threads that run nodes, the waiting main thread included (it runs
// nodes in wait_for_all), for the whole process.
std::optional<oneapi::tbb::global_control> g_workers;
}  // namespace

unsigned init(const Args& args) {
  if (args.workers == 0) return static_cast<unsigned>(oneapi::tbb::info::default_concurrency());
  g_workers.emplace(oneapi::tbb::global_control::max_allowed_parallelism, args.workers);
  return static_cast<unsigned>(
      oneapi::tbb::global_control::active_value(oneapi::tbb::global_control::max_allowed_parallelism));
}

namespace {

/// Builds one node per op and the edges of the trace's dependencies; the
/// ops without predecessors go to `roots`.
void build(flow::graph& g, const Trace& t, std::uint64_t* slots, std::vector<std::unique_ptr<Node>>& nodes,
           std::vector<std::uint32_t>& roots) {
  constexpr std::uint32_t kNone = 0xFFFF'FFFF;
  const auto n = static_cast<std::uint32_t>(t.ops());
  std::vector<std::uint32_t> last_writer(t.num_vars, kNone);
  std::vector<std::vector<std::uint32_t>> readers(t.num_vars);  // since the last write
  nodes.reserve(n);
  const Trace* trace = &t;
  std::vector<std::uint32_t> preds;
  auto add_pred = [&](std::uint32_t p) {
    for (const std::uint32_t q : preds) {
      if (q == p) return;
    }
    preds.push_back(p);
  };
  for (std::uint32_t i = 0; i < n; ++i) {
    nodes.push_back(std::make_unique<Node>(g, [trace, slots, i](const flow::continue_msg&) {
      run_op(*trace, slots, i);
    }));
    preds.clear();
    for (const std::uint32_t v : t.reads(i)) {
      if (last_writer[v] != kNone) add_pred(last_writer[v]);
    }
    for (const std::uint32_t v : t.writes(i)) {
      if (!readers[v].empty()) {
        for (const std::uint32_t r : readers[v]) add_pred(r);  // each of them follows the last writer
      } else if (last_writer[v] != kNone) {
        add_pred(last_writer[v]);
      }
    }
    for (const std::uint32_t p : preds) flow::make_edge(*nodes[p], *nodes[i]);
    if (preds.empty()) roots.push_back(i);
    for (const std::uint32_t v : t.reads(i)) readers[v].push_back(i);
    for (const std::uint32_t v : t.writes(i)) {
      last_writer[v] = i;
      readers[v].clear();
    }
  }
}

}  // namespace

Run run(const Trace& t, std::uint64_t* slots, const Args& args) {
  using Clock = std::chrono::steady_clock;
  flow::graph g;
  std::vector<std::unique_ptr<Node>> nodes;
  std::vector<std::uint32_t> roots;
  const auto t0 = Clock::now();
  build(g, t, slots, nodes, roots);
  auto t1 = Clock::now();
  if (args.warm) {
    // The first execution, untimed; the slots as they were before it.
    const std::vector<std::uint64_t> initial(slots, slots + t.num_vars);
    for (const std::uint32_t r : roots) nodes[r]->try_put(flow::continue_msg());
    g.wait_for_all();
    std::copy(initial.begin(), initial.end(), slots);
    t1 = Clock::now();
  }
  for (const std::uint32_t r : roots) nodes[r]->try_put(flow::continue_msg());
  g.wait_for_all();
  const auto t2 = Clock::now();
  const double build_s = std::chrono::duration<double>(t1 - t0).count();
  const double exec_s = std::chrono::duration<double>(t2 - t1).count();
  return {args.time_build ? build_s + exec_s : exec_s, build_s};
}

void shutdown() { g_workers.reset(); }

}  // namespace ordo_bench::peer

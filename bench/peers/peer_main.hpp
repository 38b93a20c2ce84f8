// bench/peers/peer_main.hpp - what every peer executable shares: argument
// parsing, the trace (workload.hpp, same generator and seeds as ordo's
// runs), verification against the serial digest, and the answer line.
//
// A peer is one executable per runtime (OpenMP, oneTBB flow graph, StarPU),
// run by ordo_workloads in a child process:
//
//   ordo_peer_X --workload W4 --ops N --runs R --spin S [--workers N] [--reference D] [--label L] [--time-build | --warm]
//               [--progress i/n --t0 SECONDS [--of k/n]]
//
// It prints one serialize()d Measurement (measurement.hpp) on stdout. Each
// peer source defines the three functions below; peer_main.cpp has main().
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "measurement.hpp"
#include "workload.hpp"

namespace ordo_bench::peer {

struct Args {
  std::string workload;
  std::size_t ops = 0;
  int runs = 1;
  std::uint32_t spin_iters = 0;  ///< busy_work iterations in every op body (0: none)
  unsigned workers = 0;          ///< threads that run op bodies (0: the runtime's default, one per usable CPU)
  std::optional<std::uint64_t> reference;
  std::string label;
  bool time_build = false;  ///< tbb-flow+build: graph construction inside the timed region
  bool warm = false;        ///< tbb-flow-warm: the graph executed once untimed (the slots reset), then timed
  std::string progress;     ///< "figure/figures" of ordo_workloads' status line, if it shows one
  double t0 = -1;           ///< ordo_workloads' start, seconds of the steady clock
  std::string of;           ///< "k/n": this process does run k of n (interleaved runs), for the status line
};

/// One replay of a trace.
struct Run {
  double seconds = 0;          ///< the timed region (submission to the final wait returning)
  double untimed_seconds = 0;  ///< work done outside it (tbb-flow: building the graph)
};

/// Starts the runtime once per process (not timed), with args.workers
/// threads running op bodies when it is not 0. Returns that thread count.
unsigned init(const Args& args);
/// Replays trace `t` on `slots` (one per variable, already initialised).
Run run(const Trace& t, std::uint64_t* slots, const Args& args);
/// Stops the runtime (not timed).
void shutdown();

}  // namespace ordo_bench::peer

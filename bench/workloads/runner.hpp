// bench/workloads/runner.hpp - the engines under test: the serial loop and
// the ordo configurations (replayed here), and the peers (separate
// executables in bench/peers/, run by figure.cpp in a child process).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ordo/options.hpp>

#include "measurement.hpp"
#include "workload.hpp"

namespace ordo_bench {

/// A peer: another dependency runtime, built as its own executable next to
/// ordo_workloads (bench/peers/) when its package is installed. The child
/// process execs `executable --workload W --ops N ... args` and reads one
/// serialize()d Measurement from its stdout (bench/peers/peer_main.hpp).
struct PeerSpec {
  std::string executable;          ///< file name, looked up next to ordo_workloads
  std::vector<std::string> args;   ///< extra arguments (a variant: --build-timed)
  std::string package;             ///< Debian package(s) it needs, for the skip message
};

/// One engine configuration under test.
struct EngineSpec {
  std::string name;                    ///< as printed: serial, ordo, ordo-1w, omp-gomp, ...
  std::optional<ordo::Options> ordo;   ///< ordo engines only
  std::string description;
  std::optional<PeerSpec> peer{};      ///< peers only (neither: the serial loop)
  bool inline_ok = false;              ///< ordo: every op pushed with OpAttrs::inline_ok
  /// ordo: the trace's pushes captured once into an ordo::Graph (untimed),
  /// then replayed (timed: the replay and its wait)
  bool graph = false;
  /// ordo, graph: replayed once untimed first (the variables reset after):
  /// the timed replay is a loop's second, as tbb-flow-warm's execution
  bool warm = false;
};

/// Every engine the driver knows, in report order (serial, ordo, peers).
[[nodiscard]] const std::vector<EngineSpec>& all_engines();
[[nodiscard]] const EngineSpec* find_engine(std::string_view name);

/// Full path of a peer's executable (next to this program), or "" when it
/// was not built (its package was missing at configure time).
[[nodiscard]] std::string peer_executable(const PeerSpec& peer);

/// Called before each run (run is 1-based) so the caller can show progress.
using RunHook = std::function<void(int run, int runs)>;

/// Replays `trace` `runs` times on `engine`, each run on a fresh engine.
/// `reference` is the serial digest to check against (none: the runs are
/// only checked against each other).
[[nodiscard]] Measurement measure(const EngineSpec& engine, const Trace& trace, int runs,
                                  std::optional<std::uint64_t> reference, const RunHook& before_run);

}  // namespace ordo_bench

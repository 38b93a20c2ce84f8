// bench/workloads/measurement.hpp - what one (engine, workload) figure
// measured, and the one-line form in which a child process (a forked
// ordo_workloads or a peer executable) hands it to the parent.
//
// No ordo header here: the peer executables (bench/peers/) share this file,
// and one of them is built by clang++ against LLVM's OpenMP runtime.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ordo_bench {

/// What one (engine, workload) measurement produced.
struct Measurement {
  std::size_t ops = 0;
  std::vector<double> seconds;   ///< one per run: first push (submission) to the final wait returning
  std::uint64_t digest = 0;      ///< digest of the final slots (the first run's)
  bool ok = false;               ///< every run's digest equals the reference (serial: each other)
  std::string error;             ///< why not ok, or a crash/timeout seen by the parent
  double new_variable_ns = 0;    ///< median cost of Engine::new_variable (ordo engines)
  unsigned workers = 0;          ///< worker threads of the engine (0: serial / inline)
  /// Peers whose figure is only part of the work (tbb-flow: graph execution):
  /// median seconds of the part not timed (graph construction), 0 otherwise.
  double untimed_seconds = 0;
  /// The serial loop on a workload with busy work (W6) only: one per run, the
  /// seconds of the same busy work split evenly over one plain thread per
  /// core, with no dependencies and no engine. serial / split is the speedup
  /// this machine gives the work at that moment: no engine can beat it.
  std::vector<double> split_seconds;
};

/// One line of key=value fields, ending in '\n'.
[[nodiscard]] std::string serialize(const Measurement& m);
/// Parses serialize()'s line; false if it is not one (or was cut short).
[[nodiscard]] bool deserialize(const std::string& line, Measurement& m);

[[nodiscard]] double median(std::vector<double> v);

}  // namespace ordo_bench

// bench/workloads/runner.hpp - replaying a trace on the serial loop or on an
// ordo engine, and timing it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ordo/options.hpp>

#include "workload.hpp"

namespace ordo_bench {

/// One engine configuration under test.
struct EngineSpec {
  std::string name;                    ///< as printed: serial, ordo, ordo-1w, ...
  std::optional<ordo::Options> ordo;   ///< empty for the serial loop
  std::string description;
};

/// Every engine the driver knows, in report order (serial first).
[[nodiscard]] const std::vector<EngineSpec>& all_engines();
[[nodiscard]] const EngineSpec* find_engine(std::string_view name);

/// What one (engine, workload) measurement produced.
struct Measurement {
  std::size_t ops = 0;
  std::vector<double> seconds;   ///< one per run: first push to wait_for_all() returning
  std::uint64_t digest = 0;      ///< digest of the final slots (the first run's)
  bool ok = false;               ///< every run's digest equals the reference (serial: each other)
  std::string error;             ///< why not ok, or a crash/timeout seen by the parent
  double new_variable_ns = 0;    ///< median cost of Engine::new_variable (ordo engines)
  unsigned workers = 0;          ///< CPU workers of the engine (0: serial)
};

/// Called before each run (run is 1-based) so the caller can show progress.
using RunHook = std::function<void(int run, int runs)>;

/// Replays `trace` `runs` times on `engine`, each run on a fresh engine.
/// `reference` is the serial digest to check against (none: the runs are
/// only checked against each other).
[[nodiscard]] Measurement measure(const EngineSpec& engine, const Trace& trace, int runs,
                                  std::optional<std::uint64_t> reference, const RunHook& before_run);

}  // namespace ordo_bench

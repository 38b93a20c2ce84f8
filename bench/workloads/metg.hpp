// bench/workloads/metg.hpp - METG, Task Bench's measure of a runtime: the
// smallest busy work per op at which a run still reaches 50% of the ideal
// parallel efficiency (Slaughter et al., "Task Bench", SC'20).
//
// A sweep replays one dependency pattern (W1, W4, W5, ...) with busy work of
// g microseconds in every op body, for g on a log grid. At each point
//
//   efficiency = ops * g / (workers * wall seconds)
//
// where g is the calibrated time of the same spin that W6 uses, so 1.0 means
// every worker ran op bodies all the time and the engine cost nothing. The
// METG is where the curve crosses 0.5, interpolated in log space between the
// two sweep points around it. Each point is verified against a serial replay
// of the same trace, as every other figure is.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "figure.hpp"
#include "runner.hpp"

namespace ordo_bench {

struct MetgConfig {
  std::vector<std::string> patterns;         ///< workload ids whose traces are swept
  std::vector<const EngineSpec*> engines;    ///< serial excluded (it is the reference)
  double lo_us = 0.1;                        ///< smallest busy work per op swept
  double hi_us = 1000;                       ///< largest
  int per_decade = 2;                        ///< sweep points per factor of 10
  double work_s = 0;                         ///< serial busy seconds per point (0: 0.2 s per worker)
  std::size_t max_ops = 100'000;             ///< ops at the smallest grains, where work_s would need more
  unsigned workers = 0;                      ///< threads running op bodies, on every engine
  int runs = 3;                              ///< per engine and point (up to 5x at capped points); the median counts
  double timeout_s = 300;
  double wait_quiet_s = 0;                   ///< as ordo_workloads --wait-quiet, for every measurement
  std::optional<std::string> svg_path;       ///< where to write the efficiency curves
};

/// One measured sweep point.
struct MetgPoint {
  double us = 0;          ///< busy work per op, calibrated
  double efficiency = 0;
  std::size_t ops = 0;
  double wall_s = 0;      ///< median over the runs
  bool ok = false;        ///< verified against the serial replay
  double other_load = 0;  ///< cores other processes kept busy meanwhile
  std::size_t runs = 0;
};

/// One efficiency curve: an engine on a pattern.
struct MetgCurve {
  std::string engine;
  std::string pattern;
  std::vector<MetgPoint> points;  ///< ascending busy work
};

/// Where `c` first reaches 50%: the busy work in microseconds, interpolated
/// in log space; below_range (reached at the smallest point swept) or
/// above_range (never reached) when there is nothing to interpolate.
struct MetgValue {
  double us = 0;
  bool below_range = false;
  bool above_range = false;
};
[[nodiscard]] MetgValue metg_of(const MetgCurve& c);

/// Runs the sweep, prints METG_POINT and METG lines on stdout, writes the
/// SVG if asked. Returns the exit status (0 ok, 3 a point did not verify).
[[nodiscard]] int run_metg(const MetgConfig& cfg, Progress& progress);

/// The efficiency-versus-busy-work plot: log x axis, one polyline per curve,
/// the 50% line, a legend. `caption` goes under the title.
void write_metg_svg(const std::string& path, const std::vector<MetgCurve>& curves, const MetgConfig& cfg,
                    const std::string& caption);

}  // namespace ordo_bench

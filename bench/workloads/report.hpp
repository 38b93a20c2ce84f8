// bench/workloads/report.hpp - RESULT lines and the Markdown report.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runner.hpp"

namespace ordo_bench {

/// One (engine, workload) figure: a RESULT line and a table row.
struct Figure {
  std::string engine{};
  std::string workload{};
  Measurement m{};
  std::optional<double> peak_rss_mib{};  ///< absent when measured in-process (--no-fork)
  /// CPU time that other processes used while the figure ran, over its wall
  /// time: how many cores the rest of the machine kept busy (absent with --no-fork).
  std::optional<double> other_load{};
  int attempts = 1;  ///< measurements made; the quietest is kept (--wait-quiet re-measures disturbed figures)
};

/// ops/s over the runs of a figure.
struct Stats {
  double median = 0;
  double min = 0;
  double max = 0;
};
[[nodiscard]] Stats ops_per_second(const Measurement& m);

/// How the whole benchmark was run (for the report's header).
struct RunInfo {
  std::string command;
  std::string started;          ///< local date and time
  int runs = 0;
  std::size_t ops = 0;
  std::size_t w6_ops = 0;
  double work_us = 0;
  std::uint32_t spin_iters = 0;
  bool forked = true;
  bool interleaved = false;     ///< run k of every engine, then run k+1 (each run in its own child)
  std::size_t max_in_flight = 0;  ///< Options::max_in_flight of every ordo engine
  bool max_in_flight_given = false;  ///< set by --max-in-flight (else the default)
  std::string load_before;      ///< /proc/loadavg when the benchmark started
  std::string load_after;
  double total_seconds = 0;
  std::vector<std::string> skipped_peers;  ///< "name (package not installed)"
  /// Instructions per op from bench/callgrind_per_op.sh (--callgrind-file),
  /// keyed by (workload, engine); and the op count those profiles ran.
  std::map<std::pair<std::string, std::string>, double> instr_per_op;
  std::string instr_ops;  ///< "100000 ops (ordo), 20000 ops (peers)": the profiled runs' sizes
  std::string instr_source;  ///< the file they came from
};

/// Reads the table printed by bench/callgrind_per_op.sh into info.instr_per_op.
void read_callgrind_file(const std::string& path, RunInfo& info);

/// The RESULT line of `f`; `serial` is the serial figure of the same workload, if any.
[[nodiscard]] std::string result_line(const Figure& f, const Figure* serial, const RunInfo& info);

/// The git revision of the measured sources, and which engine files differ from it.
[[nodiscard]] std::string source_revision();
/// The CPU's model name (/proc/cpuinfo).
[[nodiscard]] std::string cpu_model();

/// The first line of /proc/loadavg (three load averages), or "?".
[[nodiscard]] std::string load_average();

/// Writes the Markdown report. Everything from the notes marker on in an
/// existing file at `path` (hand-written analysis) is kept.
void write_docs(const std::string& path, const std::vector<Figure>& figures, const RunInfo& info);

}  // namespace ordo_bench

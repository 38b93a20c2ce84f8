// bench/io/io_bench.hpp - what the ordo_io_bench workloads share: the run
// settings, figures (median and spread of runs), RESULT lines and progress.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "ordo/io.hpp"

namespace iobench {

using Clock = std::chrono::steady_clock;

struct Config {
  unsigned runs = 5;                          ///< runs per figure (median, min-max)
  unsigned direct_runs = 0;                   ///< runs per O_DIRECT random-read figure (0: 2 x runs)
  double seconds = 1.0;                       ///< length of one timed run
  std::string dir;                            ///< where the random-read file lives
  std::size_t file_bytes = std::size_t{1} << 30;
  std::vector<unsigned> depths{1, 32, 128};   ///< random-read queue depths
  std::vector<bool> direct{false, true};      ///< random-read modes: buffered (false), O_DIRECT (true)
  std::vector<unsigned> conns{1, 64, 1024};   ///< echo connection counts
  std::size_t cpu_ops = 100'000;              ///< worker-never-blocked: CPU ops per run
  unsigned slow_reads = 1000;                 ///< worker-never-blocked: outstanding pipe reads
  unsigned late_ms = 200;                     ///< worker-never-blocked: the pipe writers answer after this
  bool quick = false;
  bool progress = false;                      ///< stdout is a terminal: show progress on stderr
  bool verbose = false;                       ///< progress as timestamped lines, terminal or not
  std::vector<ordo::io::Backend> backends;    ///< the ordo::io backends to measure
};

/// The runs of one figure.
struct Figure {
  std::vector<double> runs;
  [[nodiscard]] double median() const;
  [[nodiscard]] double min() const;
  [[nodiscard]] double max() const;
};

/// Run r of `fig` over run r of `base` (the same round, seconds apart): the
/// per-run ratios whose median and spread the tables report (0 where base is).
Figure paired_ratios(const Figure& fig, const Figure& base);

/// One line of a result table (and one RESULT line).
struct Row {
  std::string workload;  ///< e.g. randread-buffered-qd32
  std::string engine;    ///< e.g. fio, ordo-coro-uring, asio
  std::string unit;      ///< IOPS, ops/s, msgs/s
  Figure fig;
  bool ok = true;        ///< every run finished and its checks passed
  std::string extra;     ///< more key=value pairs for the RESULT line
};

const char* backend_name(ordo::io::Backend b);

/// Prints `RESULT engine=... workload=... unit=... median=... min=... max=... runs=... <extra> ok=0|1`.
void print_result(const Row& row);

/// A progress line on stderr, only when stdout is a terminal.
void progress(const Config& cfg, const std::string& what);

/// The run length for the text: "1", "0.2".
std::string seconds_text(const Config& cfg);

/// "123k" / "1.23M": short figures for the tables.
std::string human(double v);

/// Raises RLIMIT_NOFILE's soft limit to the hard one; returns the new soft limit.
unsigned long raise_fd_limit();

// The workloads. Each returns its rows (printed as RESULT lines as they come)
// and appends its Markdown section to `md`.
std::vector<Row> run_randread(const Config& cfg, std::string& md);
std::vector<Row> run_blocked(const Config& cfg, std::string& md);
std::vector<Row> run_echo(const Config& cfg, std::string& md);

}  // namespace iobench

// bench/workloads/figure.hpp - measuring one (engine, workload) figure, in
// this process or in a forked child (whose peak RSS wait4() reports), and
// watching how busy the rest of the (possibly shared) machine is meanwhile.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "report.hpp"
#include "runner.hpp"
#include "workload.hpp"

namespace ordo_bench {

/// One overwritten status line on stderr, only when stderr is a terminal.
/// A forked child inherits it and updates the same line.
class Progress {
 public:
  using Clock = std::chrono::steady_clock;

  Progress() : enabled_(isatty(STDERR_FILENO) == 1), start_(Clock::now()) {}
  void set_total(int total) { total_ = total; }
  void next_figure() { ++index_; }
  void show(const std::string& what) const {
    if (!enabled_) return;
    std::fprintf(stderr, "\r\033[K[%d/%d, %.1f s] %s", index_, total_, elapsed_s(), what.c_str());
    std::fflush(stderr);
  }
  void clear() const {
    if (!enabled_) return;
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
  }
  [[nodiscard]] double elapsed_s() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  [[nodiscard]] bool enabled() const { return enabled_; }
  /// "index/total" and the start as seconds of the (system-wide) steady
  /// clock: a peer executable shows its runs in the same status line.
  [[nodiscard]] std::string position() const { return std::to_string(index_) + "/" + std::to_string(total_); }
  [[nodiscard]] double start_s() const { return std::chrono::duration<double>(start_.time_since_epoch()).count(); }

 private:
  bool enabled_;
  Clock::time_point start_;
  int index_ = 0;
  int total_ = 0;
};

/// What to measure.
struct Job {
  EngineSpec engine;
  std::string workload;
  std::size_t ops;
  std::uint32_t spin_iters;
  int runs;
  std::optional<std::uint64_t> reference;
  int round = 0;   ///< interleaved runs: this child does run `round` of `rounds` (for the status line)
  int rounds = 0;
};

/// Measures `job` in this process, on `trace` if given, else on a trace
/// generated here. Exceptions become Measurement::error.
[[nodiscard]] Measurement measure_here(const Job& job, const Progress& progress, const Trace* trace = nullptr);

/// Measures `job` in a forked child that generates the trace and does every
/// run; fills peak_rss_mib and other_load. Gives up after `timeout_s`.
[[nodiscard]] Figure measure_in_child(const Job& job, const Progress& progress, double timeout_s);

/// Cores the rest of the machine may keep busy for a figure to count as quiet.
inline constexpr double kQuietLoad = 0.25;

/// Waits, at most `max_s` seconds, until the rest of the machine used less
/// than kQuietLoad cores over a one-second window.
void wait_until_quiet(double max_s, const Progress& progress, const std::string& label);

}  // namespace ordo_bench

// ordo/options.hpp - how an engine is configured.
#pragma once

#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <system_error>

namespace ordo {

/// Which running policy an engine uses. Dependency tracking is the same for all.
enum class EngineKind {
  naive,       ///< every op runs inline on the thread that made it ready, in push order: debugging
  pooled,      ///< one shared CPU pool for all compute + one I/O pool for copies
  per_device,  ///< default: CPU pool, CPU-priority pool, per-GPU compute and copy workers
};

[[nodiscard]] std::string_view to_string(EngineKind k) noexcept;

/// The CPUs the calling thread may run on: its affinity mask, which taskset,
/// cpusets and container CPU sets restrict (std::thread::hardware_concurrency
/// counts every CPU of the machine), or hardware_concurrency where the mask
/// cannot be read; at least 1. Options::cpu_workers = 0 means this many.
/// A CPU time quota (cgroup cpu.max) is not a CPU set and is not counted.
[[nodiscard]] unsigned usable_cpus() noexcept;

/// An error that no wait ever rethrew, reported when the engine is destroyed
/// (or an async op that never completed before shutdown_timeout).
struct ErrorReport {
  std::string op_name{};   ///< name of the op that failed ("" if unnamed)
  std::string message{};   ///< what() of the exception, or a description
  /// Errc::shutdown_abandoned (category "ordo", <ordo/error_code.hpp>) for
  /// ops abandoned at shutdown; the code of an ordo::Error an op threw, or
  /// of a std::system_error; empty (0) for any other exception.
  std::error_code code{};

  /// The report of `error`, thrown by op `op_name`: its what() ("unknown
  /// exception" if it is no std::exception) and its code as above.
  [[nodiscard]] static ErrorReport from(std::string op_name, const std::exception_ptr& error);
};

/// The profiler (ordo/profiler.hpp, docs/profiler.md). Off by default.
struct ProfileOptions {
  bool enabled = false;  ///< record every op; read it through Engine::profiler()
  /// Memory bound: events kept at most (32 bytes each; an op takes 3, 4 if
  /// async, plus one per variable and one per dependency that made it wait).
  /// Rounded up to whole 1024-event chunks. When it
  /// is reached, later events are dropped and counted (dropped_events() in
  /// the summary, the trace and ProfileData): the profile keeps the start of
  /// the run. clear() frees the memory and starts again.
  std::size_t max_events = std::size_t{1} << 20;
  /// When not empty, the engine's destructor writes the Chrome trace here
  /// (after draining); a failure is reported on stderr (the destructor never throws).
  std::string trace_path{};
  /// Where ORDO_PROFILE=1 (through Options::from_env) writes the trace when
  /// the options given to from_env name none: the working directory.
  static constexpr std::string_view kDefaultTracePath = "ordo-trace.json";
};

/// Engine configuration. Every field has a sensible default; `Options{}` gives
/// the per-device engine with one CPU worker per core.
struct Options {
  EngineKind kind = EngineKind::per_device;
  unsigned cpu_workers = 0;            ///< 0: one per CPU the creating thread may use (usable_cpus())
  unsigned cpu_priority_workers = 1;   ///< per_device: workers of the priority pool
  unsigned io_workers = 1;             ///< pooled: workers of the I/O (copy) pool
  unsigned gpu_compute_workers = 2;    ///< per_device: compute workers per GPU device
  unsigned gpu_copy_workers = 1;       ///< per_device: workers per copy direction per GPU device
  /// Backpressure: when > 0, at most about this many ops are in flight (not
  /// counting async ops whose body has started: they wait on something
  /// outside the engine, such as I/O or a coroutine holding a lease): a
  /// pushing thread blocks until half of them have finished, so a pusher far
  /// ahead of the workers keeps memory flat (an op record is 256 bytes). It
  /// only waits: a held pusher never runs an op. It never blocks when that
  /// could deadlock: pushes from inside an op or from a worker are not held
  /// back, and a held pusher goes on as soon as every worker is idle, or for
  /// one more bound's worth of ops each time no op has finished for 10 ms
  /// (the ops in flight then wait on something outside the engine, perhaps
  /// on this very thread). 0: unbounded.
  std::size_t max_in_flight = 4096;
  /// How long the destructor waits for async ops whose completion never comes
  /// before it reports them and abandons them (zero: wait forever).
  std::chrono::milliseconds shutdown_timeout{std::chrono::seconds(60)};
  /// Called (from the destroying thread) for every error that no wait
  /// rethrew. Default: print one line per error to stderr.
  std::function<void(const ErrorReport&)> on_unobserved_error{};
  /// The profiler: off unless profile.enabled.
  ProfileOptions profile{};

  /// Returns `base` with those of these environment variables that are set
  /// applied over it (docs/guide.md, "Environment variables"):
  /// ORDO_ENGINE (naive|pooled|per_device), ORDO_CPU_WORKERS,
  /// ORDO_CPU_PRIORITY_WORKERS, ORDO_IO_WORKERS, ORDO_MAX_IN_FLIGHT,
  /// ORDO_PROFILE (1/true/on/yes, any case: on, and the trace is written to
  /// base's trace_path or else ProfileOptions::kDefaultTracePath;
  /// 0/false/off/no: off; anything else: on, and the path of the trace),
  /// ORDO_PROFILE_MAX_EVENTS.
  /// A malformed value throws ordo::Error{Errc::invalid_argument} naming the
  /// variable and the value.
  /// Engines never read the environment themselves: `Engine(Options{})` is
  /// the same whatever is set; a program opts in by calling this.
  [[nodiscard]] static Options from_env(Options base);
  [[nodiscard]] static Options from_env();
};

}  // namespace ordo

// src/options/options.cpp - Options::from_env (the engine's only reader of the
// environment; the parsing is src/env.cpp's) and usable_cpus.
#include <sched.h>

#include <algorithm>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "ordo/detail/env.hpp"
#include "ordo/error_code.hpp"
#include "ordo/options.hpp"

namespace ordo {

ErrorReport ErrorReport::from(std::string op_name, const std::exception_ptr& error) {
  ErrorReport r{std::move(op_name), "unknown exception", {}};
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    r.message = e.what();
    r.code = error_code_of(e);
  } catch (const std::system_error& e) {
    r.message = e.what();
    r.code = e.code();
  } catch (const std::exception& e) {
    r.message = e.what();
  } catch (...) {
  }
  return r;
}

std::string_view to_string(EngineKind k) noexcept {
  switch (k) {
    case EngineKind::naive:
      return "naive";
    case EngineKind::pooled:
      return "pooled";
    case EngineKind::per_device:
      return "per_device";
  }
  return "unknown";
}

unsigned usable_cpus() noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return static_cast<unsigned>(n);
  }
  // A mask wider than cpu_set_t (over 1024 CPUs) or none readable.
  return std::max(1U, std::thread::hardware_concurrency());
}

Options Options::from_env() { return from_env(Options{}); }

// Each variable is applied over `base` only when it is set; parsing (and the
// error naming the variable) is detail::env_*'s, shared with IoOptions.
Options Options::from_env(Options base) {
  if (const auto kind = detail::env_value("ORDO_ENGINE")) {
    if (*kind == "naive") {
      base.kind = EngineKind::naive;
    } else if (*kind == "pooled") {
      base.kind = EngineKind::pooled;
    } else if (*kind == "per_device" || *kind == "per-device") {
      base.kind = EngineKind::per_device;
    } else {
      detail::bad_env("ORDO_ENGINE", *kind, "an engine kind", "naive, pooled or per_device");
    }
  }
  detail::env_integer("ORDO_CPU_WORKERS", base.cpu_workers);
  detail::env_integer("ORDO_CPU_PRIORITY_WORKERS", base.cpu_priority_workers);
  detail::env_integer("ORDO_IO_WORKERS", base.io_workers);
  detail::env_integer("ORDO_MAX_IN_FLIGHT", base.max_in_flight);
  if (const auto profile = detail::env_value("ORDO_PROFILE")) {
    // A boolean spelling switches profiling; anything else is a trace path
    // (a file literally named "on" is spelled "./on"). "On" must leave a
    // trace somewhere: the variable is for programs that do not read the
    // profiler themselves.
    if (profile->empty()) {
      detail::bad_env("ORDO_PROFILE", *profile, "a switch or a path",
                      "1/0, true/false, on/off, yes/no or the path of the trace file");
    }
    if (const std::optional<bool> on = detail::parse_bool(*profile)) {
      base.profile.enabled = *on;
      if (*on && base.profile.trace_path.empty()) base.profile.trace_path = std::string(ProfileOptions::kDefaultTracePath);
    } else {
      base.profile.enabled = true;
      base.profile.trace_path = std::string(*profile);
    }
    // Under mpirun every rank reads the same variable: one file per rank,
    // "trace.json" -> "trace.rank3.json" (scripts/merge_traces.py joins them).
    if (base.profile.enabled && !base.profile.trace_path.empty()) {
      for (const char* rank_var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
        const auto rank = detail::env_value(rank_var);
        if (!rank || rank->empty()) continue;
        std::string& path = base.profile.trace_path;
        const std::size_t slash = path.rfind('/');
        const std::size_t dot = path.rfind('.');
        const std::size_t at = dot != std::string::npos && (slash == std::string::npos || dot > slash) ? dot : path.size();
        path.insert(at, ".rank" + std::string(*rank));
        break;
      }
    }
  }
  detail::env_integer("ORDO_PROFILE_MAX_EVENTS", base.profile.max_events);
  return base;
}

}  // namespace ordo

// src/options.cpp - Options::from_env, the one place that reads the environment.
#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string>
#include <thread>

#include "ordo/error.hpp"
#include "ordo/options.hpp"

namespace ordo {

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

namespace {

template <class T>
void read_number(const char* name, T& out) {
  const char* value = std::getenv(name);
  if (value == nullptr) return;
  const std::string_view text(value);
  T parsed{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), parsed);
  if (ec != std::errc{} || end != text.data() + text.size()) {
    throw Error(Errc::invalid_argument,
                std::string(name) + "='" + value + "' is not a non-negative integer");
  }
  out = parsed;
}

}  // namespace

Options Options::from_env() { return from_env(Options{}); }

Options Options::from_env(Options base) {
  if (const char* kind = std::getenv("ORDO_ENGINE"); kind != nullptr) {
    const std::string_view k(kind);
    if (k == "naive") {
      base.kind = EngineKind::naive;
    } else if (k == "pooled") {
      base.kind = EngineKind::pooled;
    } else if (k == "per_device" || k == "per-device") {
      base.kind = EngineKind::per_device;
    } else {
      throw Error(Errc::invalid_argument,
                  "ORDO_ENGINE='" + std::string(k) + "' is not one of naive, pooled, per_device");
    }
  }
  read_number("ORDO_CPU_WORKERS", base.cpu_workers);
  read_number("ORDO_CPU_PRIORITY_WORKERS", base.cpu_priority_workers);
  read_number("ORDO_IO_WORKERS", base.io_workers);
  read_number("ORDO_MAX_IN_FLIGHT", base.max_in_flight);
  if (const char* profile = std::getenv("ORDO_PROFILE"); profile != nullptr) {
    const std::string_view p(profile);
    if (p.empty()) {
      throw Error(Errc::invalid_argument, "ORDO_PROFILE is empty: give 0, 1 or the path of a trace file");
    }
    if (p == "0" || p == "off") {
      base.profile.enabled = false;
    } else if (p == "1" || p == "on") {
      base.profile.enabled = true;
    } else {
      base.profile.enabled = true;
      base.profile.trace_path = std::string(p);
    }
  }
  read_number("ORDO_PROFILE_MAX_EVENTS", base.profile.max_events);
  return base;
}

}  // namespace ordo

// tests/dist/dist_test_util.hpp - helpers of the ordo::dist tests, which run
// under mpirun (tests/CMakeLists.txt: 2 and 4 ranks) and are the same
// program on every rank.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "ordo/dist.hpp"
#include "ordo/ordo.hpp"

namespace ordo::dist::test {

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr int kScale = 4;
#else
inline constexpr int kScale = 1;
#endif

/// An engine sized for several ranks sharing a few cores: one CPU worker
/// unless ORDO_CPU_WORKERS says otherwise (Options::from_env).
inline ordo::Options engine_options(ordo::EngineKind kind = ordo::EngineKind::per_device) {
  ordo::Options o;
  o.kind = kind;
  o.cpu_workers = 1;
  o.cpu_priority_workers = 1;
  return ordo::Options::from_env(o);
}

/// Sum of `x` over the ranks.
inline std::uint64_t sum_over_ranks(Dist& d, std::uint64_t x) {
  std::uint64_t v[1] = {x};
  d.allreduce_sum(v);
  return v[0];
}

/// Waits, without sleeping, until `ready()` holds or `limit` passes.
inline bool spin_until(const std::function<bool()>& ready, std::chrono::seconds limit = std::chrono::seconds(60)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!ready()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::yield();
  }
  return true;
}

// The differential tests' hash, as bench/workloads/workload.hpp's.
constexpr std::uint64_t fmix(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
constexpr std::uint64_t mix(std::uint64_t a, std::uint64_t b) noexcept { return fmix(a * 0x9e3779b97f4a7c15ULL + b); }

}  // namespace ordo::dist::test

// tests/core/test_util.hpp - helpers shared by the core tests.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ordo/ordo.hpp"

namespace ordo::test {

/// Sanitizer builds run smaller sizes where a test is about volume, not logic.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr int kScale = 4;
#else
inline constexpr int kScale = 1;
#endif

/// A gate threads wait on until the test opens it. Waits are bounded (a
/// broken engine fails the test instead of hanging it); nothing sleeps.
class Gate {
 public:
  void open() {
    std::lock_guard lock(m_);
    open_ = true;
    cv_.notify_all();
  }
  /// Returns false if not opened within `limit`.
  bool wait(std::chrono::seconds limit = std::chrono::seconds(60)) {
    std::unique_lock lock(m_);
    return cv_.wait_for(lock, limit, [this] { return open_; });
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool open_ = false;
};

/// Counts arrivals; wait_for(n) blocks until n have arrived (bounded).
class Counter {
 public:
  void arrive() {
    std::lock_guard lock(m_);
    ++n_;
    cv_.notify_all();
  }
  bool wait_for(int n, std::chrono::seconds limit = std::chrono::seconds(60)) {
    std::unique_lock lock(m_);
    return cv_.wait_for(lock, limit, [&] { return n_ >= n; });
  }
  int value() {
    std::lock_guard lock(m_);
    return n_;
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int n_ = 0;
};

/// Seed for a randomized test: ORDO_TEST_SEED if set, else fresh; always printed.
inline std::uint64_t test_seed(const char* what) {
  std::uint64_t seed = 0;
  if (const char* s = std::getenv("ORDO_TEST_SEED"); s != nullptr) {
    seed = std::strtoull(s, nullptr, 10);
  } else {
    seed = (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  }
  std::cout << "[ seed     ] " << what << " seed=" << seed << " (rerun with ORDO_TEST_SEED=" << seed << ")\n";
  ::testing::Test::RecordProperty(std::string("seed_") + what, std::to_string(seed));
  return seed;
}

struct EngineConfig {
  std::string label;
  Options options;
};

inline void PrintTo(const EngineConfig& c, std::ostream* os) { *os << c.label; }

/// Every engine and worker count the differential tests cover.
inline std::vector<EngineConfig> all_engine_configs() {
  std::vector<EngineConfig> out;
  out.push_back({"naive", Options{.kind = EngineKind::naive}});
  for (unsigned w : {1U, 2U, 4U}) {
    out.push_back({"pooled/" + std::to_string(w), Options{.kind = EngineKind::pooled, .cpu_workers = w}});
    out.push_back({"per_device/" + std::to_string(w),
                   Options{.kind = EngineKind::per_device, .cpu_workers = w, .cpu_priority_workers = 1}});
  }
  return out;
}

/// gtest parameter name of an EngineConfig ("per_device/2" -> "per_device_2").
inline std::string config_name(const ::testing::TestParamInfo<EngineConfig>& info) {
  std::string s = info.param.label;
  for (char& ch : s) {
    if (ch == '/') ch = '_';
  }
  return s;
}

/// splitmix64 step: a cheap non-commutative mixer for order-sensitive checks.
inline std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a * 0x9E3779B97F4A7C15ULL + b + 0x632BE59BD9B4E019ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace ordo::test

// tests/gpu/gpu_test_util.hpp - helpers shared by the gpu layer's tests.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ordo/engine.hpp"
#include "ordo/gpu.hpp"

namespace ordo::test {

inline std::uint64_t seed_from_env(std::uint64_t fallback) {
  if (const char* s = std::getenv("ORDO_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return fallback;
}

inline Options engine_options(EngineKind kind) {
  Options o;
  o.kind = kind;
  o.cpu_workers = 2;
  o.gpu_compute_workers = 2;
  o.shutdown_timeout = std::chrono::seconds(30);
  return o;
}

/// The name of the gpu::GpuError that `f` throws; "" and a test failure
/// saying `why` if it throws none.
template <class F>
std::string gpu_error_name(F&& f, const char* why) {
  try {
    std::forward<F>(f)();
  } catch (const gpu::GpuError& e) {
    return e.name();
  }
  ADD_FAILURE() << why;
  return {};
}

/// The engine kind's name, for test names and printed seeds.
inline const char* kind_name(EngineKind k) { return to_string(k).data(); }

/// An engine and a simulated-backend runtime over it (destroyed runtime first).
struct SimRig {
  explicit SimRig(EngineKind kind = EngineKind::per_device, gpu::SimOptions sim = {}, gpu::RuntimeOptions ro = {})
      : engine(engine_options(kind)), rt(engine, gpu::make_sim_backend(sim), ro) {}
  ~SimRig() {
    try {
      engine.wait_for_all();
    } catch (...) {
    }
  }
  Engine engine;
  gpu::Runtime rt;
};

inline void sleep_us(long us) { std::this_thread::sleep_for(std::chrono::microseconds(us)); }

}  // namespace ordo::test

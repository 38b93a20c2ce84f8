// tests/io/io_test_util.hpp - the io backends a parameterized io test runs on.
#pragma once

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "ordo/io.hpp"

namespace ordo::io {

/// io_uring where it was built, and the thread backend always.
inline std::vector<Backend> backends() {
  std::vector<Backend> out;
#if defined(ORDO_IO_HAVE_URING)
  out.push_back(Backend::uring);
#endif
  out.push_back(Backend::threads);
  return out;
}

/// Waits (bounded) until `pred` holds; false if it never did. For counts a
/// reactor updates after it has delivered (Reactor::in_flight drops once the
/// completion's callback, which may resume the waiting test, has returned).
template <class P>
bool eventually(P pred, std::chrono::seconds limit = std::chrono::seconds(30)) {
  for (const auto end = std::chrono::steady_clock::now() + limit; !pred();) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::yield();
  }
  return true;
}

inline std::string backend_name(const ::testing::TestParamInfo<Backend>& info) {
  return info.param == Backend::threads ? "threads" : "uring";
}

}  // namespace ordo::io

// tests/io/io_test_util.hpp - the io backends a parameterized io test runs on.
#pragma once

#include <string>
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

inline std::string backend_name(const ::testing::TestParamInfo<Backend>& info) {
  return info.param == Backend::threads ? "threads" : "uring";
}

}  // namespace ordo::io

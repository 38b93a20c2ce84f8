// src/profiler/critical_path.hpp - the chain of work that bounded a profiled
// run (ordo::CriticalPath), shared by the summary and the DOT graph. Internal.
#pragma once

#include "ordo/profiler.hpp"

namespace ordo::detail {

/// The critical path of `d` (empty when nothing finished).
[[nodiscard]] CriticalPath critical_path(const ProfileData& d);

}  // namespace ordo::detail

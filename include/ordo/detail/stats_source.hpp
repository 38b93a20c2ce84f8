// ordo/detail/stats_source.hpp - how a layer (ordo::io's reactors, the
// buffer pools) adds its counters to Engine::stats(). Internal; not for user code.
#pragma once

#include "ordo/stats.hpp"

namespace ordo::detail {

/// Registered with EngineExtension::add_stats_source for as long as it
/// lives; the engine calls add_to() from Engine::stats(), under a lock that
/// remove_stats_source() takes too, so a source is never called once it is
/// removed. add_to() must not call into the engine's stats or sources.
class StatsSource {
 public:
  virtual void add_to(EngineStats& stats) const noexcept = 0;

 protected:
  ~StatsSource() = default;
};

}  // namespace ordo::detail

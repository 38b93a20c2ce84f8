// src/core/engine_kinds.hpp - the engine kinds (MXNet's naive, pooled and
// per-device engines) as small policies: which worker pools exist and which
// one runs a queued op. Dependency tracking and placement
// (EngineCore::place) are the same for every kind. Internal.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "ordo/options.hpp"
#include "worker_pool.hpp"

namespace ordo::detail {

class EngineCore;

/// GPU device ids a context may name (checked at push).
inline constexpr int kMaxDevices = 64;

/// An engine kind. route() is asked for every queued op; the rest at
/// construction, at waits and at shutdown.
///
/// @par Thread safety
/// route() from any thread; pools created on first use are published with
/// release and never removed before stop_and_join().
class EngineKindPolicy {
 public:
  virtual ~EngineKindPolicy() = default;
  EngineKindPolicy(const EngineKindPolicy&) = delete;
  EngineKindPolicy& operator=(const EngineKindPolicy&) = delete;

  /// The kind `options.kind` names, its pools started.
  static std::unique_ptr<EngineKindPolicy> make(EngineCore& core, const Options& options);

  /// The pool that runs an op of this context and property once place() has queued it.
  virtual WorkerPool* route(Context ctx, FnProperty prop) = 0;
  /// Every op runs on the thread that makes it ready (naive).
  [[nodiscard]] bool serial() const noexcept { return serial_; }
  /// The pool whose workers run normal CPU ops (null: naive).
  [[nodiscard]] WorkerPool* cpu() const noexcept { return cpu_; }
  /// The pools started so far (Engine::stats()).
  [[nodiscard]] std::vector<const WorkerPool*> pools() const;
  /// No op queued and every worker asleep, in every pool (a hint).
  [[nodiscard]] bool idle() const;
  /// Stops and joins every pool; called once the engine is drained.
  void stop_and_join();

 protected:
  explicit EngineKindPolicy(bool serial) noexcept : serial_(serial) {}
  /// Starts a pool owned by this policy.
  WorkerPool& start(EngineCore& core, std::string name, unsigned threads, WorkerPool::Order order);
  WorkerPool* cpu_ = nullptr;

 private:
  const bool serial_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<WorkerPool>> pools_;  ///< guarded by mutex_
};

}  // namespace ordo::detail

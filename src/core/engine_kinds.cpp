// src/core/engine_kinds.cpp - naive, pooled and per-device: their pools and routes.
#include "engine_kinds.hpp"

#include "engine_core.hpp"

#include <string>

#include "ordo/error.hpp"

namespace ordo::detail {

namespace {

/// Every op on the thread that makes it ready; one helper thread, started
/// on first use, for what those threads may not run (posts, and work that a
/// completion thread makes ready).
class NaiveKind final : public EngineKindPolicy {
 public:
  explicit NaiveKind(EngineCore& core) : EngineKindPolicy(true), core_(core) {}
  WorkerPool* route(Context, FnProperty) override {
    WorkerPool* h = helper_.load(std::memory_order_acquire);
    if (h != nullptr) return h;
    const std::lock_guard lock(helper_mutex_);
    h = helper_.load(std::memory_order_relaxed);
    if (h == nullptr) {
      h = &start(core_, "naive.helper", 1, WorkerPool::Order::fifo);
      helper_.store(h, std::memory_order_release);
    }
    return h;
  }

 private:
  EngineCore& core_;
  std::mutex helper_mutex_;
  std::atomic<WorkerPool*> helper_{nullptr};
};

/// One CPU pool for all compute, one I/O pool for copies.
class PooledKind final : public EngineKindPolicy {
 public:
  PooledKind(EngineCore& core, const Options& o) : EngineKindPolicy(false) {
    cpu_ = &start(core, "cpu", o.cpu_workers, WorkerPool::Order::fifo);
    if (o.io_workers > 0) io_ = &start(core, "io", o.io_workers, WorkerPool::Order::fifo);
  }
  WorkerPool* route(Context, FnProperty prop) override {
    const bool copy = prop == FnProperty::copy_to_device || prop == FnProperty::copy_from_device;
    return copy && io_ != nullptr ? io_ : cpu_;
  }

 private:
  WorkerPool* io_ = nullptr;
};

/// A CPU pool, a CPU priority pool, and per GPU device a compute pool and a
/// copy pool for each direction (created on the device's first op).
class PerDeviceKind final : public EngineKindPolicy {
 public:
  PerDeviceKind(EngineCore& core, const Options& o) : EngineKindPolicy(false), core_(core), opts_(o) {
    if (o.gpu_compute_workers == 0 || o.gpu_copy_workers == 0) {
      throw Error(Errc::invalid_argument, "Options: gpu_compute_workers and gpu_copy_workers must be at least 1");
    }
    cpu_ = &start(core, "cpu", o.cpu_workers, WorkerPool::Order::fifo);
    if (o.cpu_priority_workers > 0) {
      priority_ = &start(core, "cpu_priority", o.cpu_priority_workers, WorkerPool::Order::priority);
    }
  }
  WorkerPool* route(Context ctx, FnProperty prop) override {
    if (ctx.is_gpu()) {
      const Device& d = device(ctx.device_id);
      if (prop == FnProperty::copy_to_device) return d.copy_in;
      if (prop == FnProperty::copy_from_device) return d.copy_out;
      return d.compute;
    }
    if (prop == FnProperty::cpu_prioritized && priority_ != nullptr) return priority_;
    return cpu_;
  }

 private:
  struct Device {
    WorkerPool* compute;
    WorkerPool* copy_in;
    WorkerPool* copy_out;
  };
  const Device& device(int id) {
    // The push checked 0 <= id < kMaxDevices (EngineCore::submit).
    const Device* d = devices_[static_cast<std::size_t>(id)].load(std::memory_order_acquire);
    if (d != nullptr) return *d;
    const std::lock_guard lock(device_mutex_);
    d = devices_[static_cast<std::size_t>(id)].load(std::memory_order_relaxed);
    if (d == nullptr) {
      const std::string prefix = "gpu" + std::to_string(id);
      auto made = std::make_unique<Device>(Device{
          &start(core_, prefix + ".compute", opts_.gpu_compute_workers, WorkerPool::Order::fifo),
          &start(core_, prefix + ".copy_in", opts_.gpu_copy_workers, WorkerPool::Order::fifo),
          &start(core_, prefix + ".copy_out", opts_.gpu_copy_workers, WorkerPool::Order::fifo)});
      d = made.get();
      device_storage_.push_back(std::move(made));
      devices_[static_cast<std::size_t>(id)].store(d, std::memory_order_release);
    }
    return *d;
  }

  EngineCore& core_;
  Options opts_;
  WorkerPool* priority_ = nullptr;
  std::mutex device_mutex_;
  /// Published with release once its pools are started.
  std::array<std::atomic<const Device*>, kMaxDevices> devices_{};
  std::vector<std::unique_ptr<Device>> device_storage_;  ///< guarded by device_mutex_
};

}  // namespace

std::unique_ptr<EngineKindPolicy> EngineKindPolicy::make(EngineCore& core, const Options& options) {
  switch (options.kind) {
    case EngineKind::naive:
      return std::make_unique<NaiveKind>(core);
    case EngineKind::pooled:
      return std::make_unique<PooledKind>(core, options);
    case EngineKind::per_device:
      break;
  }
  return std::make_unique<PerDeviceKind>(core, options);
}

WorkerPool& EngineKindPolicy::start(EngineCore& core, std::string name, unsigned threads, WorkerPool::Order order) {
  auto pool = std::make_unique<WorkerPool>(core, &core, std::move(name), threads, order);
  WorkerPool& p = *pool;
  const std::lock_guard lock(mutex_);
  pools_.push_back(std::move(pool));
  return p;
}

std::vector<const WorkerPool*> EngineKindPolicy::pools() const {
  const std::lock_guard lock(mutex_);
  std::vector<const WorkerPool*> out;
  for (const auto& p : pools_) out.push_back(p.get());
  return out;
}

bool EngineKindPolicy::idle() const {
  const std::lock_guard lock(mutex_);
  for (const auto& p : pools_) {
    if (!p->idle()) return false;
  }
  return true;
}

void EngineKindPolicy::stop_and_join() {
  // Pools are only ever added: stop what exists, as the engine is drained.
  std::vector<WorkerPool*> pools;
  {
    const std::lock_guard lock(mutex_);
    for (const auto& p : pools_) pools.push_back(p.get());
  }
  for (WorkerPool* p : pools) p->stop_and_join();
}

}  // namespace ordo::detail

// gpu/runtime.cpp - ordo::gpu::Runtime's life: streams per logical device,
// the watcher thread and the fence gate are set up here, and torn down in an
// order that first drains all device work. The rest: see gpu/runtime_impl.hpp.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "runtime_impl.hpp"

namespace ordo::gpu {

Runtime::Runtime(Engine& engine, std::unique_ptr<Backend> backend, RuntimeOptions options)
    : engine_(engine), impl_(std::make_unique<Impl>(*this, engine, std::move(backend), options)) {
  Impl& m = *impl_;
  if (!m.backend) throw Error(Errc::invalid_argument, "ordo::gpu::Runtime: null backend");
  m.physical = m.backend->device_count();
  m.logical = m.physical == 0 ? 0 : (options.devices > 0 ? options.devices : m.physical);
  unsigned n = options.compute_streams != 0 ? options.compute_streams : engine.options().gpu_compute_workers;
  n = std::clamp(n, 1U, 16U);
  m.free_events.assign(static_cast<std::size_t>(m.physical), nullptr);
  m.devices.resize(static_cast<std::size_t>(m.logical));
  try {
    for (int d = 0; d < m.logical; ++d) {
      const int phys = d % m.physical;
      auto make = [&](const std::string& what) {
        StreamState st;
        st.handle = m.backend->create_stream(phys);
        st.logical = d;
        st.phys = phys;
        if (m.prof != nullptr) {
          st.trace = std::make_unique<StreamTrace>();
          st.trace->track = "gpu" + std::to_string(d) + " " + what;
          st.trace->work = what.starts_with("copy") ? "copy" : "kernel";
        }
        return st;
      };
      Impl::DeviceStreams& ds = m.devices[static_cast<std::size_t>(d)];
      for (unsigned i = 0; i < n; ++i) ds.compute.push_back(make("compute " + std::to_string(i)));
      ds.h2d = make("copy h2d");
      ds.d2h = make("copy d2h");
    }
  } catch (...) {
    for (auto& ds : m.devices) {
      for (auto& s : ds.compute) m.backend->destroy_stream(s.handle);
      if (ds.h2d.handle != nullptr) m.backend->destroy_stream(ds.h2d.handle);
      if (ds.d2h.handle != nullptr) m.backend->destroy_stream(ds.d2h.handle);
    }
    throw;
  }
  m.links->backend = m.backend.get();
  m.watcher = std::thread([&m] { m.watcher_main(); });
  engine.set_fence_gate(&m);
}

Runtime::~Runtime() {
  Impl& m = *impl_;
  // Device work nobody waited for: wait, and report failures no consumer
  // was given, as the engine reports its unobserved errors.
  try {
    m.wait_idle();
  } catch (...) {
    // out of memory for the events: destroy_stream below still waits
  }
  for (std::exception_ptr e = m.take_error(); e; e = m.take_error()) {
    const ErrorReport r = ErrorReport::from("ordo::gpu device work", e);
    try {
      if (const auto& report = engine_.options().on_unobserved_error) {
        report(r);
      } else {
        std::fprintf(stderr, "ordo: unobserved error from %s: %s\n", r.op_name.c_str(), r.message.c_str());
      }
    } catch (...) {
      // the destructor never throws
    }
  }
  for (auto& ds : m.devices) {
    for (auto& s : ds.compute) m.backend->destroy_stream(s.handle);  // waits for its work
    m.backend->destroy_stream(ds.h2d.handle);
    m.backend->destroy_stream(ds.d2h.handle);
  }
  m.close_graphs();  // no launch is left: their streams have drained
  {
    std::unique_lock lock(m.watch_mutex);
    m.drained_cv.wait(lock, [&] { return m.pending == 0; });
    m.stop = true;
  }
  m.watch_cv.notify_all();
  m.watcher.join();
  engine_.set_fence_gate(nullptr);
  {
    std::lock_guard lock(m.fence_mutex);
    while (!m.fenced.empty()) {
      FenceSlot* slot = *m.fenced.begin();
      m.drop(slot, Impl::fence_of(slot));
    }
  }
  for (auto& e : m.all_events) m.backend->destroy_event(e->handle);
  for (auto& [dev, p] : m.all_mem) {
    if (dev < 0) {
      m.backend->free_pinned(p);
    } else {
      m.backend->free_device(dev, p);
    }
  }
}

Backend& Runtime::backend() const noexcept { return *impl_->backend; }
const RuntimeOptions& Runtime::options() const noexcept { return impl_->opts; }
int Runtime::device_count() const noexcept { return impl_->logical; }
std::string Runtime::unavailable_reason() const {
  return impl_->logical > 0 ? std::string() : impl_->backend->unavailable_reason();
}

RuntimeStats Runtime::stats() const noexcept {
  const Impl& m = *impl_;
  return RuntimeStats{m.n_ops.load(std::memory_order_relaxed), m.n_waits.load(std::memory_order_relaxed),
                      m.n_events.load(std::memory_order_relaxed), m.n_held.load(std::memory_order_relaxed)};
}

void Runtime::synchronize() {
  Impl& m = *impl_;
  m.wait_idle();
  if (std::exception_ptr e = m.take_error()) std::rethrow_exception(e);
}

// ------------------------------------------------------------------ streams

void Runtime::Impl::check_device(Context ctx) const {
  if (!ctx.is_gpu()) {
    throw Error(Errc::invalid_argument, "ordo::gpu: a GPU op needs a GPU context (Context::gpu(n))");
  }
  if (logical == 0) {
    throw GpuError(100, "cudaErrorNoDevice",
                   "no GPU for Context::gpu(" + std::to_string(ctx.device_id) + "): backend '" + backend->name() +
                       "' has no device (" + backend->unavailable_reason() + ")");
  }
  if (ctx.device_id >= logical) {
    throw GpuError(101, "cudaErrorInvalidDevice",
                   "Context::gpu(" + std::to_string(ctx.device_id) + "): the runtime has " +
                       std::to_string(logical) + " logical device(s)");
  }
}

}  // namespace ordo::gpu

// tests/gpu/launch_error_test.cpp - the runtime's handling of launch errors,
// on the simulated backend wrapped by a test backend: a body's failed launch
// (Backend::after_body throws, as cudaGetLastError reports on CUDA) fails its
// op and the op's consumers, not the next op on the thread, and
// `co_await gpu::on` rethrows it; before_body makes the op's physical device
// current. The CUDA form is in cuda_kernel_test.cpp (needs a device).
#include <atomic>
#include <vector>

#include "gpu/gpu_test_util.hpp"
#include "ordo/coro.hpp"
#include "ordo/task.hpp"

namespace ordo::test {
namespace {

using gpu::Stream;

thread_local bool t_launch_failed = false;  ///< set by a body: "my launch was refused"
thread_local int t_current_device = -1;     ///< what before_body made current

/// The simulated backend plus CUDA's per-thread launch error state.
class LaunchErrorBackend final : public gpu::Backend {
 public:
  LaunchErrorBackend() : sim_(gpu::make_sim_backend({.devices = 2})) {}
  const char* name() const noexcept override { return "launch-error"; }
  int device_count() const noexcept override { return sim_->device_count(); }
  std::string unavailable_reason() const override { return sim_->unavailable_reason(); }
  void before_body(int device) override {
    t_current_device = device;
    t_launch_failed = false;
  }
  void after_body() override {
    if (std::exchange(t_launch_failed, false)) throw gpu::GpuError(9, "simErrorInvalidConfiguration", "launch");
  }
  gpu::StreamHandle create_stream(int device) override { return sim_->create_stream(device); }
  void destroy_stream(gpu::StreamHandle s) noexcept override { sim_->destroy_stream(s); }
  gpu::EventHandle create_event(int device, bool blocking, bool timed) override {
    return sim_->create_event(device, blocking, timed);
  }
  void destroy_event(gpu::EventHandle e) noexcept override { sim_->destroy_event(e); }
  void record(gpu::EventHandle e, gpu::StreamHandle s) override { sim_->record(e, s); }
  void wait(gpu::StreamHandle s, gpu::EventHandle e) override { sim_->wait(s, e); }
  bool query(gpu::EventHandle e) override { return sim_->query(e); }
  void synchronize(gpu::EventHandle e) override { sim_->synchronize(e); }
  void synchronize_stream(gpu::StreamHandle s) override { sim_->synchronize_stream(s); }
  std::chrono::steady_clock::time_point completed_at(int device, gpu::EventHandle e) override {
    return sim_->completed_at(device, e);
  }
  void host_task(gpu::StreamHandle s, gpu::HostFn fn) override { sim_->host_task(s, std::move(fn)); }
  void copy(void* dst, const void* src, std::size_t bytes, gpu::StreamHandle s) override {
    sim_->copy(dst, src, bytes, s);
  }
  void* alloc_device(int device, std::size_t bytes) override { return sim_->alloc_device(device, bytes); }
  void free_device(int device, void* p) noexcept override { sim_->free_device(device, p); }
  void* alloc_pinned(std::size_t bytes) override { return sim_->alloc_pinned(bytes); }
  void free_pinned(void* p) noexcept override { sim_->free_pinned(p); }

 private:
  std::unique_ptr<gpu::Backend> sim_;
};

class GpuLaunchError : public ::testing::TestWithParam<EngineKind> {};

TEST_P(GpuLaunchError, FailsItsOpAndConsumersOnly) {
  Engine engine(engine_options(GetParam()));
  gpu::Runtime rt(engine, std::make_unique<LaunchErrorBackend>(), {.devices = 2});
  Var x = engine.new_variable(), y = engine.new_variable();
  std::atomic<int> enqueued{0};
  rt.push([&](const Stream& s) {
    s.host_task([&] { enqueued.fetch_add(1); });  // work the body did enqueue still runs and is fenced
    t_launch_failed = true;
  }, Context::gpu(1), {}, {x});
  bool consumer_ran = false;
  engine.push_sync([&] { consumer_ran = true; }, Context::cpu(), {x}, {});
  EXPECT_EQ(gpu_error_name([&] { engine.wait_for_var(x); }, "a refused launch must fail its op"),
            "simErrorInvalidConfiguration");
  // The next GPU op (perhaps on the same thread) is not charged with it.
  int value = 0;
  rt.push([&](const Stream& s) { s.host_task([&] { value = 4; }); }, Context::gpu(0), {}, {y});
  engine.push_sync([&] { value += 1; }, Context::cpu(), {}, {y});  // a writer: wait_for_var waits for it
  engine.wait_for_var(y);
  EXPECT_EQ(value, 5);
  EXPECT_FALSE(consumer_ran);
  EXPECT_EQ(enqueued.load(), 1);
  try {
    engine.wait_for_all();
  } catch (const gpu::GpuError&) {
  }
}

TEST_P(GpuLaunchError, BodyRunsWithItsPhysicalDeviceCurrent) {
  Engine engine(engine_options(GetParam()));
  // Four logical devices over the two simulated ones: logical d is physical d % 2.
  gpu::Runtime rt(engine, std::make_unique<LaunchErrorBackend>(), {.devices = 4});
  std::vector<Var> vars;
  std::vector<int> seen(4, -1);
  for (int d = 0; d < 4; ++d) {
    vars.push_back(engine.new_variable());
    rt.push([&seen, d](const Stream& s) {
      seen[d] = t_current_device;
      EXPECT_EQ(s.physical_device(), d % 2);
    }, Context::gpu(d), {}, {vars.back()});
  }
  engine.wait_for_all();
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 0, 1}));
}

Task<void> launch_then_await(gpu::Runtime& rt) {
  Stream s = rt.stream(Context::gpu(0));
  t_launch_failed = true;  // a launch refused on this thread
  co_await gpu::on(s);
}

TEST(GpuLaunchErrorCoroutine, AwaitRethrowsIt) {
  Engine engine(engine_options(EngineKind::per_device));
  gpu::Runtime rt(engine, std::make_unique<LaunchErrorBackend>(), {.devices = 1});
  EXPECT_EQ(gpu_error_name([&] { sync_wait(launch_then_await(rt)); }, "co_await gpu::on after a refused launch must throw"),
            "simErrorInvalidConfiguration");
}

INSTANTIATE_TEST_SUITE_P(Engines, GpuLaunchError,
                         ::testing::Values(EngineKind::naive, EngineKind::pooled, EngineKind::per_device),
                         [](const auto& p) { return std::string(kind_name(p.param)); });

}  // namespace
}  // namespace ordo::test

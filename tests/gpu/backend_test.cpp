// tests/gpu/backend_test.cpp - the simulated stream/event backend keeps CUDA's
// semantics: FIFO streams, record/query/wait, sticky errors that travel along
// waits. The gpu layer's own tests rely on it.
#include <atomic>
#include <vector>

#include "gpu/gpu_test_util.hpp"

namespace ordo::test {
namespace {

TEST(GpuSimBackend, StreamRunsItsWorkInOrder) {
  auto b = gpu::make_sim_backend({.devices = 1, .max_delay = std::chrono::microseconds(200), .seed = 7});
  void* s = b->create_stream(0);
  std::vector<int> seen;
  for (int i = 0; i < 50; ++i) b->host_task(s, [&seen, i] { seen.push_back(i); });
  b->synchronize_stream(s);
  ASSERT_EQ(seen.size(), 50U);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(seen[static_cast<std::size_t>(i)], i);
  b->destroy_stream(s);
}

TEST(GpuSimBackend, EventCompletesWhenItsStreamReachesIt) {
  auto b = gpu::make_sim_backend({.devices = 1});
  void* s = b->create_stream(0);
  void* e = b->create_event(0, false, false);
  EXPECT_TRUE(b->query(e)) << "an event never recorded is complete (as CUDA)";
  std::atomic<bool> gate{false};
  b->host_task(s, [&] {
    while (!gate.load()) std::this_thread::yield();
  });
  b->record(e, s);
  EXPECT_FALSE(b->query(e));
  gate = true;
  b->synchronize(e);
  EXPECT_TRUE(b->query(e));
  b->destroy_event(e);
  b->destroy_stream(s);
}

TEST(GpuSimBackend, WaitOrdersAcrossStreams) {
  auto b = gpu::make_sim_backend({.devices = 2});
  void* a = b->create_stream(0);
  void* c = b->create_stream(1);
  void* e = b->create_event(0, false, false);
  std::atomic<int> value{0};
  int seen = -1;
  b->host_task(a, [&] {
    sleep_us(20000);
    value = 42;
  });
  b->record(e, a);
  b->wait(c, e);
  b->host_task(c, [&] { seen = value.load(); });
  b->synchronize_stream(c);
  EXPECT_EQ(seen, 42);
  b->destroy_event(e);
  b->destroy_stream(a);
  b->destroy_stream(c);
}

// Regression: the runtime returns an event to its pool once no fence refers
// to it, possibly before its record completed; a wait enqueued earlier must
// still wait for *that* record, not for the event's next (faster) one.
TEST(GpuSimBackend, WaitRefersToTheRecordCurrentWhenEnqueued) {
  auto b = gpu::make_sim_backend({.devices = 1});
  void* slow = b->create_stream(0);
  void* fast = b->create_stream(0);
  void* waiter = b->create_stream(0);
  void* e = b->create_event(0, false, false);
  std::atomic<bool> slow_done{false};
  bool seen = false;
  b->host_task(slow, [&] {
    sleep_us(30000);
    slow_done = true;
  });
  b->record(e, slow);
  b->wait(waiter, e);
  b->record(e, fast);  // completes at once
  b->host_task(waiter, [&] { seen = slow_done.load(); });
  b->synchronize_stream(waiter);
  EXPECT_TRUE(seen);
  b->synchronize_stream(slow);
  b->destroy_event(e);
  for (void* s : {slow, fast, waiter}) b->destroy_stream(s);
}

TEST(GpuSimBackend, ErrorsAreStickyAndTravelAlongWaits) {
  auto b = gpu::make_sim_backend({.devices = 1});
  void* a = b->create_stream(0);
  void* c = b->create_stream(0);
  void* ea = b->create_event(0, false, false);
  void* ec = b->create_event(0, false, false);
  bool later_ran = false;
  b->host_task(a, [] { throw gpu::GpuError(719, "simErrorLaunchFailure", "test kernel"); });
  b->host_task(a, [&] { later_ran = true; });
  b->record(ea, a);
  b->wait(c, ea);
  b->record(ec, c);
  try {
    b->synchronize(ec);
    FAIL() << "the failure should reach the waiting stream's event";
  } catch (const gpu::GpuError& e) {
    EXPECT_EQ(e.name(), "simErrorLaunchFailure");
  }
  EXPECT_THROW((void)b->query(ea), gpu::GpuError);
  EXPECT_FALSE(later_ran) << "work after a failure on the same stream is not run";
  b->destroy_event(ea);
  b->destroy_event(ec);
  b->destroy_stream(a);
  b->destroy_stream(c);
}

TEST(GpuSimBackend, BadDeviceIsANamedError) {
  auto b = gpu::make_sim_backend({.devices = 1});
  try {
    (void)b->create_stream(3);
    FAIL();
  } catch (const gpu::GpuError& e) {
    EXPECT_EQ(e.name(), "simErrorInvalidDevice");
  }
}

}  // namespace
}  // namespace ordo::test

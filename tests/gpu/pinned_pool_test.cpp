// tests/gpu/pinned_pool_test.cpp - an ordo::BufferPool of pinned memory
// (gpu::Runtime::pinned_allocator): a staging buffer written by device work
// goes back to the pool only once that work has finished (its fence holds
// the release op), however early the GPU op completed for the engine.
#include <atomic>
#include <cstring>

#include "core/test_util.hpp"
#include "gpu/gpu_test_util.hpp"
#include "ordo/storage.hpp"

namespace ordo::test {
namespace {

TEST(GpuPinnedPool, StagingBufferReturnsOnlyAfterTheDeviceWorkOnIt) {
  SimRig rig(EngineKind::per_device, {.devices = 1});
  BufferPool pool(rig.engine, {.limit_bytes = 4096, .allocator = rig.rt.pinned_allocator()});
  Buffer b = pool.acquire(4096).wait();
  void* const block = b.data();
  Gate gate;
  std::atomic<bool> wrote{false};
  rig.rt.push(
      [&, p = b.data()](const gpu::Stream& s) {
        s.host_task([&, p] {
          EXPECT_TRUE(gate.wait());
          std::memset(p, 1, 4096);
          wrote = true;
        });
      },
      Context::gpu(0), {}, {b.var()}, {.prop = FnProperty::copy_from_device, .name = "d2h into staging"});
  b.release();
  EXPECT_FALSE(pool.try_acquire(1)) << "handed out while the device still writes it";
  gate.open();
  Buffer again = pool.acquire(1).wait();  // the release runs once the copy's event completes
  EXPECT_TRUE(wrote.load());
  EXPECT_EQ(again.data(), block);
  again.release();
  rig.engine.wait_for_all();
  EXPECT_EQ(pool.stats().in_use_bytes, 0U);
}

}  // namespace
}  // namespace ordo::test

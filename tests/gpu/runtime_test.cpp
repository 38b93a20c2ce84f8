// tests/gpu/runtime_test.cpp - the gpu layer on the simulated backend: GPU
// consumers order on the device (stream waits, no host round trip), CPU
// consumers see finished work, errors become op errors carrying the error
// name, memory of a deleted variable is reused only after its events.
#include <atomic>
#include <cstdio>
#include <random>
#include <vector>

#include "gpu/gpu_test_util.hpp"
#include "ordo/coro.hpp"
#include "ordo/task.hpp"

namespace ordo::test {
namespace {

using gpu::Stream;

class GpuRuntime : public ::testing::TestWithParam<EngineKind> {};

// A chain of GPU ops over 2 compute streams and both copy streams of two
// devices: each op multiplies and adds on the one buffer, after a random
// delay. Wrong without the cross-stream waits; and the only op the engine
// holds is the CPU consumer at the end.
TEST_P(GpuRuntime, ChainAcrossStreamsAndDevicesOrdersOnTheDevice) {
  SimRig rig(GetParam(), {.devices = 2, .max_delay = std::chrono::microseconds(300), .seed = 11});
  Var x = rig.engine.new_variable();
  gpu::Buffer buf = rig.rt.alloc_host(sizeof(std::uint64_t));
  auto* v = buf.as<std::uint64_t>();  // unsigned: the chain wraps around
  *v = 1;
  std::uint64_t expect = 1;
  const FnProperty props[] = {FnProperty::normal, FnProperty::copy_to_device, FnProperty::normal,
                              FnProperty::copy_from_device};
  for (int i = 0; i < 60; ++i) {
    const FnProperty prop = props[i % 4];
    const auto k = static_cast<std::uint64_t>(i);
    rig.rt.push([v, k](const Stream& s) { s.host_task([v, k] { *v = *v * 3 + k; }); }, Context::gpu(i % 2), {}, {x},
                {.prop = prop});
    expect = expect * 3 + k;
  }
  std::uint64_t seen = 0;
  rig.engine.push_sync([&] { seen = *v; }, Context::cpu(), {x}, {});
  rig.engine.wait_for_all();
  EXPECT_EQ(seen, expect);
  const gpu::RuntimeStats st = rig.rt.stats();
  EXPECT_EQ(st.gpu_ops, 60U);
  EXPECT_GT(st.stream_waits, 0U) << "consecutive ops on different streams must wait on the device";
  EXPECT_EQ(st.held_ops, 1U) << "only the CPU consumer waits on the host (ops " << st.gpu_ops << ", waits "
                             << st.stream_waits << ", events " << st.events_created << ")";
  rig.rt.free(buf);
}

TEST_P(GpuRuntime, CpuConsumerAndWaitForVarSeeFinishedWork) {
  SimRig rig(GetParam(), {.devices = 1});
  Var x = rig.engine.new_variable();
  std::atomic<int> value{0};
  rig.rt.push(
      [&](const Stream& s) {
        s.host_task([&] {
          sleep_us(30000);  // long enough that a CPU op run at enqueue would see 0
          value = 7;
        });
      },
      Context::gpu(0), {}, {x});
  int seen = -1;
  rig.engine.push_sync([&] { seen = value.load(); }, Context::cpu(), {x}, {});
  rig.engine.wait_for_var(x);
  EXPECT_EQ(value.load(), 7);
  rig.engine.wait_for_all();
  EXPECT_EQ(seen, 7);
}

// A CPU reader that finds its variable's fence already cleared runs at once,
// on a thread that never talked to the gate (another reader, pushed as the
// GPU work finished, pruned the fence): it must still see the work's writes.
// The data is plain memory, so ThreadSanitizer checks the release/acquire
// pair on the fence slot that carries them; the values are checked anywhere.
// The pusher spins a random while (printed seed) to land near the finish.
TEST_P(GpuRuntime, AReaderFindingAClearedFenceSeesTheWork) {
  const std::uint64_t seed = seed_from_env(std::random_device{}());
  std::printf("[cleared fence] engine=%s seed=%llu\n", kind_name(GetParam()), static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  SimRig rig(GetParam(), {.devices = 1});
  Var x = rig.engine.new_variable();
  std::uint64_t data = 0;
  std::atomic<int> stale{0};
  std::atomic<std::uint64_t> sink{0};
  for (std::uint64_t i = 1; i <= 1500; ++i) {
    rig.rt.push([&data, i](const Stream& s) { s.host_task([&data, i] { data = i; }); }, Context::gpu(0), {}, {x});
    const auto check = [&data, &stale, i] {
      if (data != i) stale.fetch_add(1);
    };
    rig.engine.push_sync(check, Context::cpu(), {x}, {});  // queued behind the writer
    std::uint64_t spin = rng() % 20000, acc = 0;
    while (spin-- > 0) acc += spin;
    sink.fetch_add(acc, std::memory_order_relaxed);
    rig.engine.push_sync(check, Context::cpu(), {x}, {});  // may find the writer done and prune its fence
  }
  rig.engine.wait_for_all();
  EXPECT_EQ(stale.load(), 0);
}

// A CPU writer after a GPU reader waits for the read to finish (write after read).
TEST_P(GpuRuntime, CpuWriterWaitsForGpuReaders) {
  SimRig rig(GetParam(), {.devices = 1});
  Var x = rig.engine.new_variable();
  Var y = rig.engine.new_variable();
  std::atomic<int> xv{5};
  std::atomic<int> yv{0};
  rig.rt.push(
      [&](const Stream& s) {
        s.host_task([&] {
          sleep_us(30000);
          yv = xv.load();
        });
      },
      Context::gpu(0), {x}, {y});
  rig.engine.push_sync([&] { xv = 99; }, Context::cpu(), {}, {x});
  rig.engine.wait_for_all();
  rig.engine.wait_for_var(y);
  EXPECT_EQ(yv.load(), 5);
}

// A CPU reader does not wait for GPU readers, only for the last writer.
TEST_P(GpuRuntime, CpuReaderWaitsOnlyForTheWriter) {
  SimRig rig(GetParam(), {.devices = 1});
  Var x = rig.engine.new_variable();
  std::atomic<bool> release_reader{false};
  rig.rt.push([&](const Stream& s) { s.host_task([] {}); }, Context::gpu(0), {}, {x});
  rig.rt.push(
      [&](const Stream& s) {
        s.host_task([&] {
          while (!release_reader.load()) std::this_thread::yield();
        });
      },
      Context::gpu(0), {x}, {}, {.prop = FnProperty::copy_from_device});
  std::atomic<bool> ran{false};
  rig.engine.push_sync([&] { ran = true; }, Context::cpu(), {x}, {});
  for (int i = 0; i < 2000 && !ran.load(); ++i) sleep_us(1000);
  EXPECT_TRUE(ran.load()) << "a CPU read must not wait for a concurrent GPU read";
  release_reader = true;
  rig.engine.wait_for_all();
  rig.rt.synchronize();
}

TEST_P(GpuRuntime, BodyExceptionIsAnOpError) {
  SimRig rig(GetParam(), {.devices = 1});
  Var x = rig.engine.new_variable();
  rig.rt.push([](const Stream&) { throw std::runtime_error("launch config"); }, Context::gpu(0), {}, {x});
  EXPECT_THROW(rig.engine.wait_for_var(x), std::runtime_error);
}

// A device failure after the op completed for the engine: it travels along
// the stream wait to the dependent GPU op's output and reaches the CPU
// consumers as an op error with the error's name.
TEST_P(GpuRuntime, DeviceFailureReachesCpuConsumersWithItsName) {
  SimRig rig(GetParam(), {.devices = 2});
  Var x = rig.engine.new_variable();
  Var y = rig.engine.new_variable();
  rig.rt.push(
      [](const Stream& s) {
        s.host_task([] { throw gpu::GpuError(700, "simErrorIllegalAddress", "kernel 'scale' read out of bounds"); });
      },
      Context::gpu(0), {}, {x});
  rig.rt.push([](const Stream& s) { s.host_task([] {}); }, Context::gpu(1), {x}, {y});
  auto expect_named = [&](Var v) {
    try {
      rig.engine.wait_for_var(v);
      ADD_FAILURE() << "wait_for_var should rethrow the device failure";
    } catch (const gpu::GpuError& e) {
      EXPECT_EQ(e.name(), "simErrorIllegalAddress");
    }
  };
  expect_named(x);
  expect_named(y);
  bool cpu_ran = false;
  rig.engine.push_sync([&] { cpu_ran = true; }, Context::cpu(), {y}, {});
  EXPECT_THROW(rig.engine.wait_for_all(), gpu::GpuError);
  EXPECT_FALSE(cpu_ran) << "a CPU consumer of failed device work is skipped";
  try {
    rig.engine.wait_for_all();
  } catch (...) {
  }
}

TEST_P(GpuRuntime, BadDeviceIsAClearErrorAtPush) {
  SimRig rig(GetParam(), {.devices = 1});
  Var x = rig.engine.new_variable();
  try {
    rig.rt.push([](const Stream&) {}, Context::gpu(3), {}, {x});
    FAIL();
  } catch (const gpu::GpuError& e) {
    EXPECT_EQ(e.name(), "cudaErrorInvalidDevice");
  }
  EXPECT_THROW(rig.rt.push([](const Stream&) {}, Context::cpu(), {}, {x}), Error);
}

TEST_P(GpuRuntime, DeletedVariableMemoryReusedOnlyAfterItsEvents) {
  SimRig rig(GetParam(), {.devices = 1});
  Var x = rig.engine.new_variable();
  gpu::Buffer b = rig.rt.alloc_device(0, 4096);
  void* const old = b.data();
  std::atomic<bool> finished{false};
  rig.rt.push(
      [&, p = b.as<char>()](const Stream& s) {
        s.host_task([&, p] {
          sleep_us(30000);
          std::memset(p, 1, 4096);
          finished = true;
        });
      },
      Context::gpu(0), {}, {x});
  rig.rt.delete_variable(x, b);
  gpu::Buffer early = rig.rt.alloc_device(0, 4096);
  if (!finished.load()) {
    EXPECT_NE(early.data(), old) << "reused while the kernel may still write it";
  }
  rig.engine.wait_for_all();  // the held delete counts as in flight
  EXPECT_TRUE(finished.load());
  gpu::Buffer later = rig.rt.alloc_device(0, 4096);
  EXPECT_EQ(later.data(), old) << "returned to the pool once its events completed";
  EXPECT_THROW(rig.engine.wait_for_var(x), Error);  // deleted
  rig.rt.free(early);
  rig.rt.free(later);
}

TEST_P(GpuRuntime, CompleteWhenDoneFinishesAnAsyncOp) {
  SimRig rig(GetParam(), {.devices = 1});
  Var x = rig.engine.new_variable();
  std::atomic<int> value{0};
  rig.engine.push_async(
      [&](RunContext, OnComplete done) {
        Stream s = rig.rt.stream(Context::gpu(0));
        s.host_task([&] {
          sleep_us(20000);
          value = 3;
        });
        rig.rt.complete_when_done(s, done);
      },
      Context::cpu(), {}, {x});
  rig.engine.wait_for_var(x);
  EXPECT_EQ(value.load(), 3);
}

Task<int> lease_and_launch(Engine& engine, gpu::Runtime& rt, Var x, std::atomic<int>& value,
                           std::atomic<bool>& other_ran, bool& other_ran_before_resume) {
  Lease lease = co_await ordo::push(engine, reads(), writes(x));
  Stream s = rt.stream(Context::gpu(0));
  s.host_task([&] {
    sleep_us(30000);
    value = 11;
  });
  co_await gpu::on(s);
  other_ran_before_resume = other_ran.load();
  const int v = value.load();
  lease.release();
  co_return v;
}

// A coroutine holding a lease launches device work and resumes when it has
// finished, without holding a worker meanwhile (one CPU worker runs another op).
TEST(GpuCoroutine, AwaitsStreamWithoutHoldingAWorker) {
  Options o = engine_options(EngineKind::per_device);
  o.cpu_workers = 1;
  Engine engine(o);
  gpu::Runtime rt(engine, gpu::make_sim_backend({.devices = 1}));
  Var x = engine.new_variable();
  Var other = engine.new_variable();
  std::atomic<int> value{0};
  std::atomic<bool> other_ran{false};
  bool before = false;
  Task<int> t = lease_and_launch(engine, rt, x, value, other_ran, before);
  std::thread pusher([&] {
    sleep_us(5000);
    engine.push_sync([&] { other_ran = true; }, Context::cpu(), {}, {other});
  });
  const int v = sync_wait(std::move(t));
  pusher.join();
  engine.wait_for_all();
  EXPECT_EQ(v, 11);
  EXPECT_TRUE(before) << "the only CPU worker was free while the coroutine waited";
}

Task<void> await_failure(gpu::Runtime& rt) {
  Stream s = rt.stream(Context::gpu(0), FnProperty::copy_to_device);
  s.host_task([] { throw gpu::GpuError(2, "simErrorMemoryAllocation", "test"); });
  co_await gpu::on(s);
}

TEST(GpuCoroutine, DeviceFailureIsRethrownByTheAwait) {
  Engine engine(engine_options(EngineKind::pooled));
  gpu::Runtime rt(engine, gpu::make_sim_backend({.devices = 1}));
  try {
    sync_wait(await_failure(rt));
    FAIL();
  } catch (const gpu::GpuError& e) {
    EXPECT_EQ(e.name(), "simErrorMemoryAllocation");
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, GpuRuntime,
                         ::testing::Values(EngineKind::naive, EngineKind::pooled, EngineKind::per_device),
                         [](const auto& p) { return std::string(kind_name(p.param)); });

}  // namespace
}  // namespace ordo::test

// tests/gpu/errors_test.cpp - device work nobody consumes is still waited for
// and its failures still reported: Engine::wait_for_all and
// Runtime::synchronize wait for the streams and rethrow a device failure no
// consumer was given (once); the Runtime's destruction reports one left over;
// a host task that throws fails its stream like a device fault, on every
// backend (the runtime keeps the failure, as cudaLaunchHostFunc cannot).
#include <atomic>
#include <latch>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.hpp"

namespace ordo::test {
namespace {

using gpu::Stream;

/// A simulated kernel fault: work the backend itself fails (not a host task
/// of the runtime), sticky on its stream.
void device_fault(const Stream& s, const char* name) {
  s.runtime().backend().host_task(s.handle(), [name] { throw gpu::GpuError(700, name, "test kernel"); });
}

class GpuErrors : public ::testing::TestWithParam<EngineKind> {};

TEST_P(GpuErrors, WaitForAllWaitsForDeviceWorkNobodyConsumes) {
  SimRig rig(GetParam(), {.devices = 2});
  Var x = rig.engine.new_variable();
  std::atomic<int> done{0};
  for (int d = 0; d < 2; ++d) {
    rig.rt.push(
        [&](const Stream& s) {
          s.host_task([&] {
            sleep_us(20000);  // a slow kernel: wait_for_all returning at enqueue would see 0 or 1
            done.fetch_add(1);
          });
        },
        Context::gpu(d), {}, {x}, {.prop = d == 0 ? FnProperty::normal : FnProperty::copy_from_device});
  }
  rig.engine.wait_for_all();
  EXPECT_EQ(done.load(), 2);
  EXPECT_EQ(rig.rt.stats().held_ops, 0U) << "no CPU consumer, nothing held";
}

TEST_P(GpuErrors, WaitForAllRethrowsAnUnobservedDeviceFailureOnce) {
  SimRig rig(GetParam(), {.devices = 1});
  Var x = rig.engine.new_variable();
  rig.rt.push([](const Stream& s) { device_fault(s, "simErrorIllegalAddress"); }, Context::gpu(0), {}, {x});
  try {
    rig.engine.wait_for_all();
    FAIL() << "wait_for_all must report the device failure";
  } catch (const gpu::GpuError& e) {
    EXPECT_EQ(e.name(), "simErrorIllegalAddress");
  }
  EXPECT_NO_THROW(rig.engine.wait_for_all()) << "reported once";
  // The stream stays failed (sticky): later work on it carries the same
  // failure, already reported, so it is not rethrown again.
  rig.rt.push([](const Stream& s) { s.host_task([] {}); }, Context::gpu(0), {}, {x});
  EXPECT_NO_THROW(rig.engine.wait_for_all());
}

// Op errors first (wait_for_all's own rule), then the device failure, one per call.
TEST_P(GpuErrors, OpErrorFirstThenDeviceFailure) {
  SimRig rig(GetParam(), {.devices = 1});
  Var a = rig.engine.new_variable();
  Var b = rig.engine.new_variable();
  rig.rt.push([](const Stream& s) { device_fault(s, "simErrorLaunchFailure"); }, Context::gpu(0), {}, {b});
  rig.engine.push_sync([] { throw std::logic_error("cpu op"); }, Context::cpu(), {}, {a});
  EXPECT_THROW(rig.engine.wait_for_all(), std::logic_error);
  try {
    rig.engine.wait_for_all();
    FAIL() << "the device failure comes next";
  } catch (const gpu::GpuError& e) {
    EXPECT_EQ(e.name(), "simErrorLaunchFailure");
  }
  EXPECT_NO_THROW(rig.engine.wait_for_all());
}

// A failure a consumer was given (wait_for_var here) is not reported again
// by wait_for_all. wait_for_var rethrows it as long as the failed write is
// the variable's last (the data is bad), until a writer replaces it.
TEST_P(GpuErrors, WaitForVarRethrowsUntilReplacedAndWaitForAllDoesNotRepeat) {
  SimRig rig(GetParam(), {.devices = 1});
  Var x = rig.engine.new_variable();
  rig.rt.push([](const Stream& s) { device_fault(s, "simErrorIllegalAddress"); }, Context::gpu(0), {}, {x});
  for (int i = 0; i < 2; ++i) {
    try {
      rig.engine.wait_for_var(x);
      FAIL() << "wait_for_var must rethrow the last writer's device failure (" << i << ")";
    } catch (const gpu::GpuError& e) {
      EXPECT_EQ(e.name(), "simErrorIllegalAddress");
    }
  }
  EXPECT_NO_THROW(rig.engine.wait_for_all());
  bool rewrote = false;
  rig.engine.push_sync([&] { rewrote = true; }, Context::cpu(), {}, {x}, {.always_run = true});
  EXPECT_NO_THROW(rig.engine.wait_for_var(x)) << "the writer replaced the failed write";
  EXPECT_TRUE(rewrote);
  // Each held consumer is released with the failure as its own op error:
  // the always_run writer's is reported like any error an always_run op ran
  // through (once), not silently dropped.
  EXPECT_THROW(rig.engine.wait_for_all(), gpu::GpuError);
  EXPECT_NO_THROW(rig.engine.wait_for_all());
}

TEST_P(GpuErrors, SynchronizeWaitsAndRethrowsAnUnobservedFailureOnce) {
  SimRig rig(GetParam(), {.devices = 2});
  Var x = rig.engine.new_variable();
  Var y = rig.engine.new_variable();
  std::atomic<bool> slow_done{false};
  std::latch enqueued(2);  // synchronize waits for what is enqueued when it is called
  rig.rt.push(
      [&](const Stream& s) {
        s.host_task([&] {
          sleep_us(20000);
          slow_done = true;
        });
        enqueued.count_down();
      },
      Context::gpu(1), {}, {y});
  rig.rt.push(
      [&](const Stream& s) {
        device_fault(s, "simErrorIllegalAddress");
        enqueued.count_down();
      },
      Context::gpu(0), {}, {x});
  enqueued.wait();
  EXPECT_THROW(rig.rt.synchronize(), gpu::GpuError);
  EXPECT_TRUE(slow_done.load());
  EXPECT_NO_THROW(rig.rt.synchronize()) << "reported once";
  EXPECT_NO_THROW(rig.engine.wait_for_all()) << "synchronize claimed it";
}

// A runtime host task that throws fails its stream from there on: the op's
// CPU consumers see the exception itself, it travels along a stream wait to
// a GPU op on another device, later host tasks on the stream are skipped,
// and other streams are unaffected.
TEST_P(GpuErrors, HostTaskExceptionFailsItsStreamLikeADeviceFault) {
  SimRig rig(GetParam(), {.devices = 2});
  Var x = rig.engine.new_variable();
  Var y = rig.engine.new_variable();
  Var z = rig.engine.new_variable();
  Var w = rig.engine.new_variable();
  std::atomic<bool> later_ran{false};
  std::atomic<bool> other_ran{false};
  rig.rt.push(
      [&](const Stream& s) {
        s.host_task([] { throw std::runtime_error("host task boom"); });
        s.host_task([&] { later_ran = true; });
      },
      Context::gpu(0), {}, {x});
  rig.rt.push([](const Stream& s) { s.host_task([] {}); }, Context::gpu(1), {x}, {y});  // waits on device 0's event
  rig.rt.push([&](const Stream& s) { s.host_task([&] { other_ran = true; }); }, Context::gpu(1), {}, {w},
              {.prop = FnProperty::copy_to_device});
  for (Var v : {x, y}) {
    try {
      rig.engine.wait_for_var(v);
      ADD_FAILURE() << "the host task's exception must reach wait_for_var";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "host task boom");
    }
  }
  bool consumer_ran = false;
  rig.engine.push_sync([&] { consumer_ran = true; }, Context::cpu(), {y}, {z});
  EXPECT_THROW(rig.engine.wait_for_var(z), std::runtime_error);
  EXPECT_FALSE(consumer_ran) << "a CPU consumer of failed work is skipped";
  EXPECT_NO_THROW(rig.engine.wait_for_var(w));
  EXPECT_NO_THROW(rig.engine.wait_for_all()) << "every failure above was given to a consumer";
  EXPECT_FALSE(later_ran.load()) << "host tasks after a failed one are skipped (sticky)";
  EXPECT_TRUE(other_ran.load());
}

TEST_P(GpuErrors, HostTaskExceptionNobodyConsumesReachesWaitForAll) {
  SimRig rig(GetParam(), {.devices = 1});
  Var x = rig.engine.new_variable();
  rig.rt.push([](const Stream& s) { s.host_task([] { throw std::runtime_error("unconsumed"); }); }, Context::gpu(0),
              {}, {x}, {.prop = FnProperty::copy_to_device});
  EXPECT_THROW(rig.engine.wait_for_all(), std::runtime_error);
  EXPECT_NO_THROW(rig.engine.wait_for_all());
}

// A host task of an async op's stream work: complete_when_done fails the op with it.
TEST(GpuErrorsAsync, HostTaskExceptionReachesCompleteWhenDone) {
  SimRig rig(EngineKind::pooled, {.devices = 1});
  Var x = rig.engine.new_variable();
  rig.engine.push_async(
      [&](RunContext, OnComplete done) {
        Stream s = rig.rt.stream(Context::gpu(0));
        s.host_task([] { throw std::runtime_error("in async op"); });
        rig.rt.complete_when_done(s, done);
      },
      Context::cpu(), {}, {x});
  EXPECT_THROW(rig.engine.wait_for_var(x), std::runtime_error);
  EXPECT_NO_THROW(rig.engine.wait_for_all()) << "the async op's error, given to wait_for_var";
}

// Destroying the Runtime with a failure nobody was given reports it through
// Options::on_unobserved_error, as the engine does for its own errors.
TEST(GpuErrorsShutdown, UnobservedDeviceFailureIsReportedAtDestruction) {
  std::vector<ErrorReport> reports;
  {
    Options o = engine_options(EngineKind::per_device);
    o.on_unobserved_error = [&](const ErrorReport& r) { reports.push_back(r); };
    Engine engine(o);
    {
      gpu::Runtime rt(engine, gpu::make_sim_backend({.devices = 1}));
      Var x = engine.new_variable();
      Var a = engine.new_variable();
      rt.push([](const Stream& s) { device_fault(s, "simErrorIllegalAddress"); }, Context::gpu(0), {}, {x});
      engine.push_sync([] { throw std::logic_error("op error"); }, Context::cpu(), {}, {a});
      EXPECT_THROW(engine.wait_for_all(), std::logic_error);  // the op error; the device failure is left
    }
    ASSERT_EQ(reports.size(), 1U);
    EXPECT_EQ(reports[0].op_name, "ordo::gpu device work");
    EXPECT_NE(reports[0].message.find("simErrorIllegalAddress"), std::string::npos) << reports[0].message;
  }
  EXPECT_EQ(reports.size(), 1U) << "the engine has nothing more to report";
}

INSTANTIATE_TEST_SUITE_P(Engines, GpuErrors,
                         ::testing::Values(EngineKind::naive, EngineKind::pooled, EngineKind::per_device),
                         [](const auto& p) { return std::string(kind_name(p.param)); });

}  // namespace
}  // namespace ordo::test

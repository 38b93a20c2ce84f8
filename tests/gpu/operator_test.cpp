// tests/gpu/operator_test.cpp - pre-built GPU operators (Runtime::new_operator):
// they order on the device like Runtime::push (stream waits, only the CPU
// consumer held), and deletion follows the engine's operator rules.
#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "gpu/gpu_test_util.hpp"

namespace ordo::test {
namespace {

using gpu::Stream;

void expect_deleted(const std::function<void()>& f) {
  try {
    f();
    ADD_FAILURE() << "expected Errc::deleted_operator";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::deleted_operator) << e.what();
  }
}

class GpuOperator : public ::testing::TestWithParam<EngineKind> {};

// Two operators over one buffer (compute streams and the H2D stream, two
// devices), pushed alternately: wrong without the cross-stream waits.
TEST_P(GpuOperator, PushesOrderOnTheDeviceLikePush) {
  SimRig rig(GetParam(), {.devices = 2, .max_delay = std::chrono::microseconds(200), .seed = 5});
  Var x = rig.engine.new_variable();
  gpu::Buffer buf = rig.rt.alloc_host(sizeof(std::uint64_t));
  auto* v = buf.as<std::uint64_t>();
  *v = 1;
  gpu::Operator mul = rig.rt.new_operator(
      [v](const Stream& s) { s.host_task([v] { *v = *v * 3; }); }, {}, {x}, {.name = "mul"});
  gpu::Operator add = rig.rt.new_operator([v](const Stream& s) { s.host_task([v] { *v = *v + 7; }); }, {}, {x},
                                          {.prop = FnProperty::copy_to_device, .name = "add"});
  std::uint64_t expect = 1;
  for (int i = 0; i < 40; ++i) {
    const Context ctx = Context::gpu(i % 2);
    if (i % 3 == 0) {
      rig.rt.push(add, ctx);
      expect += 7;
    } else {
      rig.rt.push(mul, ctx);
      expect *= 3;
    }
  }
  std::uint64_t seen = 0;
  rig.engine.push_sync([&] { seen = *v; }, Context::cpu(), {x}, {});
  rig.engine.wait_for_all();
  EXPECT_EQ(seen, expect);
  const gpu::RuntimeStats st = rig.rt.stats();
  EXPECT_EQ(st.gpu_ops, 40U);
  EXPECT_GT(st.stream_waits, 0U);
  EXPECT_EQ(st.held_ops, 1U) << "operators are stream ordered: only the CPU consumer is held";
  rig.rt.delete_operator(mul);
  rig.rt.delete_operator(add);
  rig.rt.free(buf);
}

TEST_P(GpuOperator, DeleteLetsEarlierPushesRunThenDestroysTheBody) {
  SimRig rig(GetParam(), {.devices = 1});
  Var x = rig.engine.new_variable();
  auto token = std::make_shared<int>(0);
  std::atomic<int> runs{0};
  gpu::Operator op = rig.rt.new_operator(
      [token, &runs](const Stream& s) {
        s.host_task([&runs] {
          sleep_us(2000);
          runs.fetch_add(1);
        });
      },
      {}, {x});
  for (int i = 0; i < 5; ++i) rig.rt.push(op, Context::gpu(0));
  rig.rt.delete_operator(op);
  expect_deleted([&] { rig.rt.push(op, Context::gpu(0)); });
  expect_deleted([&] { rig.rt.delete_operator(op); });
  rig.engine.wait_for_all();
  EXPECT_EQ(runs.load(), 5);
  EXPECT_EQ(token.use_count(), 1) << "the body is destroyed once the last push finished";
  // A new operator may reuse the record: the stale handle still fails.
  gpu::Operator other = rig.rt.new_operator([](const Stream&) {}, {}, {x});
  expect_deleted([&] { rig.rt.push(op, Context::gpu(0)); });
  rig.rt.push(other, Context::gpu(0));
  rig.rt.delete_operator(other);
  expect_deleted([&] { rig.rt.push(gpu::Operator{}, Context::gpu(0)); });
}

TEST_P(GpuOperator, BadContextThrowsAtPushAndLeaksNoReference) {
  SimRig rig(GetParam(), {.devices = 1});
  Var x = rig.engine.new_variable();
  auto token = std::make_shared<int>(0);
  gpu::Operator op = rig.rt.new_operator([token](const Stream&) {}, {}, {x});
  try {
    rig.rt.push(op, Context::gpu(3));
    FAIL();
  } catch (const gpu::GpuError& e) {
    EXPECT_EQ(e.name(), "cudaErrorInvalidDevice");
  }
  EXPECT_THROW(rig.rt.push(op, Context::cpu()), Error);
  rig.rt.delete_operator(op);
  rig.engine.wait_for_all();
  EXPECT_EQ(token.use_count(), 1);
}

TEST_P(GpuOperator, BodyExceptionAndDeviceFailureAreOpErrors) {
  SimRig rig(GetParam(), {.devices = 1});
  Var x = rig.engine.new_variable();
  Var y = rig.engine.new_variable();
  gpu::Operator bad = rig.rt.new_operator([](const Stream&) { throw std::runtime_error("launch"); }, {}, {x});
  gpu::Operator fault = rig.rt.new_operator(
      [](const Stream& s) { s.host_task([] { throw std::runtime_error("device"); }); }, {}, {y},
      {.prop = FnProperty::copy_to_device});
  rig.rt.push(bad, Context::gpu(0));
  rig.rt.push(fault, Context::gpu(0));
  try {
    rig.engine.wait_for_var(x);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "launch");
  }
  try {
    rig.engine.wait_for_var(y);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "device");
  }
  rig.rt.delete_operator(bad);
  rig.rt.delete_operator(fault);
}

TEST(GpuOperatorMisuse, HandleOfAnotherRuntimeIsRefused) {
  Engine engine(engine_options(EngineKind::pooled));
  Var x = engine.new_variable();
  gpu::Runtime a(engine, gpu::make_sim_backend({.devices = 1}));
  Engine engine2(engine_options(EngineKind::pooled));
  gpu::Runtime b(engine2, gpu::make_sim_backend({.devices = 1}));
  gpu::Operator op = a.new_operator([](const Stream&) {}, {}, {x});
  expect_deleted([&] { b.push(op, Context::gpu(0)); });
  expect_deleted([&] { b.delete_operator(op); });
  a.delete_operator(op);
  engine.wait_for_all();
}

INSTANTIATE_TEST_SUITE_P(Engines, GpuOperator,
                         ::testing::Values(EngineKind::naive, EngineKind::pooled, EngineKind::per_device),
                         [](const auto& p) { return std::string(kind_name(p.param)); });

}  // namespace
}  // namespace ordo::test

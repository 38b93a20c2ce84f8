// Regressions for MXNet's deadlocks: each must complete or fail with a clear
// error (ctest's timeout catches a hang).
#include <atomic>
#include <thread>

#include "test_util.hpp"

namespace ordo::test {
namespace {

class Deadlock : public ::testing::TestWithParam<EngineConfig> {};

TEST_P(Deadlock, WaitForVarInsideAnOpIsAClearError) {
  Engine engine(GetParam().options);
  Var a = engine.new_variable(), b = engine.new_variable();
  std::atomic<int> code{-1};
  engine.push_sync([&] {
    try {
      engine.wait_for_var(b);
    } catch (const Error& e) {
      code = static_cast<int>(e.code());
    }
  }, Context::cpu(), {}, {a});
  engine.wait_for_all();
  EXPECT_EQ(code.load(), static_cast<int>(Errc::wait_inside_op));
}

TEST_P(Deadlock, WaitForAllInsideAnOpIsAClearError) {
  Engine engine(GetParam().options);
  Var a = engine.new_variable();
  std::string message;
  engine.push_sync([&] {
    try {
      engine.wait_for_all();
    } catch (const Error& e) {
      message = e.what();
    }
  }, Context::cpu(), {}, {a}, {.name = "impatient"});
  engine.wait_for_all();
  EXPECT_NE(message.find("impatient"), std::string::npos) << message;
}

TEST_P(Deadlock, WaitOnAnotherEngineInsideAnOpIsAllowed) {
  Engine engine(GetParam().options);
  Engine other(Options{.kind = EngineKind::pooled, .cpu_workers = 1});
  Var a = engine.new_variable(), x = other.new_variable();
  int value = 0;
  other.push_sync([&] { value = 5; }, Context::cpu(), {}, {x});
  engine.push_sync([&] { other.wait_for_var(x); value += 1; }, Context::cpu(), {}, {a});
  engine.wait_for_all();
  EXPECT_EQ(value, 6);
}

TEST_P(Deadlock, ConcurrentPushersSharingTwoVariables) {
  // MXNet: 2 threads x 300k pushes writing {x,y} stalled 5 runs of 5.
  Engine engine(GetParam().options);
  Var x = engine.new_variable(), y = engine.new_variable();
  std::uint64_t hits = 0;  // guarded by the engine: every op writes x
  const int per_thread = (GetParam().options.kind == EngineKind::naive ? 100000 : 300000) / kScale;
  std::vector<std::thread> pushers;
  for (int t = 0; t < 2; ++t) {
    pushers.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        if (t == 0) {
          engine.push_sync([&hits] { ++hits; }, Context::cpu(), {}, {x, y});
        } else {
          engine.push_sync([&hits] { ++hits; }, Context::cpu(), {}, {y, x});
        }
      }
    });
  }
  for (auto& p : pushers) p.join();
  engine.wait_for_all();
  EXPECT_EQ(hits, static_cast<std::uint64_t>(2 * per_thread));
}

INSTANTIATE_TEST_SUITE_P(AllEngines, Deadlock, ::testing::ValuesIn(all_engine_configs()), config_name);

}  // namespace
}  // namespace ordo::test

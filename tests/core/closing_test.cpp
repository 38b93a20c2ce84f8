// Pushes that reach an engine while its destructor runs (issue 43): from the
// drain on, a push, post or delete_variable from a thread that runs none of
// the engine's ops throws Errc::shutting_down naming the op, while the ops
// already pushed, and the ops they push, still run. Before the fix such a
// push was accepted and, once the drain had ended, queued to workers being
// joined: never run, its waiter never answered.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "core/test_util.hpp"

namespace ordo::test {
namespace {

using namespace std::chrono_literals;

class EngineClosing : public ::testing::TestWithParam<EngineKind> {};

/// Pushes from this (foreign) thread until one is refused; the engine's
/// destructor is then running (its drain is held by an op in flight).
/// Returns the refusal's message, or "" if none came within the limit.
std::string push_until_refused(Engine& engine, Var scratch) {
  const auto end = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < end) {
    try {
      engine.push_sync([] {}, Context::cpu(), {}, {scratch}, {.name = "late request"});
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::shutting_down) << e.what();
      return e.what();
    }
    std::this_thread::yield();
  }
  return "";
}

TEST_P(EngineClosing, PushesFromOtherThreadsAreRefusedWhileOpsInFlightFinishAndPushTheirOwn) {
  auto* engine = new Engine(Options{.kind = GetParam(), .cpu_workers = 2});
  const Var held = engine->new_variable(), first = engine->new_variable(), scratch = engine->new_variable();
  Gate hold_drain, release_first;
  std::atomic<bool> follow_up_ran{false};
  // Keeps the drain going until the test has made its late pushes.
  engine->push_sync([&] { hold_drain.wait(); }, Context::cpu(), {}, {held}, {.name = "holds the drain"});
  // In flight when the destructor begins; pushes its follow-up from inside: accepted, run.
  engine->push_sync(
      [&, engine] {
        release_first.wait();
        engine->push_sync([&] { follow_up_ran = true; }, Context::cpu(), {first}, {}, {.name = "follow-up"});
      },
      Context::cpu(), {}, {first}, {.name = "in flight"});

  std::thread destroyer([engine] { delete engine; });
  const std::string refused = push_until_refused(*engine, scratch);
  ASSERT_FALSE(refused.empty()) << "no push was refused while the destructor ran";
  EXPECT_NE(refused.find("op 'late request'"), std::string::npos) << refused;
  EXPECT_NE(refused.find("being destroyed"), std::string::npos) << refused;
  // Every other way in is refused too, and names what it refused.
  try {
    engine->post([] {}, Context::cpu(), {.name = "late post"});
    ADD_FAILURE() << "a post was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::shutting_down);
    EXPECT_NE(std::string(e.what()).find("op 'late post'"), std::string::npos) << e.what();
  }
  try {
    engine->push_async([](RunContext, OnComplete done) { done(); }, Context::cpu(), {}, {scratch},
                       {.name = "late async"});
    ADD_FAILURE() << "an async push was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::shutting_down);
  }
  try {
    engine->push_sync([] {}, Context::cpu(), {}, {scratch}, {.name = "late inline", .inline_ok = true});
    ADD_FAILURE() << "an inline_ok push was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::shutting_down);
  }
  EXPECT_THROW(engine->delete_variable(scratch), Error);
  release_first.open();
  hold_drain.open();
  destroyer.join();
  EXPECT_TRUE(follow_up_ran.load()) << "an op pushed by an op being drained was lost";
}

std::string kind_name(const ::testing::TestParamInfo<EngineKind>& p) {
  return p.param == EngineKind::pooled ? "pooled" : "per_device";
}

INSTANTIATE_TEST_SUITE_P(Kinds, EngineClosing, ::testing::Values(EngineKind::pooled, EngineKind::per_device), kind_name);

}  // namespace
}  // namespace ordo::test

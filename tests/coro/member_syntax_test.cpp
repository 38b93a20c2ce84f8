// The member spelling of the coroutine forms: co_await engine.push(...) and
// co_await engine.wait_for(var), with registration at the call.
#include <string>
#include <vector>

#include "coro_test_util.hpp"

namespace ordo::test {
namespace {

TEST(MemberSyntax, AccessFunctionAndWaitForms) {
  Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = 2});
  Var a = engine.new_variable(), b = engine.new_variable();
  int x = 0;
  auto task = [&]() -> Task<int> {
    {
      Lease lease = co_await engine.push(ordo::reads(), ordo::writes(a));
      x = 20;
    }
    const int doubled = co_await engine.push(ordo::reads(a), ordo::writes(b), [&] { return 2 * x; });
    co_await engine.wait_for(b);
    co_return doubled + 2;
  };
  EXPECT_EQ(run_bounded(task()), 42);
  engine.wait_for_all();
}

TEST(MemberSyntax, RegisteredAtTheCallNotAtTheAwait) {
  // `auto first = engine.push(..A..); auto second = engine.push(..B..);
  //  co_await second; co_await first;` runs A before B when they conflict.
  Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = 2});
  Var v = engine.new_variable();
  std::vector<std::string> order;
  auto task = [&]() -> Task<void> {
    auto first = engine.push(ordo::reads(), ordo::writes(v), [&] { order.push_back("A"); });
    auto second = engine.push(ordo::reads(), ordo::writes(v), [&] { order.push_back("B"); });
    co_await second;
    co_await first;
  };
  run_bounded(task());
  engine.wait_for_all();
  EXPECT_EQ(order, (std::vector<std::string>{"A", "B"}));
}

}  // namespace
}  // namespace ordo::test

// An op's exception reaches whoever waits on what it touched, once: an
// error handed to a coroutine (co_await, sync_wait) is observed, so
// wait_for_all does not rethrow it again and the engine's destructor does not
// report it; an error no waiter got is rethrown or reported exactly once.
// The rule is stated in docs/guide.md, "Errors and exceptions".
#include <string>
#include <vector>

#include "coro_test_util.hpp"

namespace ordo::test {
namespace {

class ObservedError : public ::testing::TestWithParam<EngineConfig> {
 protected:
  /// The config's options, with unobserved errors collected in `reports`
  /// (called by the engine's destructor, on the destroying thread).
  Options options() {
    Options o = GetParam().options;
    o.on_unobserved_error = [this](const ErrorReport& r) { reports.push_back(r); };
    return o;
  }
  std::string report_names() const {
    std::string out;
    for (const ErrorReport& r : reports) out += "'" + r.op_name + "': " + r.message + "; ";
    return out;
  }
  std::vector<ErrorReport> reports;
};

// Regression (issue 31, item 8): fn's exception, rethrown by co_await in the
// coroutine, was rethrown again by wait_for_all and reported at destruction.
TEST_P(ObservedError, FunctionFormErrorRethrownInTheCoroutine) {
  {
    Engine engine(options());
    Var x = engine.new_variable();
    auto task = [&]() -> Task<bool> {
      try {
        co_await push(engine, reads(), writes(x), [] { throw Boom("from fn"); }, Context::cpu(), {.name = "failing"});
      } catch (const Boom&) {
        co_return true;
      }
      co_return false;
    };
    EXPECT_TRUE(run_bounded(task()));
    EXPECT_EQ(engine.pending_errors(), 0U);
    EXPECT_NO_THROW(engine.wait_for_all());
  }
  EXPECT_TRUE(reports.empty()) << report_names();
}

// Regression (issue 31, item 8): the original exception handed to a
// coroutine whose push was skipped (wait_for, a lease, the function form).
TEST_P(ObservedError, SkippedPushErrorRethrownInTheCoroutine) {
  {
    Engine engine(options());
    Var x = engine.new_variable();
    Var y = engine.new_variable();
    engine.push_sync([] { throw Boom("producer"); }, Context::cpu(), {}, {x}, {.name = "producer"});
    auto task = [&]() -> Task<int> {
      int caught = 0;
      try {
        co_await wait_for(engine, x);
      } catch (const Boom&) {
        ++caught;
      }
      try {
        Lease l = co_await push(engine, reads(x), writes(y));
      } catch (const Boom&) {
        ++caught;
      }
      try {
        co_await push(engine, reads(x), writes(), [] {});
      } catch (const Boom&) {
        ++caught;
      }
      co_return caught;
    };
    EXPECT_EQ(run_bounded(task()), 3);
    EXPECT_EQ(engine.pending_errors(), 0U);
    EXPECT_NO_THROW(engine.wait_for_all());
  }
  EXPECT_TRUE(reports.empty()) << report_names();
}

// Regression (issue 31, item 8): sync_wait rethrew the exception a coroutine
// let escape through a held lease (failing the op with it); wait_for_all then
// rethrew it a second time. Also the function form's, not caught in the task.
TEST_P(ObservedError, ErrorRethrownBySyncWait) {
  {
    Engine engine(options());
    Var x = engine.new_variable();
    Var y = engine.new_variable();
    auto unwinding = [&]() -> Task<void> {
      Lease l = co_await push(engine, reads(), writes(x), Context::cpu(), {.name = "holder"});
      throw Boom("thrown while holding the lease");
    };
    EXPECT_THROW(sync_wait(unwinding()), Boom);
    auto uncaught = [&]() -> Task<int> {
      co_return co_await push(engine, reads(), writes(y), []() -> int { throw Boom("from fn"); });
    };
    EXPECT_THROW(sync_wait(uncaught()), Boom);
    EXPECT_EQ(engine.pending_errors(), 0U);
    EXPECT_NO_THROW(engine.wait_for_all());
  }
  EXPECT_TRUE(reports.empty()) << report_names();
}

// The other half of the rule: errors that no waiter got are not lost. A
// dropped awaitable's error goes to wait_for_all, once; the error a caught
// exception leaves on a lease's variables, never waited for, is reported at
// destruction, once, by its op's name.
TEST_P(ObservedError, ErrorsNoWaiterGotAreRethrownOrReportedOnce) {
  {
    Engine engine(options());
    Var x = engine.new_variable();
    Var y = engine.new_variable();
    {
      auto dropped = push(engine, reads(), writes(x), [] { throw Boom("dropped"); });
    }
    EXPECT_THROW(engine.wait_for_all(), Boom);
    EXPECT_NO_THROW(engine.wait_for_all());
    auto caught = [&]() -> Task<void> {
      try {
        Lease l = co_await push(engine, reads(), writes(y), Context::cpu(), {.name = "caught"});
        throw Boom("caught in the coroutine");
      } catch (const Boom&) {
      }
    };
    run_bounded(caught());
    EXPECT_EQ(engine.pending_errors(), 1U);
  }
  ASSERT_EQ(reports.size(), 1U) << report_names();
  EXPECT_EQ(reports[0].op_name, "caught");
}

INSTANTIATE_TEST_SUITE_P(Engines, ObservedError, ::testing::ValuesIn(all_engine_configs()), config_name);

}  // namespace
}  // namespace ordo::test

// A coroutine that holds a lease and then co_awaits an op that queues behind
// it (issue 43): the op could only be granted once the lease is released,
// which the suspended coroutine never does. The await fails with
// Errc::deadlock naming the op and the variable instead of waiting for ever;
// the op stays pushed and runs once the lease is released. Ops that do not
// queue behind the lease (reads beside a read lease, other variables) are
// awaited as usual.
#include <atomic>
#include <string>

#include "coro_test_util.hpp"

namespace ordo::test {
namespace {

class OwnLease : public ::testing::TestWithParam<EngineConfig> {};

/// What the co_await threw: its code and message, or "awaited" if it returned.
struct Outcome {
  Errc code = Errc::invalid_argument;
  std::string what = "awaited";
};

TEST_P(OwnLease, AwaitingAnOpQueuedBehindTheLeaseFailsNamingOpAndVariable) {
  Engine engine(GetParam().options);
  const Var v = engine.new_variable();
  std::atomic<int> ran{0};
  auto task = [&]() -> Task<Outcome> {
    Outcome out;
    Lease lease = co_await push(engine, reads(), writes(v));
    try {
      co_await push(engine, reads(v), writes(), [&] { ran.fetch_add(1); }, {.name = "reader"});
    } catch (const Error& e) {
      out = {e.code(), e.what()};
    }
    EXPECT_EQ(ran.load(), 0) << "the reader ran while the lease was held";
    lease.release();  // the reader, still pushed, runs now
    co_return out;
  };
  const Outcome out = run_bounded(task());
  EXPECT_EQ(out.code, Errc::deadlock) << out.what;
  EXPECT_NE(out.what.find("op 'reader'"), std::string::npos) << out.what;
  EXPECT_NE(out.what.find("var " + std::to_string(v.id())), std::string::npos) << out.what;
  bounded_wait(engine, v);
  engine.wait_for_all();
  EXPECT_EQ(ran.load(), 1) << "the op whose await failed still runs, after the lease";
}

TEST_P(OwnLease, ALeaseAndAWaitForBehindTheLeaseFailToo) {
  Engine engine(GetParam().options);
  const Var v = engine.new_variable(), w = engine.new_variable();
  auto task = [&]() -> Task<int> {
    int failed = 0;
    Lease lease = co_await push(engine, reads(v), writes(w));
    try {
      Lease second = co_await push(engine, reads(), writes(v), {.name = "second lease"});
    } catch (const Error& e) {
      failed += e.code() == Errc::deadlock && std::string(e.what()).find("op 'second lease'") != std::string::npos;
    }
    try {
      co_await wait_for(engine, w);
    } catch (const Error& e) {
      failed += e.code() == Errc::deadlock && std::string(e.what()).find("var " + std::to_string(w.id())) !=
                                                  std::string::npos;
    }
    co_return failed;
  };
  EXPECT_EQ(run_bounded(task()), 2);
  engine.wait_for_all();
}

TEST_P(OwnLease, OpsThatDoNotQueueBehindTheLeaseAreAwaitedAsUsual) {
  Engine engine(GetParam().options);
  const Var v = engine.new_variable(), other = engine.new_variable();
  auto task = [&]() -> Task<int> {
    Lease read_lease = co_await push(engine, reads(v), writes());
    // A read beside a read lease is granted; another variable is free.
    const int a = co_await push(engine, reads(v), writes(), [] { return 1; });
    const int b = co_await push(engine, reads(), writes(other), [] { return 2; });
    co_await wait_for(engine, v);
    read_lease.release();
    // Released: a write of v no longer queues behind anything of this task.
    const int c = co_await push(engine, reads(), writes(v), [] { return 3; });
    co_return a + b + c;
  };
  EXPECT_EQ(run_bounded(task()), 6);
  engine.wait_for_all();
}

INSTANTIATE_TEST_SUITE_P(Engines, OwnLease, ::testing::ValuesIn(all_engine_configs()), config_name);

}  // namespace
}  // namespace ordo::test

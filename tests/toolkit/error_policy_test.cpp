// OpAttrs::error_to_awaiter (the server error policy): a failed op's error
// goes to its awaiter only and does not poison the variables it mutates;
// without the flag the dataflow behaviour stays.
#include <stdexcept>
#include <string>
#include <vector>

#include "toolkit/toolkit_test_util.hpp"

namespace ordo::test {
namespace {

class ErrorPolicy : public ::testing::TestWithParam<EngineConfig> {};

TEST_P(ErrorPolicy, CoroutinePushFailureGoesToTheAwaiterAndTheNextOpRuns) {
  Engine engine(GetParam().options);
  Var key = engine.new_variable();
  int value = 0;  // written by ops on `key` only
  auto request = [&](bool fail, int v) -> Task<int> {
    co_return co_await push(engine, reads(), writes(key), [&value, fail, v] {
      if (fail) throw Boom("bad request");
      value = v;
      return value;
    }, Context::cpu(), {.name = "set", .error_to_awaiter = true});
  };
  auto client = [&]() -> Task<void> {
    EXPECT_EQ(co_await request(false, 1), 1);
    EXPECT_THROW(co_await request(true, 2), Boom);
    EXPECT_EQ(co_await request(false, 3), 3) << "the failed request must not poison the key";
    co_await wait_for(engine, key);  // no error on the key
  };
  run_bounded(client());
  EXPECT_EQ(engine.var_version(key), 3U) << "the failed write counts as made";
  EXPECT_EQ(engine.pending_errors(), 0U) << "the awaiter observed it";
  EXPECT_NO_THROW(engine.wait_for_var(key));
  EXPECT_NO_THROW(engine.wait_for_all());
}

TEST_P(ErrorPolicy, WithoutTheFlagTheErrorStaysOnTheVariable) {
  Engine engine(GetParam().options);
  Var key = engine.new_variable();
  std::atomic<int> ran{0};
  auto client = [&]() -> Task<void> {
    EXPECT_THROW(co_await push(engine, reads(), writes(key), [] { throw Boom("bad"); }), Boom);
    // The next op on the key is skipped and rethrows the original exception.
    EXPECT_THROW(co_await push(engine, reads(key), writes(), [&] { ran.fetch_add(1); }), Boom);
  };
  run_bounded(client());
  EXPECT_EQ(ran.load(), 0);
  EXPECT_THROW(engine.wait_for_var(key), Boom);
  EXPECT_NO_THROW(engine.wait_for_all());
}

TEST_P(ErrorPolicy, PlainPushesLeaseFailAndOperators) {
  const bool inline_ok = GetParam().inline_ok;
  Engine engine(GetParam().options);
  Var key = engine.new_variable();
  std::atomic<int> ran{0};
  // push_sync (the direct path where inline_ok): no awaiter, reported by wait_for_all only.
  engine.push_sync([] { throw Boom("sync"); }, Context::cpu(), {}, {key},
                   {.inline_ok = inline_ok, .error_to_awaiter = true});
  engine.push_sync([&] { ran.fetch_add(1); }, Context::cpu(), {key}, {});
  EXPECT_NO_THROW(engine.wait_for_var(key));
  EXPECT_THROW(engine.wait_for_all(), Boom) << "an error no one awaited is the engine's to report";
  EXPECT_EQ(ran.load(), 1);
  // A pre-built operator with the flag.
  Operator op = engine.new_operator([] { throw Boom("operator"); }, {}, {key},
                                    {.inline_ok = inline_ok, .error_to_awaiter = true});
  engine.push(op, Context::cpu());
  engine.push_sync([&] { ran.fetch_add(1); }, Context::cpu(), {key}, {});
  EXPECT_THROW(engine.wait_for_all(), Boom);
  EXPECT_EQ(ran.load(), 2);
  engine.delete_operator(op);
  // A lease failed by an exception unwinding in a Task: the task's awaiter gets it.
  auto leased = [&]() -> Task<void> {
    Lease l = co_await push(engine, reads(), writes(key), Context::cpu(), {.error_to_awaiter = true});
    throw Boom("lease");
  };
  EXPECT_THROW(run_bounded(leased()), Boom);
  engine.push_sync([&] { ran.fetch_add(1); }, Context::cpu(), {key}, {});
  EXPECT_NO_THROW(engine.wait_for_var(key));
  EXPECT_NO_THROW(engine.wait_for_all());
  EXPECT_EQ(ran.load(), 3);
  // An error inherited from an input still skips the op and passes on.
  Var bad = engine.new_variable();
  engine.push_sync([] { throw Boom("input"); }, Context::cpu(), {}, {bad});
  engine.push_sync([&] { ran.fetch_add(1); }, Context::cpu(), {bad}, {key}, {.error_to_awaiter = true});
  EXPECT_THROW(engine.wait_for_var(key), Boom);  // observed there: wait_for_all has nothing left
  EXPECT_NO_THROW(engine.wait_for_all());
  EXPECT_EQ(ran.load(), 3);
}

INSTANTIATE_TEST_SUITE_P(All, ErrorPolicy, ::testing::ValuesIn(all_engine_configs()), config_name);

// Randomized: requests on a few keys, some failing, all with the flag; the
// values equal a serial replay that skips failed requests.
TEST(ErrorPolicyRandom, FailedRequestsNeverAffectLaterOnesOnTheSameKey) {
  const std::uint64_t seed = test_seed("error_policy");
  std::mt19937_64 rng(seed);
  Engine engine(Options{.kind = EngineKind::pooled, .cpu_workers = 2});
  const int keys = 3, requests = 300 / kScale;
  std::vector<Var> vars;
  for (int k = 0; k < keys; ++k) vars.push_back(engine.new_variable());
  std::vector<std::uint64_t> state(keys, 0), serial(keys, 0);
  struct Req {
    int key;
    bool fail;
    std::uint64_t v;
  };
  std::vector<Req> reqs;
  for (int i = 0; i < requests; ++i) reqs.push_back({static_cast<int>(rng() % keys), rng() % 4 == 0, rng()});
  for (const Req& r : reqs) {
    if (!r.fail) serial[r.key] = mix(serial[r.key], r.v);
  }
  std::atomic<int> failures{0};
  auto one = [&](Req r) -> Task<void> {
    try {
      co_await push(engine, reads(), writes(vars[r.key]), [&state, r] {
        if (r.fail) throw Boom("fail");
        state[r.key] = mix(state[r.key], r.v);
      }, Context::cpu(), {.error_to_awaiter = true});
    } catch (const Boom&) {
      failures.fetch_add(1);
    }
  };
  auto all = [&]() -> Task<void> {
    std::vector<Task<void>> ts;
    for (const Req& r : reqs) ts.push_back(one(r));  // pushed in order as each starts
    co_await when_all(std::move(ts));
  };
  run_bounded(all());
  for (int k = 0; k < keys; ++k) EXPECT_NO_THROW(engine.wait_for_var(vars[k]));
  EXPECT_EQ(state, serial) << "seed " << seed;
  int expected_failures = 0;
  for (const Req& r : reqs) expected_failures += r.fail ? 1 : 0;
  EXPECT_EQ(failures.load(), expected_failures);
  EXPECT_NO_THROW(engine.wait_for_all());
}

}  // namespace
}  // namespace ordo::test

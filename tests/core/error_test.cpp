// Exceptions travel along the data flow; every misuse is a clear error;
// nothing is silently dropped.
#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

#include "ordo/error_code.hpp"
#include "test_util.hpp"

namespace ordo::test {
namespace {

struct Boom : std::runtime_error {
  explicit Boom(const std::string& s) : std::runtime_error(s) {}
};

class Errors : public ::testing::TestWithParam<EngineConfig> {};

TEST_P(Errors, ExceptionSkipsDependantsAndReachesTheirWaiters) {
  Engine engine(GetParam().options);
  Var a = engine.new_variable(), b = engine.new_variable(), c = engine.new_variable();
  std::atomic<int> ran{0};
  engine.push_sync([] { throw Boom("from producer"); }, Context::cpu(), {}, {a}, {.name = "producer"});
  engine.push_sync([&] { ran.fetch_add(1); }, Context::cpu(), {a}, {b});     // skipped
  engine.push_sync([&] { ran.fetch_add(1); }, Context::cpu(), {b}, {c});     // skipped, transitively
  engine.push_sync([&] { ran.fetch_add(100); }, Context::cpu(), {}, {});     // unrelated: runs
  try {
    engine.wait_for_var(c);
    ADD_FAILURE() << "wait_for_var(c) did not rethrow";
  } catch (const Boom& e) {
    EXPECT_STREQ(e.what(), "from producer");  // original type and message
  }
  EXPECT_THROW(engine.wait_for_var(b), Boom);
  // wait_for_var cleared c's and b's copies; a still carries it until waited on.
  EXPECT_NO_THROW(engine.wait_for_var(c));
  EXPECT_THROW(engine.wait_for_var(a), Boom);
  EXPECT_NO_THROW(engine.wait_for_var(a));
  // Everything was rethrown by a wait: wait_for_all has nothing left to report.
  EXPECT_NO_THROW(engine.wait_for_all());
  EXPECT_EQ(ran.load(), 100) << "the skipped ops ran, or the unrelated one did not";
}

TEST_P(Errors, ErrorIsStickyUntilCleared) {
  Engine engine(GetParam().options);
  Var a = engine.new_variable();
  std::atomic<int> ran{0};
  engine.push_sync([] { throw Boom("sticky"); }, Context::cpu(), {}, {a});
  for (int i = 0; i < 5; ++i) engine.push_sync([&] { ran.fetch_add(1); }, Context::cpu(), {a}, {});
  for (int i = 0; i < 5; ++i) engine.push_sync([&] { ran.fetch_add(1); }, Context::cpu(), {}, {a});
  EXPECT_THROW(engine.wait_for_var(a), Boom);
  EXPECT_EQ(ran.load(), 0) << "ops on an errored variable must be skipped";
  // Cleared by the wait: new ops run again.
  engine.push_sync([&] { ran.fetch_add(1); }, Context::cpu(), {}, {a});
  EXPECT_NO_THROW(engine.wait_for_var(a));
  EXPECT_EQ(ran.load(), 1);
  engine.wait_for_all();
}

TEST_P(Errors, AlwaysRunOpRunsDespiteErrorAndRepairsTheVariable) {
  Engine engine(GetParam().options);
  Var a = engine.new_variable();
  std::atomic<int> ran{0};
  engine.push_sync([] { throw Boom("broken"); }, Context::cpu(), {}, {a});
  engine.push_sync([&] { ran.fetch_add(1); }, Context::cpu(), {}, {a}, {.always_run = true});
  engine.push_sync([&] { ran.fetch_add(10); }, Context::cpu(), {a}, {});
  EXPECT_NO_THROW(engine.wait_for_var(a));
  // The original error was never rethrown by a wait: wait_for_all reports it.
  EXPECT_THROW(engine.wait_for_all(), Boom);
  EXPECT_EQ(ran.load(), 11);
  EXPECT_NO_THROW(engine.wait_for_all());
}

TEST_P(Errors, ErrorOfAnOpWithNoOutputsIsNotLost) {
  Engine engine(GetParam().options);
  Var a = engine.new_variable();
  engine.push_sync([] { throw Boom("no outputs"); }, Context::cpu(), {a}, {});
  engine.push_sync([] { throw Boom("no vars at all"); }, Context::cpu(), {}, {});
  EXPECT_NO_THROW(engine.wait_for_var(a));  // a itself is fine
  EXPECT_THROW(engine.wait_for_all(), Boom);  // one error per call, oldest first
  EXPECT_EQ(engine.pending_errors(), 1U);
  EXPECT_THROW(engine.wait_for_all(), Boom);
  EXPECT_NO_THROW(engine.wait_for_all());
}

TEST_P(Errors, WaitForAllClearsEveryVariable) {
  Engine engine(GetParam().options);
  Var a = engine.new_variable(), b = engine.new_variable();
  engine.push_sync([] { throw Boom("x"); }, Context::cpu(), {}, {a, b});
  EXPECT_THROW(engine.wait_for_all(), Boom);
  std::atomic<int> ran{0};
  engine.push_sync([&] { ran.fetch_add(1); }, Context::cpu(), {a, b}, {});
  EXPECT_NO_THROW(engine.wait_for_var(a));
  EXPECT_NO_THROW(engine.wait_for_var(b));
  engine.wait_for_all();
  EXPECT_EQ(ran.load(), 1);
}

TEST_P(Errors, AsyncOpFailsThroughItsCallbackOrByThrowing) {
  Engine engine(GetParam().options);
  Var a = engine.new_variable(), b = engine.new_variable();
  engine.push_async([](RunContext, OnComplete done) {
    std::thread([done] { done(std::make_exception_ptr(Boom("async failure"))); }).detach();
  }, Context::cpu(), {}, {a});
  engine.push_async([](RunContext, OnComplete) { throw Boom("thrown before completing"); }, Context::cpu(), {}, {b});
  try {
    engine.wait_for_var(a);
    ADD_FAILURE();
  } catch (const Boom& e) {
    EXPECT_STREQ(e.what(), "async failure");
  }
  try {
    engine.wait_for_var(b);
    ADD_FAILURE();
  } catch (const Boom& e) {
    EXPECT_STREQ(e.what(), "thrown before completing");
  }
  engine.wait_for_all();
}

TEST_P(Errors, SecondCompletionIsAClearError) {
  Engine engine(GetParam().options);
  Var a = engine.new_variable();
  OnComplete saved;
  std::atomic<int> second_call_errors{0};
  Counter body_done;
  engine.push_async([&](RunContext, OnComplete done) {
    saved = done;
    done();  // the op is finished here; the body goes on
    try {
      done();
    } catch (const Error& e) {
      if (e.code() == Errc::double_completion) second_call_errors.fetch_add(1);
    }
    body_done.arrive();
  }, Context::cpu(), {}, {a});
  ASSERT_TRUE(body_done.wait_for(1));
  engine.wait_for_all();
  EXPECT_EQ(second_call_errors.load(), 1);
  // A stale copy, used after the record was recycled by later ops, is still caught.
  for (int i = 0; i < 1000; ++i) engine.push_async([](RunContext, OnComplete d) { d(); }, Context::cpu(), {}, {a});
  engine.wait_for_all();
  try {
    saved();
    ADD_FAILURE() << "stale OnComplete accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::double_completion);
  }
  EXPECT_EQ(engine.var_version(a), 1001U);
}

// Regression (issue 31): the error said only "more than once", not which op.
TEST_P(Errors, SecondCompletionNamesTheOp) {
  Engine engine(GetParam().options);
  Var a = engine.new_variable();
  OnComplete saved;
  std::string inside;
  Counter body_done;
  engine.push_async([&](RunContext, OnComplete done) {
    saved = done;
    done();
    try {
      done();
    } catch (const Error& e) {
      inside = e.what();
    }
    body_done.arrive();
  }, Context::cpu(), {}, {a}, {.name = "fetch"});
  ASSERT_TRUE(body_done.wait_for(1));
  engine.wait_for_all();
  EXPECT_NE(inside.find("op 'fetch'"), std::string::npos) << inside;
  // Still this op's name once its record serves other (unnamed) ops.
  for (int i = 0; i < 100; ++i) engine.push_async([](RunContext, OnComplete d) { d(); }, Context::cpu(), {}, {a});
  engine.wait_for_all();
  try {
    saved();
    ADD_FAILURE() << "stale OnComplete accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::double_completion);
    EXPECT_NE(std::string(e.what()).find("op 'fetch'"), std::string::npos) << e.what();
  }
  // An unnamed op says so.
  OnComplete unnamed;
  engine.push_async([&](RunContext, OnComplete done) {
    unnamed = done;
    done();
  }, Context::cpu(), {}, {a});
  engine.wait_for_all();
  try {
    unnamed();
    ADD_FAILURE() << "second call accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("an unnamed async op"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(AllEngines, Errors, ::testing::ValuesIn(all_engine_configs()), config_name);

TEST(ErrorsMisc, SkippedBodyIsDestroyedNotCalledAndLearnsWhy) {
  Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = 2});
  Var a = engine.new_variable(), b = engine.new_variable();
  // A body that records, when destroyed, whether it ran and why the engine skipped it.
  struct Probe {
    std::shared_ptr<std::string> why;
    std::shared_ptr<bool> called;
    bool moved_from = false;
    Probe(std::shared_ptr<std::string> w, std::shared_ptr<bool> c) : why(std::move(w)), called(std::move(c)) {}
    Probe(Probe&& o) noexcept : why(o.why), called(o.called) { o.moved_from = true; }
    ~Probe() {
      if (moved_from) return;
      if (std::exception_ptr e = Engine::skip_reason()) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          *why = ex.what();
        }
      }
    }
    void operator()(RunContext, OnComplete done) const {
      *called = true;
      done();
    }
  };
  auto why = std::make_shared<std::string>();
  auto called = std::make_shared<bool>(false);
  engine.push_sync([] { throw Boom("the reason"); }, Context::cpu(), {}, {a});
  engine.push_async(Probe(why, called), Context::cpu(), {a}, {b});
  EXPECT_THROW(engine.wait_for_var(b), Boom);
  EXPECT_FALSE(*called);
  EXPECT_EQ(*why, "the reason");
  EXPECT_FALSE(Engine::skip_reason()) << "skip_reason outside a skipped body's destructor";
  EXPECT_NO_THROW(engine.wait_for_all());  // already rethrown once, by wait_for_var
}

TEST(ErrorsMisc, ReservedPropertyIsRejected) {
  Engine engine;
  Var a = engine.new_variable();
  try {
    engine.push_sync([] {}, Context::cpu(), {}, {a}, {.prop = FnProperty::delete_var});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
  }
  EXPECT_EQ(engine.in_flight(), 0U);
}

TEST(ErrorsMisc, UnobservedErrorsAreReportedAtDestruction) {
  std::vector<ErrorReport> reports;
  {
    Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = 2,
                          .on_unobserved_error = [&](const ErrorReport& r) { reports.push_back(r); }});
    Var a = engine.new_variable();
    engine.push_sync([] { throw Boom("never waited for"); }, Context::cpu(), {}, {a}, {.name = "lonely"});
    for (int i = 0; i < 10; ++i) engine.push_sync([] { throw Boom("during shutdown"); }, Context::cpu(), {}, {});
  }  // the destructor drains and reports; it does not throw
  ASSERT_EQ(reports.size(), 11U);
  const auto lonely = std::find_if(reports.begin(), reports.end(), [](const ErrorReport& r) { return r.op_name == "lonely"; });
  ASSERT_NE(lonely, reports.end());
  EXPECT_EQ(lonely->message, "never waited for");
  EXPECT_EQ(std::count_if(reports.begin(), reports.end(), [](const ErrorReport& r) { return r.message == "during shutdown"; }), 10);
  EXPECT_FALSE(lonely->code) << "an exception with no code reports none";
}

TEST(ErrorsMisc, ReportsCarryTheCodeOfWhatTheOpThrew) {
  std::vector<ErrorReport> reports;
  {
    Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = 2,
                          .on_unobserved_error = [&](const ErrorReport& r) { reports.push_back(r); }});
    engine.push_sync([] { throw Error(Errc::invalid_argument, "bad input"); }, Context::cpu(), {}, {}, {.name = "ordo"});
    engine.push_sync([] { throw std::system_error(std::make_error_code(std::errc::no_such_file_or_directory), "open"); },
                     Context::cpu(), {}, {}, {.name = "system"});
    engine.push_sync([] { throw 42; }, Context::cpu(), {}, {}, {.name = "int"});
  }
  ASSERT_EQ(reports.size(), 3U);
  auto named = [&](const std::string& name) {
    const auto it = std::find_if(reports.begin(), reports.end(), [&](const ErrorReport& r) { return r.op_name == name; });
    return it == reports.end() ? ErrorReport{"missing", "missing", {}} : *it;
  };
  EXPECT_EQ(named("ordo").code, Errc::invalid_argument);
  EXPECT_EQ(named("ordo").message, "bad input");
  EXPECT_EQ(named("system").code, std::errc::no_such_file_or_directory);
  EXPECT_FALSE(named("int").code);
  EXPECT_EQ(named("int").message, "unknown exception");
}

// The rule of docs/guide.md ("Errors and exceptions") for the engine's own
// waits: an error wait_for_var rethrew is not rethrown by wait_for_all nor
// reported at destruction; one rethrown by wait_for_all reaches no later
// wait_for_all; one no wait got is reported once.
TEST(ErrorsMisc, EachErrorReachesOneWaitOrTheReport) {
  std::vector<ErrorReport> reports;
  {
    Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = 2,
                          .on_unobserved_error = [&](const ErrorReport& r) { reports.push_back(r); }});
    Var a = engine.new_variable(), b = engine.new_variable(), c = engine.new_variable();
    engine.push_sync([] { throw Boom("waited for"); }, Context::cpu(), {}, {a}, {.name = "waited"});
    EXPECT_THROW(engine.wait_for_var(a), Boom);
    EXPECT_NO_THROW(engine.wait_for_all());
    engine.push_sync([] { throw Boom("no outputs"); }, Context::cpu(), {b}, {}, {.name = "no-outputs"});
    EXPECT_THROW(engine.wait_for_all(), Boom);
    EXPECT_NO_THROW(engine.wait_for_all());
    engine.push_sync([] { throw Boom("never waited for"); }, Context::cpu(), {}, {c}, {.name = "lonely"});
  }
  ASSERT_EQ(reports.size(), 1U);
  EXPECT_EQ(reports[0].op_name, "lonely");
}

TEST(ErrorsMisc, AbandonedAsyncOpsAreReportedNotHung) {
  std::vector<ErrorReport> reports;
  OnComplete never;
  {
    Engine engine(Options{.kind = EngineKind::per_device, .cpu_workers = 1,
                          .shutdown_timeout = std::chrono::milliseconds(100),
                          .on_unobserved_error = [&](const ErrorReport& r) { reports.push_back(r); }});
    Var a = engine.new_variable();
    engine.push_async([&](RunContext, OnComplete done) { never = done; }, Context::cpu(), {}, {a});
    engine.push_sync([] {}, Context::cpu(), {a}, {});  // blocked behind it
  }
  ASSERT_EQ(reports.size(), 1U);
  EXPECT_NE(reports[0].message.find("abandoned"), std::string::npos) << reports[0].message;
  EXPECT_EQ(reports[0].code, Errc::shutdown_abandoned);
  // A late completion is harmless.
  EXPECT_NO_THROW(never());
}

TEST(ErrorsMisc, ThrowingDestructorOfCapturedStateDoesNotLoseTheOp) {
  Engine engine(Options{.kind = EngineKind::pooled, .cpu_workers = 2});
  Var a = engine.new_variable();
  auto big = std::make_shared<std::vector<int>>(1000, 7);  // heap-stored (large) callable
  std::array<char, 256> pad{};
  int sum = 0;
  engine.push_sync([big, pad, &sum] { sum = (*big)[0] + pad[0]; }, Context::cpu(), {}, {a});
  engine.wait_for_var(a);
  EXPECT_EQ(sum, 7);
}


}  // namespace
}  // namespace ordo::test

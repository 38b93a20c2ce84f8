// The member spelling of the coroutine forms: co_await engine.push(...) and
// co_await engine.wait_for(var), with registration at the call.
#include <algorithm>
#include <exception>
#include <stop_token>
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

// Regression (issue 31, item 10): the member form took what follows the
// lists as a forwarding pack, so an OpAttrs written as a braced list
// (`{.name = "x"}`) did not compile there, while the free form took it.
// Every argument list of the free form, spelled both ways; the ops' names are
// checked where the engine shows them: the report of an error no wait got,
// and the wait_inside_op error of a blocking wait inside the op.
/// Options of an engine that reports unobserved errors' op names into `reported`.
Options reporting_to(std::vector<std::string>& reported) {
  return Options{.kind = EngineKind::per_device,
                 .cpu_workers = 2,
                 .on_unobserved_error = [&reported](const ErrorReport& r) { reported.push_back(r.op_name); }};
}

/// What a blocking wait inside an op says about the op (its name, in the error).
std::string what_a_wait_inside_says(Engine& engine) {
  try {
    engine.wait_for_all();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(MemberSyntax, TakesTheFreeFormsArgumentsAndNamesItsOps) {
  std::vector<std::string> reported;
  {
    Engine engine(reporting_to(reported));
    Var a = engine.new_variable(), b = engine.new_variable(), c = engine.new_variable();
    std::stop_source stop;  // never stopped: the overloads taking a token
    auto running_op = [&engine] { return what_a_wait_inside_says(engine); };
    auto task = [&]() -> Task<void> {
      // Access form: leases failed on purpose and never waited for, so the
      // engine reports their errors, by op name, at destruction.
      Lease la = co_await engine.push(ordo::reads(), ordo::writes(a), Context::cpu(), {.name = "member-lease"});
      la.fail(std::make_exception_ptr(Boom("member")));
      Lease lb = co_await ordo::push(engine, ordo::reads(), ordo::writes(b), Context::cpu(), {.name = "free-lease"});
      lb.fail(std::make_exception_ptr(Boom("free")));
      { Lease l = co_await engine.push(ordo::reads(), ordo::writes(c)); }
      { Lease l = co_await engine.push(ordo::reads(), ordo::writes(c), Context::cpu()); }
      { Lease l = co_await engine.push(ordo::reads(), ordo::writes(c), stop.get_token()); }
      { Lease l = co_await engine.push(ordo::reads(), ordo::writes(c), Context::cpu(), {.name = "l"}, stop.get_token()); }
      // Function form.
      const std::string member = co_await engine.push(ordo::reads(c), ordo::writes(), running_op, Context::cpu(),
                                                      {.name = "member-fn"});
      EXPECT_NE(member.find("op 'member-fn'"), std::string::npos) << member;
      const std::string free = co_await ordo::push(engine, ordo::reads(c), ordo::writes(), running_op, Context::cpu(),
                                                   {.name = "free-fn"});
      EXPECT_NE(free.find("op 'free-fn'"), std::string::npos) << free;
      co_await engine.push(ordo::reads(c), ordo::writes(), [] {}, stop.get_token());
      co_await engine.push(ordo::reads(c), ordo::writes(), [] {}, Context::cpu(), {.name = "f"}, stop.get_token());
      // wait_for.
      co_await engine.wait_for(c);
      co_await engine.wait_for(c, stop.get_token());
    };
    run_bounded(task());
  }
  std::sort(reported.begin(), reported.end());
  EXPECT_EQ(reported, (std::vector<std::string>{"free-lease", "member-lease"}));
}

// Issue 43, item 6: OpAttrs without a Context (the CPU context), in the
// free and member spellings of both forms, with and without a stop token,
// braced and named. The names show that the attributes reached the ops.
TEST(MemberSyntax, TakesOpAttrsWithoutAContext) {
  std::vector<std::string> reported;
  {
    Engine engine(reporting_to(reported));
    Var a = engine.new_variable(), b = engine.new_variable(), c = engine.new_variable();
    std::stop_source stop;
    auto running_op = [&engine] { return what_a_wait_inside_says(engine); };
    auto task = [&]() -> Task<void> {
      Lease la = co_await engine.push(ordo::reads(), ordo::writes(a), {.name = "member-lease"});
      EXPECT_FALSE(la.run_context().ctx.is_gpu());
      la.fail(std::make_exception_ptr(Boom("member")));
      const OpAttrs named{.name = "free-lease"};
      Lease lb = co_await ordo::push(engine, ordo::reads(), ordo::writes(b), named, stop.get_token());
      lb.fail(std::make_exception_ptr(Boom("free")));
      { Lease l = co_await engine.push(ordo::reads(), ordo::writes(c), {.name = "l"}, stop.get_token()); }
      const std::string member = co_await engine.push(ordo::reads(c), ordo::writes(), running_op, {.name = "member-fn"});
      EXPECT_NE(member.find("op 'member-fn'"), std::string::npos) << member;
      const std::string free =
          co_await ordo::push(engine, ordo::reads(c), ordo::writes(), running_op, {.name = "free-fn"}, stop.get_token());
      EXPECT_NE(free.find("op 'free-fn'"), std::string::npos) << free;
      const int n = co_await engine.push(ordo::reads(c), ordo::writes(), [] { return 7; },
                                         {.prop = FnProperty::cpu_prioritized}, stop.get_token());
      EXPECT_EQ(n, 7);
    };
    run_bounded(task());
  }
  std::sort(reported.begin(), reported.end());
  EXPECT_EQ(reported, (std::vector<std::string>{"free-lease", "member-lease"}));
}

}  // namespace
}  // namespace ordo::test
